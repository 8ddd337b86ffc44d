"""CUDA frees the driver refuses give nothing back: no FREE row is written
for them, the hooks keep the block, mapping or handle, and the user is told
on stderr. And one cuMemUnmap frees every mapping in its range, however many.

The program (simulated CUDA driver, tests/fixtures/cuda, which refuses
these calls as the real one does), device 0:
  range 1   a = cuMemAlloc 1 MiB; h1 = cuMemCreate 2 MiB, mapped (m1)   3 MiB
            r, a host buffer, cuMemHostRegister'ed (pinned)
            refused: cuMemFree_v2(a + 256)   (inside a block)
                     cuMemFree_v2(m1)         (a mapping, no cuMemAlloc block)
                     cuMemFreeAsync(h1)       (a VMM handle)
                     cuMemRelease(a)          (a cuMemAlloc block)
                     cuMemFreeHost(r)         (registered, not cuMemAllocHost'ed)
                     cuMemHostUnregister(r + 4 KiB)  (inside r: CUresult 713)
                     cuMemUnmap(m1, 1 MiB)    (cuts m1)
  off       refused: cuMemFree_v2(m1), cuMemRelease(a)   (not told: collection is off)
            b = cuMemAlloc 1 MiB                                          4 MiB
  range 2   refused: cuMemRelease(b)
            h2 = cuMemCreate 2 MiB, mapped in 100 pieces of 64 KiB,
            released, then unmapped with one cuMemUnmap: h2 goes back     6 MiB -> 4 MiB
            cuMemHostUnregister(r), cuMemFree_v2(a)                       3 MiB
            refused: cuMemHostUnregister(r)  (again: CUresult 713)
  held at stop(): h1 and b, 3 MiB: h1 a leak, b "not judged" (made while
  collection was off)
"""

import re

import pytest

from conftest import parse_attr
from test_cuda_ranges_vmm import device_figures
from test_python_api_ranges import CUDA_ENV, CUDA_VMM_PRELUDE, run_between_ranges, two_ranges

MiB = 1 << 20
PIECES = 100  # mappings one cuMemUnmap ends: more than the hook takes at a time (64)

PROG = """
import ctypes
import msmemscope

if {api!r}:
    msmemscope.config(device="cuda,cpu", analysis="leaks,decompose", sinks="csv,html", output={out!r})
""" + CUDA_VMM_PRELUDE.lstrip("\n") + """def used():
    free, total = ctypes.c_size_t(), ctypes.c_size_t()
    assert cu.cuMemGetInfo_v2(ctypes.byref(free), ctypes.byref(total)) == 0
    return total.value - free.value
def alloc(label):
    d = ctypes.c_uint64()
    assert cu.cuMemAlloc_v2(ctypes.byref(d), ctypes.c_size_t(1 << 20)) == 0
    print(f"{{label}} 0x{{d.value:016x}}", flush=True)
    return d.value
def mmap(label, at, n, h):
    assert cu.cuMemMap(ctypes.c_uint64(at), ctypes.c_size_t(n), ctypes.c_size_t(0), h, ctypes.c_ulonglong(0)) == 0
    print(f"{{label}} 0x{{at:016x}}", flush=True)
def refused(rc):
    assert rc == 1, rc                 # CUDA_ERROR_INVALID_VALUE
u64, size = ctypes.c_uint64, ctypes.c_size_t
va = ctypes.c_uint64()
assert cu.cuMemAddressReserve(ctypes.byref(va), size(8 * MB2), size(0), u64(0), ctypes.c_ulonglong(0)) == 0
va = va.value
r = ctypes.create_string_buffer(8192)
rp = ctypes.cast(r, ctypes.c_void_p).value
msmemscope.start()                     # range 1
a = alloc("a")
h1 = create("h1")
mmap("m1", va, MB2, h1)
assert cu.cuMemHostRegister_v2(ctypes.c_void_p(rp), size(8192), ctypes.c_uint(0)) == 0
print(f"r 0x{{rp:016x}}", flush=True)
refused(cu.cuMemFree_v2(u64(a + 256)))
refused(cu.cuMemFree_v2(u64(va)))
refused(cu.cuMemFreeAsync(u64(h1.value), ctypes.c_void_p(0)))
refused(cu.cuMemRelease(u64(a)))
refused(cu.cuMemFreeHost(ctypes.c_void_p(rp)))
assert cu.cuMemHostUnregister(ctypes.c_void_p(rp + 4096)) == 713   # CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED
refused(cu.cuMemUnmap(u64(va), size(MB2 // 2)))
assert used() == 3 << 20
msmemscope.stop()
refused(cu.cuMemFree_v2(u64(va)))      # collection off
refused(cu.cuMemRelease(u64(a)))
b = alloc("b")
msmemscope.start()                     # range 2
refused(cu.cuMemRelease(u64(b)))
h2 = create("h2")
vb = va + 4 * MB2
piece = 64 << 10
for i in range({pieces}):
    mmap(f"p{{i}}", vb + i * piece, piece, h2)
assert cu.cuMemRelease(h2) == 0        # mapped: the driver keeps it until the unmap
assert used() == 6 << 20
assert cu.cuMemUnmap(u64(vb), size({pieces} * piece)) == 0   # all of them, one call
assert used() == 4 << 20
assert cu.cuMemHostUnregister(ctypes.c_void_p(rp)) == 0
assert cu.cuMemFree_v2(u64(a)) == 0
assert used() == 3 << 20
assert cu.cuMemHostUnregister(ctypes.c_void_p(rp)) == 713         # already unregistered
msmemscope.stop()
"""


