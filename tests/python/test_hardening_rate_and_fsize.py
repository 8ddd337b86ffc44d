"""#29 item 10: the agent's SIGXFSZ guard when the program lowers its own
file-size limit mid-run, and the oom analysis's detail rate limit at its
one-second default."""
import os
import re
import subprocess

from conftest import CLI, dump_files, process_dirs, read_dump


def _cli(args, cwd):
    e = dict(os.environ)
    e.pop("LD_PRELOAD", None)
    return subprocess.run([str(CLI)] + [str(a) for a in args], cwd=str(cwd), env=e, capture_output=True,
                          text=True, timeout=300)


def test_file_size_limit_lowered_mid_run_never_kills_the_program(test_bin, tmp_path):
    # The program sets RLIMIT_FSIZE to 64 KiB itself after 100k malloc/free
    # pairs (its capture is megabytes by then) and goes on allocating: the
    # agent's copy of a chunk past the new limit met SIGXFSZ and the program
    # died of it (signal 25). Now the write fails with EFBIG, collection is
    # turned off, the program ends normally and the tool says what was lost.
    p = _cli(["--device=cpu", "--events=alloc,free", "--analysis=", "--output=out", "--",
              test_bin / "fsize_midrun", 100000, 65536], tmp_path)
    assert re.search(r"^msmemscope: pid \d+ \(\S*fsize_midrun 100000 65536\) exited with code 0$", p.stdout,
                     re.M), p.stdout + p.stderr
    assert "done" in p.stdout.splitlines()
    assert p.returncode == 70, p.stdout + p.stderr
    assert ("[msmemscope] warning: collection turned off: the capture file reached the file-size limit "
            "(ulimit -f)") in p.stderr.splitlines(), p.stderr
    errors = [l for l in p.stderr.splitlines() if l.startswith("msmemscope: error:")]
    assert any(re.fullmatch(r"msmemscope: error: pid \d+: output incomplete: \d+ event\(s\) could not be "
                            r"recorded \(the capture reached the file-size limit, ulimit -f\)", l)
               for l in errors), errors
    # What was recorded before the limit is there: the first half's rows.
    rows = read_dump(dump_files(process_dirs(tmp_path / "out")[0])[0])
    assert sum(1 for r in rows if r["Event"] == "MALLOC") >= 100000


def _expected_dumps(trigger_ts, interval_ns=1_000_000_000):
    """The triggers the one-second limit lets dump their blocks (the oom
    analyzer's rule, in event time): the first, then each one at least a
    second after the last that dumped."""
    out, last = [], None
    for i, ts in enumerate(trigger_ts):
        if last is None or ts - last >= interval_ns:
            out.append(i)
            last = ts
    return out


def test_oom_detail_rate_limit_at_its_one_second_default(test_bin, tmp_path):
    # Two bursts of 20 failing malloc(1 PiB) (the second once the program's
    # own clock passed 1.2 s after the first): every failure gets its
    # snapshot and trigger rows, but the blocks (OOM_RecentAlloc/TopAlloc) and
    # the stderr line only once per second of event time. What that keeps is
    # computed from the trigger rows' timestamps, never from the run's timing.
    p = _cli(["--device=cpu", "--events=alloc,free", "--analysis=oom:3", "--output=out", "--",
              test_bin / "oom_burst", 20, 1200], tmp_path)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "40 failed" in p.stdout.splitlines()
    rows = read_dump(dump_files(process_dirs(tmp_path / "out")[0])[0])
    triggers = [r for r in rows if r["Event Type"] == "OOM_TRIGGER"]
    assert len(triggers) == 40
    ts = [int(r["Timestamp(ns)"]) for r in triggers]
    assert ts == sorted(ts)
    dumps = _expected_dumps(ts)
    # The first burst fits inside a second (its own timestamps say so): one
    # dump for its 20 failures, however fast the machine.
    first_burst = ts[:20]
    assert first_burst[-1] - first_burst[0] < 1_000_000_000, first_burst
    assert [i for i in dumps if i < 20] == [0]
    assert 20 in dumps  # the second burst began more than a second later
    # Block rows: 3 recent + 3 top after exactly the dumping triggers.
    ids = [int(r["ID"]) for r in triggers]
    details = [int(r["ID"]) for r in rows if r["Event Type"] in ("OOM_RECENT_ALLOC", "OOM_TOP_ALLOC")]
    assert len(details) == 6 * len(dumps), (len(details), dumps)
    for i in range(40):
        nxt = ids[i + 1] if i + 1 < 40 else float("inf")
        mine = [d for d in details if ids[i] < d < nxt]
        assert len(mine) == (6 if i in dumps else 0), (i, mine)
    # Snapshots are written at every failure (upstream's rule).
    assert sum(1 for r in rows if r["Name"] == "OOM_Snapshot") == 40
    # The stderr line: once per dump, at most 2 for this run.
    lines = [l for l in p.stderr.splitlines() if re.match(r"\[msmemscope\] warning: oom: malloc of \d+ bytes failed", l)]
    assert len(lines) == len(dumps) <= 2, p.stderr
    assert f"oom: 40 out-of-memory failure(s), {len(dumps)} detail dump(s) written (OOM_DETAIL rows)" in p.stdout
