"""CUDA memory made while collection is off (between two ranges of the
Python API, or before start() under the CLI with --collect-mode=deferred)
is known at the next start() as what it is: its shadow MALLOC carries the
Attr a MALLOC recorded in a range carries (driver:cuda, alloc_type; a
mapping's virtual:true), and what the user reads agrees with what the
program did: the device's peak and final bytes (console, CSV, html), the
mapped pool's, the leak report, no word about frees that pair with nothing.

The program (simulated CUDA driver, tests/fixtures/cuda), device 0:
  range 1   h1 = cuMemCreate 2 MiB                           2 MiB
  off       blk = cuMemAlloc 1 MiB, h2 = cuMemCreate 2 MiB   5 MiB (the peak)
            cuMemMap m1 (h1) and m2 (h2), 2 MiB each          (views of h1, h2)
            cuMemMap and cuMemUnmap m0 (h2)                   (no rows)
  range 2   cuMemUnmap m1+m2, cuMemRelease h2, cuMemFree blk 2 MiB
            h3 = cuMemCreate 2 MiB, cuMemMap m3 (h3), kept    4 MiB
  leaked at stop(): h1 and h3, 4 MiB in 2 blocks (m3 is h3's memory)
"""
import re

import pytest

from conftest import dump_files, parse_attr, read_dump
from sinks_common import load_trace
from test_python_api_ranges import CUDA_ENV, CUDA_VMM_PRELUDE, run_between_ranges, two_ranges

MiB = 1 << 20

# The simulated driver's prelude, and mmap(label, at, h): maps h's 2 MiB at
# `at` and prints where (the programs' format strings double their braces).
PRELUDE_WITH_MMAP = CUDA_VMM_PRELUDE.lstrip("\n") + """def mmap(label, at, h):
    assert cu.cuMemMap(ctypes.c_uint64(at), ctypes.c_size_t(MB2), ctypes.c_size_t(0), h, ctypes.c_ulonglong(0)) == 0
    print(f"{{label}} 0x{{at:016x}}", flush=True)
"""

PROG = """
import ctypes
import msmemscope

if {api!r}:
    msmemscope.config(device="cuda", analysis="leaks,decompose", sinks="csv,html", output={out!r})
""" + PRELUDE_WITH_MMAP + """va = ctypes.c_uint64()
assert cu.cuMemAddressReserve(ctypes.byref(va), ctypes.c_size_t(4 * MB2), ctypes.c_size_t(0), ctypes.c_uint64(0),
                              ctypes.c_ulonglong(0)) == 0
va = va.value
msmemscope.start()
h1 = create("h1")                      # range 1
msmemscope.stop()
blk = ctypes.c_uint64()                # collection off: a block made before range 2 ...
assert cu.cuMemAlloc_v2(ctypes.byref(blk), ctypes.c_size_t(1 << 20)) == 0
print(f"blk 0x{{blk.value:016x}}", flush=True)
h2 = create("h2")
mmap("m0", va + 3 * MB2, h2)           # (mapped and unmapped while it is off: no rows)
assert cu.cuMemUnmap(ctypes.c_uint64(va + 3 * MB2), ctypes.c_size_t(MB2)) == 0
mmap("m1", va, h1)                     # ... and mappings made while it is off
mmap("m2", va + MB2, h2)
msmemscope.start()
assert cu.cuMemUnmap(ctypes.c_uint64(va), ctypes.c_size_t(2 * MB2)) == 0   # range 2: both unmapped
assert cu.cuMemRelease(h2) == 0
assert cu.cuMemFree_v2(blk) == 0
h3 = create("h3")
mmap("m3", va + 2 * MB2, h3)           # kept to the end, as h1 and h3
msmemscope.stop()
"""


@pytest.fixture(params=[True, False], ids=["api_alone", "under_cli"])
def vmm_run(request, tmp_path):
    return run_between_ranges(tmp_path, PROG, request.param, "cuda", CUDA_ENV, analysis="leaks,decompose",
                              cli_extra=["--sinks=csv,html"])


def mem_rows(procdir, names):
    rows, marks = two_ranges(procdir, "0")
    mem = [(i, names[int(r["Ptr"], 16)], r["Event"], r["Event Type"], parse_attr(r["Attr"]))
           for i, r in enumerate(rows) if r["Event"] in ("MALLOC", "FREE")]
    return marks, mem