@pytest.fixture(params=[True, False], ids=["api_alone", "under_cli"])
def refused_run(request, tmp_path):
    return run_between_ranges(tmp_path, PROG, request.param, "cuda,cpu", CUDA_ENV, analysis="leaks,decompose",
                              cli_extra=["--sinks=csv,html"], pieces=PIECES)


def device_rows(procdir, names):
    """Device 0's MALLOC/FREE rows of each range as (name, Event, Attr); the
    100 pieces of h2 named "p"."""
    rows, marks = two_ranges(procdir, "0")
    named = [(i, names.get(int(r["Ptr"], 16), r["Ptr"]), r["Event"], parse_attr(r["Attr"]))
             for i, r in enumerate(rows) if r["Event"] in ("MALLOC", "FREE")]
    named = [(i, "p" if re.fullmatch(r"p\d+", n) else n, e, a) for i, n, e, a in named]
    return [[(n, e, a) for i, n, e, a in named if marks[2 * k] < i < marks[2 * k + 1]] for k in (0, 1)]


def test_refused_frees_write_no_row_and_keep_the_block(refused_run):
    # Before: each refused free wrote its FREE before the driver said no:
    # in range 1 m1, h1, a (cuMemRelease) and r had FREE rows while the
    # program still held them, in range 2 b (cuMemRelease).
    p, procdir, names = refused_run
    first, second = device_rows(procdir, names)
    assert [(n, e) for n, e, a in first] == [("a", "MALLOC"), ("h1", "MALLOC"), ("m1", "MALLOC")], first
    assert [(n, e, a["device_used"]) for n, e, a in first] == [
        ("a", "MALLOC", str(MiB)), ("h1", "MALLOC", str(3 * MiB)), ("m1", "MALLOC", str(3 * MiB))], first
    # range 2: b's shadow MALLOC at its start, then what the program did
    assert [(n, e, a.get("shadow")) for n, e, a in second[:1]] == [("b", "MALLOC", "true")], second
    rest = [(n, e) for n, e, a in second[1:]]
    assert rest == [("h2", "MALLOC")] + [("p", "MALLOC")] * PIECES + [("p", "FREE")] * PIECES + [
        ("h2", "FREE"), ("a", "FREE")], rest
    assert [a["device_used"] for n, e, a in second if (n, e) in (("h2", "FREE"), ("a", "FREE"))] == [
        str(4 * MiB), str(3 * MiB)], second
    assert "never recorded" not in p.stderr, p.stderr


