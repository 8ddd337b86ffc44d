"""Issue #20 item 5: an out-of-memory failure gives the same rows with the
Python API (plain python3) as under the command line: OOM_Trigger,
OOM_Snapshot, OOM_RecentAlloc x K, OOM_TopAlloc x K, OOM_Snapshot_After
(upstream's names); every block listed once (a CPU tensor's storage is one
PTA block, not also the HOST malloc under it); the snapshot's `allocated`
is the live bytes counted once; the rows carry the failing thread."""
import os
import subprocess

import pytest

from conftest import BUILD, CLI, SOURCE, dump_files, process_dirs, read_dump

pytest.importorskip("torch")
SCRIPT = SOURCE / "tests" / "programs" / "python" / "oom_cpu.py"
MiB = 1 << 20
DRIVER_POOLS = ("HOST", "HAL", "HOST_PINNED")


def run(tmp_path, under_cli):
    e = dict(os.environ)
    for k in ("LD_PRELOAD", "MSMEMSCOPE_SESSION"):
        e.pop(k, None)
    e["PYTHONPATH"] = str(BUILD / "python")
    cmd = ["/usr/bin/python3", str(SCRIPT), "out"]
    if under_cli:
        cmd = [str(CLI), "--device=cpu", "--events=alloc,free", "--analysis=oom:3", "--collect-mode=deferred",
               "--output=out", "--"] + cmd
    p = subprocess.run(cmd, cwd=str(tmp_path), env=e, capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, f"stdout:\n{p.stdout}\nstderr:\n{p.stderr}"
    assert "allocation failed" in p.stdout.splitlines()
    assert "failed on device cpu with" in p.stderr, p.stderr
    [d] = process_dirs(tmp_path / "out")
    [dump] = dump_files(d)
    return read_dump(dump)


def oom_rows(rows):
    return [r for r in rows if r["Event"] == "OOM_DETAIL" or (r["Event"] == "SNAPSHOT" and r["Name"].startswith("OOM_"))]


def live_bytes_once(rows, before_id):
    """Live bytes on the cpu just before row before_id, each byte once: a
    host block at the address of a live framework block is that block."""
    live = {}
    for r in rows:
        if int(r["ID"]) >= before_id:
            break
        if r["Event"] == "MALLOC":
            live[(r["Event Type"], r["Ptr"])] = int(r["attr"]["size"])
        elif r["Event"] == "FREE":
            live.pop((r["Event Type"], r["Ptr"]), None)
    framework = {ptr for (pool, ptr) in live if pool not in DRIVER_POOLS}
    return sum(size for (pool, ptr), size in live.items() if not (pool == "HOST" and ptr in framework))


@pytest.fixture(scope="module")
def both(tmp_path_factory):
    return {mode: run(tmp_path_factory.mktemp(mode), mode == "cli") for mode in ("api", "cli")}


@pytest.mark.parametrize("mode", ["api", "cli"])
def test_oom_rows(both, mode):
    rows = both[mode]
    got = oom_rows(rows)
    assert [(r["Event Type"], r["Name"]) for r in got] == (
        [("OOM_TRIGGER", "OOM_Trigger"), ("SNAPSHOT", "OOM_Snapshot")] + [("OOM_RECENT_ALLOC", "OOM_RecentAlloc")] * 3 +
        [("OOM_TOP_ALLOC", "OOM_TopAlloc")] * 3 + [("SNAPSHOT", "OOM_Snapshot_After")])
    trigger = got[0]
    assert trigger["attr"]["func"] == "posix_memalign" and trigger["attr"]["req_size"] == str(1 << 50)
    # the failing thread (the main thread: its id is the process id) on every row
    assert {(r["Process Id"], r["Thread Id"]) for r in got} == {(trigger["Process Id"], trigger["Process Id"])}
    # the three largest live blocks: three of the four 1 MiB tensors, as PTA
    # blocks only (the malloc under each is not listed again)
    top = [r["attr"] for r in got if r["Event Type"] == "OOM_TOP_ALLOC"]
    assert [(a["pool"], a["size"]) for a in top] == [("PTA", str(MiB))] * 3
    assert len({a["ptr"] for a in top}) == 3
    recent = [r["attr"] for r in got if r["Event Type"] == "OOM_RECENT_ALLOC"]
    assert len({(a["ptr"]) for a in recent}) == 3
    # allocated: the live bytes counted once (the four tensors once, not twice)
    expected = live_bytes_once(rows, int(trigger["ID"]))
    # under the CLI (deferred) the host blocks made before start() are live
    # too, written as shadow MALLOCs at start (issue #15 item 4)
    fresh = live_bytes_once([r for r in rows if r["attr"].get("shadow") != "true"], int(trigger["ID"]))
    assert 4 * MiB <= fresh < 5 * MiB and expected >= fresh
    assert got[1]["attr"]["allocated"] == str(expected)
    assert got[-1]["attr"]["allocated"] == str(expected)  # nothing changed before the failure was handled


def test_python_api_and_cli_write_the_same_oom_rows(both):
    kinds = {m: [(r["Event"], r["Event Type"], r["Name"], tuple(r["attr"])) for r in oom_rows(rows)]
             for m, rows in both.items()}
    assert kinds["api"] == kinds["cli"]
