"""cuda collector: threads that free and allocate device memory at once, on a
driver that hands a freed address out again at once (as the real cuMemAlloc
does; the simulated one gives the lowest free range that fits).

Once the driver has taken an address back, another thread's allocation may
get it: its MALLOC row must not come before the FREE row of the block that
had the address, or the host pairs the FREE with the new block (and later
says "free(s) of block(s) whose allocation was never recorded"). The hooks
hold one lock across each driver call and its row (DriverOrder).

tests/programs/cuda/cuda_reuse_prog.cpp: THREADS threads hold 3 blocks each,
first all of 4096 bytes (the peak), then ROUNDS rounds started together by a
barrier, each freeing its blocks and allocating smaller or equal ones in
their place (cuMemAlloc/cuMemFree and cuMemAllocAsync/cuMemFreeAsync), and
free everything at the end.
"""
import json
import re
from collections import defaultdict

import pytest

from conftest import TEST_BIN, dump_files, read_dump, run_cli
from cuda_helpers import run_cuda
from sinks_common import check_db

THREADS = 4
ROUNDS = 1500
PEAK = THREADS * 3 * 4096  # 48 KiB


@pytest.fixture(scope="module")
def reuse_run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("cuda_reuse")
    p, d = run_cuda(run_cli, tmp, TEST_BIN / "cuda_reuse_prog", [str(THREADS), str(ROUNDS)], events="alloc,free",
                    level=None, extra=["--analysis=leaks", "--sinks=csv,db"])
    return p, d


def device_rows(rows):
    """Device 0's MALLOC/FREE rows as (ID, Event, Ptr, attrs), in ID order."""
    out = [(int(r["ID"]), r["Event"], r["Ptr"], r["attr"]) for r in rows
           if r["Event"] in ("MALLOC", "FREE") and r["Event Type"] == "HAL"]
    assert [i for i, *_ in out] == sorted(i for i, *_ in out), "IDs must increase"
    return out


def lives_by_address(rows):
    """Per address, its rows' (Event, allocation_id, size) in ID order."""
    lives = defaultdict(list)
    for _, event, ptr, a in rows:
        lives[ptr].append((event, a["allocation_id"], a["size"]))
    return lives


def check_pairs(rows, allocations, min_lives=100):
    """Every address's rows alternate MALLOC, FREE, ... FREE, each FREE
    naming the allocation id and size of the MALLOC before it; no shadow row
    (a FREE the host made up for an address allocated again without one)."""
    assert [r for r in rows if r[3].get("shadow")] == []
    lives = lives_by_address(rows)
    for ptr, seq in lives.items():
        assert [e for e, _, _ in seq] == ["MALLOC", "FREE"] * (len(seq) // 2), (ptr, seq)
        for (_, m_id, m_size), (_, f_id, f_size) in zip(seq[0::2], seq[1::2]):
            assert (f_id, f_size) == (m_id, m_size), (ptr, seq)
    assert sum(1 for r in rows if r[1] == "MALLOC") == allocations
    # the driver gave addresses again, often: the race the lock closes was run
    reused = [ptr for ptr, seq in lives.items() if len(seq) > 2]
    assert len(reused) >= 2 and max(len(seq) for seq in lives.values()) >= 2 * min_lives, \
        sorted(len(s) for s in lives.values())


def program_figures(p, peak=PEAK):
    """The allocations the program made; the peak it held is `peak`."""
    m = re.search(r"^allocations=(\d+) peak=(\d+) final=0$", p.stdout, re.M)
    assert m, p.stdout
    assert int(m.group(2)) == peak
    return int(m.group(1))


def test_every_free_pairs_with_the_malloc_of_its_own_block_csv(reuse_run):
    p, d = reuse_run
    [csv] = dump_files(d, "0")
    check_pairs(device_rows(read_dump(csv)), program_figures(p))


def test_the_db_holds_the_same_pairs(reuse_run):
    p, d = reuse_run
    [db] = sorted((d / "device_0" / "dump").glob("*.db"))
    names = ["ID", "Event", "Event Type", "Name", "Timestamp(ns)", "Process Id", "Thread Id", "Device Id", "Ptr",
             "Attr"]
    rows = [dict(zip(names, r), attr=json.loads(r[9])) for r in check_db(db)]  # Attr is JSON there
    check_pairs(device_rows(rows), program_figures(p))


def console_head(p, d, program, events):
    """The console's report down to its list of files, exactly: the
    program's line, then the CLI's."""
    lines = p.stdout.splitlines()
    pid = d.name.split("_")[1]
    return lines[:lines.index(f"  files (in {d}):")], [
        *program,
        f"msmemscope: pid {pid} ({program_path(p)}) exited with code 0",
        f"  output: {d}",
        f"  events: {events}, dropped: 0",
    ]


def program_path(p):
    return re.search(r"^msmemscope: pid \d+ \((.*)\) exited", p.stdout, re.M).group(1)


def stderr_lines(p):
    """stderr without the warning every run as root gets."""
    return [line for line in p.stderr.splitlines() if not line.startswith("msmemscope: warning: running as root")]


def no_leaks(d):
    leaks = json.loads((d / "summary.json").read_text())["leaks"]
    return leaks["bytes"] == 0 and leaks["allocations"] == 0, leaks


def test_peak_and_final_are_what_the_program_held_and_nothing_leaks(reuse_run):
    # Without the lock (DriverOrder a no-op), about 2,100 FREE rows a run
    # came after the MALLOC of the next block at their address: each paired
    # with that block, whose own FREE later paired with nothing ("[msmemscope]
    # warning: 0/HAL: 2097 free(s) of block(s) whose allocation was never
    # recorded (made through an entry point the hooks do not cover) were not
    # written; ..." on stderr).
    p, d = reuse_run
    allocations = program_figures(p)
    got, want = console_head(p, d, [f"allocations={allocations} peak={PEAK} final=0"], 2 * allocations + 1)
    assert got == want + ["  0/HAL: peak 48.0 KiB, final 0 B"], p.stdout
    assert stderr_lines(p) == [], p.stderr
    assert no_leaks(d)[0], no_leaks(d)