def test_the_registered_buffer_is_held_until_it_is_unregistered(refused_run):
    # Before: cuMemFreeHost(r), refused (r was registered, not allocated by
    # cuMemFreeHost's driver), wrote r's FREE in range 1. The refused
    # cuMemHostUnregister calls (inside r in range 1, r again after its
    # unregister in range 2) write no row either.
    p, procdir, names = refused_run
    rows, marks = two_ranges(procdir, "cpu")
    pinned = [(i, r["Event"]) for i, r in enumerate(rows)
              if r["Event Type"] == "HOST_PINNED" and names.get(int(r["Ptr"], 16)) == "r"]
    assert [e for i, e in pinned] == ["MALLOC", "FREE"], pinned
    assert marks[0] < pinned[0][0] < marks[1] and marks[2] < pinned[1][0] < marks[3], (pinned, marks)


def test_each_refused_free_is_told_on_stderr(refused_run):
    p, procdir, names = refused_run
    addr = {n: a for a, n in names.items()}
    told = [line for line in p.stderr.splitlines() if "failed with CUresult" in line]
    tail = ": the driver gave nothing back, so no FREE row is written and the profile keeps the memory as held"
    h1 = addr["h1"]
    assert told == [f"[msmemscope] warning: {call} failed with CUresult {rc}{tail}" for call, rc in (
        (f"cuMemFree_v2(0x{addr['a'] + 256:016x})", 1), (f"cuMemFree_v2(0x{addr['m1']:016x})", 1),
        (f"cuMemFreeAsync(0x{h1:016x})", 1), (f"cuMemRelease(0x{addr['a']:016x})", 1),
        (f"cuMemFreeHost(0x{addr['r']:016x})", 1), (f"cuMemHostUnregister(0x{addr['r'] + 4096:016x})", 713),
        (f"cuMemUnmap(0x{addr['m1']:016x}, {MiB})", 1), (f"cuMemRelease(0x{addr['b']:016x})", 1),
        (f"cuMemHostUnregister(0x{addr['r']:016x})", 713))], p.stderr


def test_refused_frees_are_not_told_while_collection_is_off(refused_run):
    # Before: cuMemFree_v2(m1) and cuMemRelease(a), refused between stop()
    # and start(), were told: "so no FREE row is written", though none
    # would have been written while collection was off.
    p, procdir, names = refused_run
    addr = {n: a for a, n in names.items()}
    told = [line for line in p.stderr.splitlines() if "failed with CUresult" in line]
    assert [line for line in told if f"cuMemRelease(0x{addr['a']:016x})" in line] == [
        f"[msmemscope] warning: cuMemRelease(0x{addr['a']:016x}) failed with CUresult 1: the driver gave nothing "
        "back, so no FREE row is written and the profile keeps the memory as held"], p.stderr
    assert len([line for line in told if f"cuMemFree_v2(0x{addr['m1']:016x})" in line]) == 1, p.stderr


def test_leaks_peak_and_final_are_what_the_program_held(refused_run):
    # Before: peak 3.0 MiB, final 2.0 MiB; the leak report had h2 alone (a,
    # h1 and b "freed" by refused calls; h2, whose last 36 mappings were
    # left in the table, never freed).
    p, procdir, names = refused_run
    lines = p.stdout.splitlines()
    assert "  0/HAL: peak 6.0 MiB, final 3.0 MiB" in lines, p.stdout
    assert "  0/HAL mapped: peak 8.2 MiB, final 2.0 MiB" in lines, p.stdout
    assert device_figures(p, procdir, names) == {
        "leaks": [("1", "2.000000")], "held": {"h1"}, "owners": [(3 * MiB, 6 * MiB)],
        "chart": (6 * MiB, 3 * MiB)}, p.stdout
    assert ("  Not judged on device 0: 1 block(s), 1048576 bytes allocated before collection started or between a "
            "stop() and the next start() were still allocated at stop() (no stack: allocated while collection was "
            "off)") in lines, p.stdout