def test_rows_made_while_off_carry_the_attr_of_rows_recorded_in_a_range(vmm_run):
    # Before: the mappings made while collection was off had no row, and
    # their unmap in range 2 was dropped ("never recorded ... through an
    # entry point the hooks do not cover"); the shadow MALLOCs of blk and h2
    # said shadow:true alone, not driver:cuda and their alloc_type.
    p, procdir, names = vmm_run
    marks, mem = mem_rows(procdir, names)
    assert all(m[3] == "HAL" for m in mem), mem
    assert "m0" not in {m[1] for m in mem}, mem
    inside = [m for m in mem if m[0] < marks[3]]
    ranges = [[(n, e) for i, n, e, t, a in inside if marks[2 * k] < i < marks[2 * k + 1]] for k in (0, 1)]
    assert ranges[0] == [("h1", "MALLOC")], ranges
    # range 2: the shadow MALLOCs (in no set order) at its start, then what the program did
    assert sorted(ranges[1][:4]) == [("blk", "MALLOC"), ("h2", "MALLOC"), ("m1", "MALLOC"), ("m2", "MALLOC")]
    assert ranges[1][4:] == [("m1", "FREE"), ("m2", "FREE"), ("h2", "FREE"), ("blk", "FREE"), ("h3", "MALLOC"),
                             ("m3", "MALLOC")], ranges
    mallocs = {n: a for i, n, e, t, a in mem if e == "MALLOC"}
    frees = {n: a for i, n, e, t, a in inside if e == "FREE"}
    recorded = {"driver": "cuda"}
    for n, kind in (("blk", "alloc"), ("h2", "create"), ("m1", "map"), ("m2", "map")):
        extra = {k: v for k, v in mallocs[n].items() if k not in ("allocation_id", "addr", "size", "owner")}
        want = {"shadow": "true", "driver": "cuda", "alloc_type": kind}
        if kind == "map":
            want["virtual"] = "true"
        assert extra == want, (n, mallocs[n])
        assert frees[n]["allocation_id"] == mallocs[n]["allocation_id"], (n, frees[n], mallocs[n])
        assert frees[n]["size"] == mallocs[n]["size"] == str(MiB if n == "blk" else 2 * MiB), (n, frees[n])
    for n, kind in (("h1", "create"), ("h3", "create"), ("m3", "map")):
        assert {k: mallocs[n].get(k) for k in recorded} == recorded and mallocs[n]["alloc_type"] == kind
    # one owner for them all (the decomposition's)
    assert len({a.get("owner") for a in mallocs.values()}) == 1, mallocs
    # the device's bytes as the program held them: mappings never counted again
    assert [(n, e, a.get("device_used")) for i, n, e, t, a in inside if marks[2] < i and not a.get("shadow")] == [
        ("m1", "FREE", str(5 * MiB)), ("m2", "FREE", str(5 * MiB)), ("h2", "FREE", str(3 * MiB)),
        ("blk", "FREE", str(2 * MiB)), ("h3", "MALLOC", str(4 * MiB)), ("m3", "MALLOC", str(4 * MiB))]
    # the mapped pool's running total: m1 and m2 (4 MiB) down to m3
    assert [(n, e, a.get("used")) for i, n, e, t, a in inside if n[0] == "m" and not a.get("shadow")] == [
        ("m1", "FREE", str(2 * MiB)), ("m2", "FREE", "0"), ("m3", "MALLOC", str(2 * MiB))], inside
    assert "never recorded" not in p.stderr, p.stderr


def device_figures(p, procdir, names):
    """Device 0's figures as each view shows them: the leak report's
    (blocks, Mb) and the names of its blocks, decompose's (live, peak) per
    owner, and the html chart's (peak, final)."""
    leaks = re.findall(r"Driver memory still allocated at stop\(\) on device 0: (\d+) block\(s\), ([\d.]+) Mb\(s\)",
                       p.stdout)
    held = {names.get(int(m, 16)) for m in re.findall(r"HAL block of [\d.]+ Mb\(s\) at (0x[0-9a-f]+)", p.stdout)}
    table = p.stdout.split("decompose: memory by owner on device 0:\n", 1)[1].splitlines()[1:]
    owners = [m.groups() for m in map(re.compile(r"  (\S+) +(\d+) +(\d+) +(\d+)").fullmatch, table[:3]) if m]
    html = next(procdir.glob("report_*.html")).read_text()
    chart = re.search(r'"label":"cuda:0 device memory \(driver\)",[^{}\[]*?"peak":(\d+),[^{}\[]*?"final":(\d+)', html)
    return {"leaks": leaks, "held": held,
            "owners": [(int(live), int(peak)) for o, live, peak, n in owners],
            "chart": chart and (int(chart.group(1)), int(chart.group(2)))}


