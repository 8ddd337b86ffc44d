"""Shared-memory and mapped tensors (issue #27 item 5), plain scripts under
the CLI with Python stacks: a DataLoader's batches (made in shared memory by
`_new_shared` in each worker, mapped again from a descriptor by
`rebuild_storage_fd` in the main process) and `share_memory_()` are PTA
blocks of their exact size, with the Python stack of the line that made or
received them, in each process that maps them, once per process, freed when
they go (with the Python API alone too); the leak analysis reports batches kept in a list (and none when
they are dropped), the decomposition counts them as PTA@shared_memory.

tests/programs/python/torch_shared.py: 8 batches of 48 x 1024 float32
(196,608 bytes), 2 workers, batches in order (the worker making batch b
waits until the main process holds batch b - 1).
"""
import csv
import json
import os
import re
import subprocess

import pytest

from conftest import BUILD, DUMP_HEADER, SOURCE, dump_files, parse_attr, process_dirs, run_cli

pytest.importorskip("torch")
PY = "/usr/bin/python3"
SCRIPT = SOURCE / "tests" / "programs" / "python" / "torch_shared.py"
BATCH_BYTES = 48 * 1024 * 4
BATCHES = 8
SHARED_BYTES = 256 * 1024 * 4


def line_of(marker):
    for i, line in enumerate(SCRIPT.read_text().splitlines(), 1):
        if marker in line:
            return i
    raise AssertionError(marker)


def pta_rows(path):
    """The dump's PTA rows (the host heap's are skipped unparsed)."""
    out = []
    with open(path, newline="") as f:
        r = csv.reader(f)
        assert next(r) == DUMP_HEADER
        for rec in r:
            if rec[2] != "PTA":
                continue
            d = dict(zip(DUMP_HEADER, rec))
            d["attr"] = parse_attr(d["Attr"])
            out.append(d)
    return out


def run(tmp_path, mode):
    p = run_cli(["--device=cpu", "--call-stack=python", "--analysis=leaks,decompose", "--output=out", "--", PY,
                 SCRIPT, mode], tmp_path, env={"PYTHONPATH": "", "LD_PRELOAD": ""}, check_rc=0)
    procs = []
    for d in process_dirs(tmp_path / "out"):
        rows = pta_rows(dump_files(d)[0])
        mapped = [r for r in rows if r["Event"] == "MALLOC" and "mapped" in r["attr"]]
        frees = {r["attr"].get("allocation_id") for r in rows if r["Event"] == "FREE"}
        summary = json.loads((d / "summary.json").read_text())
        procs.append({"dir": d, "mapped": mapped, "frees": frees, "summary": summary})
    return p, procs


@pytest.fixture(scope="module")
def keep(tmp_path_factory):
    return run(tmp_path_factory.mktemp("keep"), "keep")


@pytest.fixture(scope="module")
def drop(tmp_path_factory):
    return run(tmp_path_factory.mktemp("drop"), "drop")


def split(procs):
    """(the main process, its workers): the main one receives the batches."""
    main = [p for p in procs if any("rebuild_storage_fd" in r["Call Stack(Python)"] for r in p["mapped"])]
    assert len(main) == 1 and len(procs) == 3, [(p["dir"].name, len(p["mapped"])) for p in procs]
    return main[0], [p for p in procs if p is not main[0]]


def owners_line(stdout_part, owner):
    m = re.search(rf"^  {re.escape(owner)}\s+(\d+)\s+(\d+)\s+(\d+)$", stdout_part, re.M)
    assert m, stdout_part
    return tuple(int(x) for x in m.groups())


def report_of(stdout, pid):
    """The part of the CLI's report about one process."""
    start = stdout.index(f"msmemscope: pid {pid} ")
    nxt = stdout.find("msmemscope: pid ", start + 1)
    return stdout[start:nxt if nxt >= 0 else len(stdout)]


def pid_of(proc):
    return int(proc["dir"].name.split("_")[1])


