"""cuMemRelease of a handle that is still mapped: the driver gives the memory
back only once the handle is released AND its last mapping unmapped
(cuMemRelease in the CUDA driver API). The handle's FREE is written at that
unmap, so that the rows, the device's peak and final bytes, the leak report,
the decomposition and the html chart hold the memory while the program can
still use it.

The program (simulated CUDA driver, tests/fixtures/cuda, which gives the
memory back as the real one does: the program checks it with
cuMemGetInfo), device 0, 2 MiB handles:
  range 1   h1, mapped twice (m1a, m1b), released               2 MiB
            h2 (kept to the end)                                 4 MiB
            unmap m1a; unmap m1b: h1's memory goes back          2 MiB
            h3, mapped (m3), released: still mapped              4 MiB
            hn created and released, never mapped: gone at once  6 MiB -> 4 MiB (the peak)
  off       unmap m3: h3 goes back                               2 MiB
            h4, mapped (m4), released: still mapped              4 MiB
  range 2   unmap m4: h4 goes back                               2 MiB
            h5, mapped (m5), released, kept mapped to the end    4 MiB
            an unmap that would cut m5: refused by the driver, no row
  leaked at stop(): h2 and h5, 4 MiB in 2 blocks
"""

import pytest

from conftest import parse_attr
from test_cuda_ranges_vmm import device_figures
from test_python_api_ranges import CUDA_ENV, CUDA_VMM_PRELUDE, run_between_ranges, two_ranges

MiB = 1 << 20

PROG = """
import ctypes
import msmemscope

if {api!r}:
    msmemscope.config(device="cuda", analysis="leaks,decompose", sinks="csv,html", output={out!r})
""" + CUDA_VMM_PRELUDE.lstrip("\n") + """def used():
    free, total = ctypes.c_size_t(), ctypes.c_size_t()
    assert cu.cuMemGetInfo_v2(ctypes.byref(free), ctypes.byref(total)) == 0
    return total.value - free.value
def mmap(label, at, h):
    assert cu.cuMemMap(ctypes.c_uint64(at), ctypes.c_size_t(MB2), ctypes.c_size_t(0), h, ctypes.c_ulonglong(0)) == 0
    print(f"{{label}} 0x{{at:016x}}", flush=True)
def unmap(at):
    assert cu.cuMemUnmap(ctypes.c_uint64(at), ctypes.c_size_t(MB2)) == 0
def release(h):
    assert cu.cuMemRelease(h) == 0
va = ctypes.c_uint64()
assert cu.cuMemAddressReserve(ctypes.byref(va), ctypes.c_size_t(8 * MB2), ctypes.c_size_t(0), ctypes.c_uint64(0),
                              ctypes.c_ulonglong(0)) == 0
va = va.value
msmemscope.start()                     # range 1
h1 = create("h1")
mmap("m1a", va, h1)
mmap("m1b", va + MB2, h1)              # two mappings of one handle
release(h1)
assert used() == MB2                   # (the driver keeps it: still mapped)
h2 = create("h2")
unmap(va)
assert used() == 2 * MB2
unmap(va + MB2)                        # its last mapping: h1's memory goes back
assert used() == MB2
h3 = create("h3")
mmap("m3", va + 2 * MB2, h3)
release(h3)
hn = create("hn")                      # never mapped: its release frees it at once
release(hn)
assert used() == 2 * MB2
msmemscope.stop()
unmap(va + 2 * MB2)                    # collection off: h3 goes back ...
h4 = create("h4")                      # ... h4 is made, mapped and released
mmap("m4", va + 3 * MB2, h4)
release(h4)
assert used() == 2 * MB2
msmemscope.start()                     # range 2
unmap(va + 3 * MB2)
assert used() == MB2
h5 = create("h5")
mmap("m5", va + 4 * MB2, h5)
release(h5)                            # kept mapped to the end, as h2 is kept
assert cu.cuMemUnmap(ctypes.c_uint64(va + 4 * MB2), ctypes.c_size_t(MB2 // 2)) == 1   # a part of m5: refused
assert used() == 2 * MB2
msmemscope.stop()
"""