def test_device_figures_and_leaks_count_each_byte_once(vmm_run):
    p, procdir, names = vmm_run
    lines = p.stdout.splitlines()
    assert "  0/HAL: peak 5.0 MiB, final 4.0 MiB" in lines, p.stdout
    assert "  0/HAL mapped: peak 4.0 MiB, final 2.0 MiB" in lines, p.stdout
    # leaked at stop(): h1 and h3, not m3 (h3's memory, mapped); the
    # decomposition: one owner, which held 5 MiB at most and 4 MiB at the end
    assert device_figures(p, procdir, names) == {
        "leaks": [("2", "4.000000")], "held": {"h1", "h3"}, "owners": [(4 * MiB, 5 * MiB)],
        "chart": (5 * MiB, 4 * MiB)}, p.stdout


# Under the CLI (its agent is in the process from the start): the agent's
# table of Attr texts for blocks made while collection is off filled by other
# texts first, through the agent's own entry point.
FULL_TEXTS = """
import ctypes
import msmemscope

""" + CUDA_VMM_PRELUDE.lstrip("\n") + """agent = ctypes.CDLL(None)
agent.msms_agent_off_alloc_attrs.argtypes = [ctypes.c_uint16, ctypes.c_uint16, ctypes.c_int16, ctypes.c_uint64,
                                             ctypes.c_uint64, ctypes.c_char_p]
agent.msms_agent_off_free_device.argtypes = [ctypes.c_uint16, ctypes.c_uint16, ctypes.c_int16, ctypes.c_uint64]
va = ctypes.c_uint64()
assert cu.cuMemAddressReserve(ctypes.byref(va), ctypes.c_size_t(MB2), ctypes.c_size_t(0), ctypes.c_uint64(0),
                              ctypes.c_ulonglong(0)) == 0
print(f"m 0x{{va.value:016x}}", flush=True)
msmemscope.start()
h = create("h")
msmemscope.stop()
for i in range(70):                    # 70 texts: more than the agent keeps
    assert agent.msms_agent_off_alloc_attrs(10, 3, 0, 0x1000 + 16 * i, 16, f"filler:{{i}}".encode()) == 1
    agent.msms_agent_off_free_device(10, 3, 0, 0x1000 + 16 * i)
assert cu.cuMemMap(va, ctypes.c_size_t(MB2), ctypes.c_size_t(0), h, ctypes.c_ulonglong(0)) == 0   # collection off
msmemscope.start()
assert cu.cuMemUnmap(va, ctypes.c_size_t(MB2)) == 0
assert cu.cuMemRelease(h) == 0
msmemscope.stop()
"""


def test_a_mapping_made_while_off_is_kept_when_the_agent_has_no_room_for_its_text(tmp_path):
    # Before: past 63 distinct texts the mapping was not remembered ("1
    # block(s) allocated while collection was off could not be remembered"),
    # and its unmap in range 2 paired with nothing ("never recorded").
    p, procdir, names = run_between_ranges(tmp_path, FULL_TEXTS, False, "cuda", CUDA_ENV)
    rows, marks = two_ranges(procdir, "0")
    mem = [(i, names[int(r["Ptr"], 16)], r["Event"], parse_attr(r["Attr"])) for i, r in enumerate(rows)
           if r["Event"] in ("MALLOC", "FREE") and i < marks[3]]
    assert [(n, e) for i, n, e, a in mem] == [("h", "MALLOC"), ("m", "MALLOC"), ("m", "FREE"), ("h", "FREE")], mem
    (_, _, _, m_malloc), (i_free, _, _, m_free) = mem[1], mem[2]
    assert marks[2] < mem[1][0] < i_free < marks[3], (marks, mem)
    # the text it would have carried is gone, but what the host counts by is there: its memory is h's
    extra = {k: v for k, v in m_malloc.items() if k not in ("allocation_id", "addr", "size", "owner")}
    assert extra == {"shadow": "true", "virtual": "true"}, m_malloc
    assert m_free["allocation_id"] == m_malloc["allocation_id"] and m_free["device_used"] == str(2 * MiB), m_free
    assert mem[3][3]["device_used"] == "0", mem
    assert "  0/HAL: peak 2.0 MiB, final 0 B" in p.stdout.splitlines(), p.stdout
    assert "could not be remembered" not in p.stderr and "never recorded" not in p.stderr, p.stderr