@pytest.mark.parametrize("which", ["keep", "drop"])
def test_batches_are_blocks_in_the_workers_and_the_main_process(which, request):
    p, procs = request.getfixturevalue(which)
    assert f"batches {BATCHES} " in p.stdout, p.stdout
    main, workers = split(procs)
    loader_frame = f"{SCRIPT}({line_of('# LOADER_LINE')}): loader_run"
    # the main process: each batch mapped once, where the loop received it
    assert len(main["mapped"]) == BATCHES, [r["attr"] for r in main["mapped"]]
    for r in main["mapped"]:
        assert r["attr"]["size"] == str(BATCH_BYTES), r["attr"]
        assert r["attr"]["owner"] == "PTA@shared_memory" and r["attr"]["mapped"] == "shared", r["attr"]
        stack = r["Call Stack(Python)"].split("\n")
        assert "rebuild_storage_fd" in stack[0], stack
        assert loader_frame in stack, stack
        assert r["attr"]["allocation_id"] in main["frees"], r["attr"]  # unmapped when it went
    assert len({r["attr"]["allocation_id"] for r in main["mapped"]}) == BATCHES
    # the workers: each batch made once, by the collate function
    made = [r for w in workers for r in w["mapped"]]
    assert len(made) == BATCHES and all(len(w["mapped"]) == BATCHES // 2 for w in workers), \
        [len(w["mapped"]) for w in workers]
    for w in workers:
        for r in w["mapped"]:
            assert r["attr"]["size"] == str(BATCH_BYTES) and r["attr"]["owner"] == "PTA@shared_memory", r["attr"]
            stack = r["Call Stack(Python)"].split("\n")
            assert any("_new_shared" in f for f in stack[:2]), stack
            assert any(re.search(r"/torch/utils/data/_utils/collate\.py\(\d+\): collate_tensor_fn$", f)
                       for f in stack), stack
            assert r["attr"]["allocation_id"] in w["frees"], r["attr"]  # after it was sent
        # the decomposition of the worker: one batch at a time
        assert owners_line(report_of(p.stdout, pid_of(w)), "PTA@shared_memory") == (0, BATCH_BYTES, BATCHES // 2)


def test_kept_batches_are_leaks_of_the_main_process(keep):
    p, procs = keep
    main, workers = split(procs)
    out = report_of(p.stdout, pid_of(main))
    # upstream's lines: steps 0 and 1 are warm-up, the batch of the last step
    # has no next step; the six between are leaks
    leaks = re.findall(r"^Direct Pytorch Caching memory pool leak of 0\.187500 Mb\(s\) at (0x[0-9a-f]+) ", out, re.M)
    assert len(leaks) == 6, out
    assert {int(a, 16) for a in leaks} <= {int(r["Ptr"], 16) for r in main["mapped"]}, leaks
    # our details: one site, the loop's line
    sites = re.findall(r"^    (\d+) block\(s\), (\d+) bytes \(steps? [\d-]+\): allocated by: (.*)$", out, re.M)
    assert sites == [("6", str(6 * BATCH_BYTES),
                      f"called from {SCRIPT}({line_of('# LOADER_LINE')}): loader_run")], out
    assert owners_line(out, "PTA@shared_memory") == (0, BATCHES * BATCH_BYTES, BATCHES)
    for w in workers:
        assert "memory pool leak" not in report_of(p.stdout, pid_of(w))


def test_dropped_batches_are_no_leak(drop):
    p, procs = drop
    main, _ = split(procs)
    out = report_of(p.stdout, pid_of(main))
    assert "memory pool leak" not in p.stdout, p.stdout
    # the batch in use and the next one received: two at a time
    assert owners_line(out, "PTA@shared_memory") == (0, 2 * BATCH_BYTES, BATCHES)


def test_share_memory_is_one_block_in_each_process(tmp_path):
    p, procs = run(tmp_path, "share")
    assert f"shared {SHARED_BYTES}" in p.stdout and f"received {SHARED_BYTES} same storage True" in p.stdout, p.stdout
    assert len(procs) == 2, procs
    # (the child's stacks include share_run too: it was forked from there)
    made = [q for q in procs if not any("rebuild_storage_fd" in r["Call Stack(Python)"] for r in q["mapped"])]
    assert len(made) == 1, [q["mapped"] for q in procs]
    (parent,) = made
    (child,) = [q for q in procs if q is not parent]
    share_frame = f"{SCRIPT}({line_of('# SHARE_LINE')}): share_run"
    receive_frame = f"{SCRIPT}({line_of('# RECEIVE_LINE')}): receive_twice"
    # share_memory_() in the process that calls it: one block of the tensor's size
    (r,) = parent["mapped"]
    assert r["attr"]["size"] == str(SHARED_BYTES) and r["attr"]["owner"] == "PTA@shared_memory", r["attr"]
    assert share_frame in r["Call Stack(Python)"].split("\n"), r["Call Stack(Python)"]
    assert r["attr"]["allocation_id"] in parent["frees"]
    # received twice in the child: one mapping there
    (r,) = child["mapped"]
    assert r["attr"]["size"] == str(SHARED_BYTES) and r["attr"]["owner"] == "PTA@shared_memory", r["attr"]
    stack = r["Call Stack(Python)"].split("\n")
    assert "rebuild_storage_fd" in stack[0] and receive_frame in stack, stack
    assert r["attr"]["allocation_id"] in child["frees"]
    assert owners_line(report_of(p.stdout, pid_of(child)), "PTA@shared_memory") == (0, SHARED_BYTES, 1)


API_SCRIPT = """
import msmemscope, torch
msmemscope.config(device="cpu", events="alloc,free", call_stack="python", analysis="decompose",
                  output="./api_out", data_format="csv")
msmemscope.start()
t = torch.ones(256, 1024)
t.share_memory_()  # API_SHARE_LINE
del t
msmemscope.stop()
print("api done")
"""


def test_share_memory_with_the_python_api_alone(tmp_path):
    (tmp_path / "api.py").write_text(API_SCRIPT)
    e = dict(os.environ)
    for k in ("LD_PRELOAD", "MSMEMSCOPE_SESSION", "MSMEMSCOPE_AGENT_OPTS"):
        e.pop(k, None)
    e["PYTHONPATH"] = str(BUILD / "python")
    p = subprocess.run([PY, "api.py"], cwd=str(tmp_path), env=e, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0 and "api done" in p.stdout, p.stdout + p.stderr
    (d,) = process_dirs(tmp_path / "api_out")
    rows = pta_rows(dump_files(d)[0])
    (r,) = [r for r in rows if r["Event"] == "MALLOC" and "mapped" in r["attr"]]
    assert r["attr"]["size"] == str(SHARED_BYTES) and r["attr"]["owner"] == "PTA@shared_memory", r["attr"]
    line = API_SCRIPT.splitlines().index("t.share_memory_()  # API_SHARE_LINE") + 1
    assert r["Call Stack(Python)"].split("\n")[-1] == f"{tmp_path / 'api.py'}({line}): <module>", r["Call Stack(Python)"]
    assert any(f["Event"] == "FREE" and f["attr"].get("allocation_id") == r["attr"]["allocation_id"] for f in rows)
    assert owners_line(p.stdout, "PTA@shared_memory") == (0, SHARED_BYTES, 1)
