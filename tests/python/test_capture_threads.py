"""Issue 3 §3: 8 threads x 1M malloc/free pairs -> every event in the output,
in timestamp order across threads, cross-thread frees paired."""
import os
from collections import Counter, defaultdict

from capture_util import alloc_id, assert_nothing_lost, iter_rows, only_dump, size_of
from conftest import process_dirs

THREADS = 8
PAIRS = int(os.environ.get("MSMS_CAPTURE_THREAD_PAIRS", "1000000"))
CROSS = 1000


def test_threads_every_event_in_order(cli, test_bin, tmp_path):
    p = cli(["--device=cpu", "--events=alloc,free", "--analysis=", f"--output={tmp_path}/out", "--",
             test_bin / "cap_threads", THREADS, PAIRS, CROSS], tmp_path, check_rc=0)
    assert_nothing_lost(p.stdout)
    dirs = process_dirs(tmp_path / "out")
    assert len(dirs) == 1
    small = Counter()      # (tid, event) -> rows of sizes 1..256 (the workers' pairs)
    small_frees = Counter()
    cross_alloc = {}       # allocation_id -> tid of the 777-byte mallocs
    cross_free = {}
    last_ts, last_id, n = 0, 0, 0
    open_small = defaultdict(int)
    for rec in iter_rows(only_dump(dirs[0])):
        n += 1
        rid, ev, ts, tid, attr = int(rec[0]), rec[1], int(rec[4]), rec[6], rec[9]
        assert rid == last_id + 1
        assert ts >= last_ts, (rec, last_ts)
        last_id, last_ts = rid, ts
        if ev == "MALLOC":
            sz = size_of(attr)
            if sz == 777:
                cross_alloc[alloc_id(attr)] = tid
            elif 1 <= sz <= 256:
                small[tid] += 1
                open_small[alloc_id(attr)] = tid
        elif ev == "FREE":
            aid = alloc_id(attr)
            if aid in cross_alloc:
                cross_free[aid] = tid
            elif aid in open_small:
                assert open_small.pop(aid) == tid
                small_frees[tid] += 1
    workers = [t for t, c in small.items() if c >= PAIRS]
    assert len(workers) == THREADS, small
    for t in workers:
        assert small[t] == PAIRS and small_frees[t] == PAIRS, (t, small[t], small_frees[t])
    assert len(cross_alloc) == CROSS and len(cross_free) == CROSS
    for aid, tid in cross_alloc.items():
        assert cross_free[aid] != tid  # freed on the other thread, same allocation id