@pytest.fixture(params=[True, False], ids=["api_alone", "under_cli"])
def release_run(request, tmp_path):
    return run_between_ranges(tmp_path, PROG, request.param, "cuda", CUDA_ENV, analysis="leaks,decompose",
                              cli_extra=["--sinks=csv,html"])


def test_a_handle_released_while_mapped_is_freed_at_its_last_unmap(release_run):
    # Before: each handle's FREE was written at its cuMemRelease, mapped or
    # not: h1 FREE before h2's MALLOC, h3's, h4's and h5's at their release.
    p, procdir, names = release_run
    rows, marks = two_ranges(procdir, "0")
    mem = [(i, names[int(r["Ptr"], 16)], r["Event"], parse_attr(r["Attr"]), int(r["Timestamp(ns)"]))
           for i, r in enumerate(rows) if r["Event"] in ("MALLOC", "FREE") and i < marks[3]]
    first = [(n, e, a["device_used"]) for i, n, e, a, t in mem if marks[0] < i < marks[1]]
    assert first == [
        ("h1", "MALLOC", str(2 * MiB)), ("m1a", "MALLOC", str(2 * MiB)), ("m1b", "MALLOC", str(2 * MiB)),
        ("h2", "MALLOC", str(4 * MiB)),           # h1's memory still in use
        ("m1a", "FREE", str(4 * MiB)),            # one mapping of h1 left
        ("m1b", "FREE", str(4 * MiB)), ("h1", "FREE", str(2 * MiB)),   # its last: h1 goes
        ("h3", "MALLOC", str(4 * MiB)), ("m3", "MALLOC", str(4 * MiB)),
        ("hn", "MALLOC", str(6 * MiB)), ("hn", "FREE", str(4 * MiB)),  # never mapped: as before
    ], first
    second = [(n, e, a.get("shadow")) for i, n, e, a, t in mem if marks[2] < i < marks[3]]
    # at its start: the FREEs of what went while collection was off (m3 and
    # then h3, with its last mapping), then the shadow MALLOCs of h4 and m4
    assert sorted(second[:2]) == [("h3", "FREE", "true"), ("m3", "FREE", "true")], second
    assert sorted(second[2:4]) == [("h4", "MALLOC", "true"), ("m4", "MALLOC", "true")], second
    assert second[4:] == [("m4", "FREE", None), ("h4", "FREE", None), ("h5", "MALLOC", None),
                          ("m5", "MALLOC", None)], second
    ids = {}
    for i, n, e, a, t in mem:
        ids.setdefault(n, {})[e] = a["allocation_id"]
    for n in ("h1", "h3", "h4", "m1a", "m1b", "m3", "m4", "hn"):
        assert ids[n]["MALLOC"] == ids[n]["FREE"], (n, ids[n])
    # h1's FREE is the unmap's, in time too: at or after its last mapping's FREE, after h2 was made
    when = {(n, e): t for i, n, e, a, t in mem}
    assert when["h2", "MALLOC"] <= when["m1b", "FREE"] <= when["h1", "FREE"] <= when["h3", "MALLOC"], when
    assert "never recorded" not in p.stderr, p.stderr


def test_device_figures_leaks_and_chart_hold_the_memory_until_its_last_unmap(release_run):
    # Before: peak 4.0 MiB, final 2.0 MiB; h5 was not a leak (1 block: h2).
    p, procdir, names = release_run
    lines = p.stdout.splitlines()
    assert "  0/HAL: peak 6.0 MiB, final 4.0 MiB" in lines, p.stdout
    assert "  0/HAL mapped: peak 4.0 MiB, final 2.0 MiB" in lines, p.stdout
    assert device_figures(p, procdir, names) == {
        "leaks": [("2", "4.000000")], "held": {"h2", "h5"}, "owners": [(4 * MiB, 6 * MiB)],
        "chart": (6 * MiB, 4 * MiB)}, p.stdout