# ---------------------------------------------------------------- --steps: a mapping unmapped in a dropped step
# --steps=1,3 drops step 2, where m1 is unmapped, h1 mapped again as m2 and
# blk allocated; step 3 starts with their shadow rows (framework/host/
# step_gap.h), then runs out of memory at once. The program holds then h1
# (2 MiB) and blk (1 MiB): 3 MiB, its mappings being h1's memory.
STEPS_PROG = """
import ctypes
import msmemscope

""" + PRELUDE_WITH_MMAP + """va = ctypes.c_uint64()
assert cu.cuMemAddressReserve(ctypes.byref(va), ctypes.c_size_t(2 * MB2), ctypes.c_size_t(0), ctypes.c_uint64(0),
                              ctypes.c_ulonglong(0)) == 0
va = va.value
msmemscope.start()
h1 = create("h1")                      # step 1
mmap("m1", va, h1)
msmemscope.step()
assert cu.cuMemUnmap(ctypes.c_uint64(va), ctypes.c_size_t(MB2)) == 0   # step 2 (not selected)
mmap("m2", va + MB2, h1)
blk = ctypes.c_uint64()
assert cu.cuMemAlloc_v2(ctypes.byref(blk), ctypes.c_size_t(1 << 20)) == 0
print(f"blk 0x{{blk.value:016x}}", flush=True)
msmemscope.step()
big = ctypes.c_uint64()                # step 3: out of memory
assert cu.cuMemAlloc_v2(ctypes.byref(big), ctypes.c_size_t(1 << 40)) == 2
h3 = create("h3")
msmemscope.step()
msmemscope.stop()
"""
OOM_LINE = "[msmemscope] warning: oom: cuMemAlloc_v2 of 1099511627776 bytes failed on device 0 with {} bytes allocated"


@pytest.mark.parametrize("analysis", ["leaks", "oom"])
def test_a_mappings_shadow_free_says_virtual_and_the_device_keeps_its_bytes(tmp_path, analysis):
    # Before: the shadow FREE of m1 (unmapped in step 2) said shadow:true
    # alone, where m1's MALLOC said virtual:true: the views that count a
    # device's bytes by that Attr took m1's 2 MiB off the device at step 3's
    # start. The trace's "cuda:0 in use" read 1 MiB there, and the failure
    # at once "with 1048576 bytes allocated" (the OOM_Snapshot row that the
    # host writes without --analysis=oom), where the run without --steps
    # says 3145728. With --analysis=oom both runs said 5242880: the oom
    # analysis counted m2 beside h1, whose memory it is.
    (tmp_path / "full").mkdir()
    whole, _, _ = run_between_ranges(tmp_path / "full", STEPS_PROG, False, "cuda", CUDA_ENV, analysis=analysis,
                                     cli_extra=["--sinks=csv"])
    p, procdir, names = run_between_ranges(tmp_path, STEPS_PROG, False, "cuda", CUDA_ENV, analysis=analysis,
                                           cli_extra=["--steps=1,3", "--sinks=csv,trace"])
    assert "  0/HAL: peak 5.0 MiB, final 5.0 MiB" in whole.stdout.splitlines(), whole.stdout
    rows = read_dump(dump_files(procdir, "0")[0])
    shadow_frees = [(names[int(r["Ptr"], 16)], r["attr"]) for r in rows
                    if r["Event"] == "FREE" and r["attr"].get("shadow") == "true"]
    # m1 at step 3's start; at the end the blocks still live, m2 among them
    assert [n for n, a in shadow_frees] == ["m1", "h1", "m2", "blk", "h3"], shadow_frees
    assert {n: a.get("virtual") for n, a in shadow_frees} == {"m1": "true", "m2": "true", "h1": None, "blk": None,
                                                              "h3": None}
    # the failure's numbers are the program's, as in the run of every step
    assert OOM_LINE.format(3 * MiB) in whole.stderr.splitlines(), whole.stderr
    assert OOM_LINE.format(3 * MiB) in p.stderr.splitlines(), p.stderr
    (snapshot,) = [r for r in rows if r["Name"] == "OOM_Snapshot"]
    assert snapshot["attr"]["allocated"] == str(3 * MiB), snapshot
    if analysis == "oom":  # the largest live blocks: h1's memory once (m2 is a view of it), then blk
        assert [names[int(r["attr"]["ptr"], 16)] for r in rows if r["Event Type"] == "OOM_TOP_ALLOC"] == ["h1", "blk"]
    # the device's in-use track: h1, then h1 and blk from step 3's start, then h3
    doc = load_trace(next(procdir.glob("trace_*.json")))
    in_use = [e["args"]["bytes"] for e in doc["traceEvents"] if e["ph"] == "C" and e["name"] == "cuda:0 in use"]
    assert in_use == [2 * MiB, 3 * MiB, 5 * MiB], in_use
