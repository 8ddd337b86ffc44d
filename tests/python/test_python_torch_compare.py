"""--compare (issue #14 point 6): two runs of the same PyTorch script align
completely (autograd's operators too: 0 N/A rows); each operator is credited
with what it allocated between its start and end, so a run that keeps
128 KiB per step differs from one that does not on the operator that
allocates it; C programs are compared by allocation site."""
import csv
import os
import re
import shutil
import subprocess

import pytest

from conftest import BUILD, CLI, SOURCE, TEST_BIN, process_dirs, run_cli

pytest.importorskip("torch")
PY = "/usr/bin/python3"
SCRIPT = SOURCE / "tests" / "programs" / "python" / "torch_attrib.py"
ONES = "torch._ops.aten.ones.default"


def train(tmp, name, leak):
    e = dict(os.environ)
    for k in ("LD_PRELOAD", "MSMEMSCOPE_SESSION", "MSMEMSCOPE_AGENT_OPTS"):
        e.pop(k, None)
    e["PYTHONPATH"] = str(BUILD / "python")
    p = subprocess.run([PY, str(SCRIPT), name, "api", "leak" if leak else "noleak", "0"], cwd=str(tmp), env=e,
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stdout + p.stderr
    (d,) = process_dirs(tmp / name)
    return d


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("runs")
    return {"a": train(tmp, "a", False), "b": train(tmp, "b", False), "leak": train(tmp, "leak", True)}


def compare(tmp_path, base, other, extra=()):
    p = run_cli(["--compare", f"--input={base},{other}", f"--output={tmp_path / 'cmp'}"] + list(extra), tmp_path,
                check_rc=0)
    (f,) = sorted((tmp_path / "cmp" / "compare").glob("memory_compare_*.csv"))
    lines = f.read_text().splitlines()
    assert lines[0] == ",,,Base,Compare"
    assert lines[1] == "Event,Name,Device Id,Allocated Memory(byte),Allocated Memory(byte),Diff Memory(byte)"
    return p, list(csv.reader(lines[2:]))


def test_same_script_aligns_completely(tmp_path, runs):
    p, rows = compare(tmp_path, runs["a"], runs["b"])
    assert len(rows) > 500
    assert [r for r in rows if "N/A" in (r[3], r[4])] == []
    # operators only, as upstream names them (autograd's engine ranges write no rows)
    assert [r for r in rows if not r[1].startswith("torch._ops.")] == []
    assert any(r[1] == "torch._ops.aten.mse_loss_backward.default" for r in rows), sorted({r[1] for r in rows})
    assert [r for r in rows if r[5] != "0"] == []


def test_leak_shows_on_the_operator_that_allocates_it(tmp_path, runs):
    p, rows = compare(tmp_path, runs["a"], runs["leak"])
    ones = [r for r in rows if r[1] == ONES]
    assert len(ones) == 8 and all(r[3:] == ["N/A", "131072", "131072"] for r in ones), ones
    # everything else pairs up; only the kept tensors' operator differs (what
    # ones() calls inside itself, empty and fill_, writes no rows: upstream's
    # dispatch mode does not see it)
    differing = [r for r in rows if r[5] != "0"]
    assert {r[1] for r in differing} == {ONES}, differing
    assert [r for r in rows if r[3] == "N/A" and r[1] != ONES] == []
    assert [r for r in rows if r[4] == "N/A"] == []


def test_level_op_selects_upstreams_rule(tmp_path, runs):
    (tmp_path / "ours").mkdir()
    (tmp_path / "up").mkdir()
    _, ours = compare(tmp_path / "ours", runs["a"], runs["leak"])
    _, theirs = compare(tmp_path / "up", runs["a"], runs["leak"], extra=["--level=op"])
    assert [r[:3] for r in ours] == [r[:3] for r in theirs]
    # upstream credits an op with the first allocation after its end, not its own
    assert [r[4] for r in theirs if r[1] == ONES] != ["131072"] * 8


def test_c_program_compared_by_allocation_site(tmp_path):
    for name in ("h1", "h2"):
        run_cli(["--device=cpu", "--call-stack=c", "--analysis=", f"--output={name}", "--",
                 TEST_BIN / "analyzers_host_leak"], tmp_path, check_rc=0)
    (a,) = process_dirs(tmp_path / "h1")
    (b,) = process_dirs(tmp_path / "h2")
    p, rows = compare(tmp_path, a, b)
    assert ("msmemscope: compare: device cpu has no operator or kernel rows in either run; compared by allocation "
            "site") in p.stdout
    big = [r for r in rows if r[1].startswith("leak_big")]
    assert len(big) == 1 and big[0][0] == "MALLOC" and big[0][3:] == ["10000", "10000", "0"], rows
    assert not any(r[1].startswith("malloc") for r in rows)


BIG = """\
import torch
a = torch.ones(5_000_000)  # 20,000,000 bytes
b = a * 2                  # 20,000,000 more
del a
print("ok")
"""


def record_sites(tmp_path, out):
    """A run of BIG without operator rows (no launch events): compared by site."""
    (tmp_path / "big.py").write_text(BIG)
    run_cli(["--device=cpu", "--events=alloc,free", "--call-stack=python", "--analysis=", f"--output={out}", "--",
             PY, "big.py"], tmp_path, env={"PYTHONPATH": "", "LD_PRELOAD": ""}, check_rc=0)
    (d,) = process_dirs(tmp_path / out)
    return d


def test_by_site_a_cpu_tensor_counts_once_and_msmemscopes_own_memory_is_not_listed(tmp_path):
    # A CPU tensor's storage is a malloc (HOST row) and a PTA block at the
    # same address: by site, both were added (40,009,374 bytes for the
    # 20 MB tensor). And a run compared with another of the same script
    # listed msmemscope's own memory as the program's: a site in each run's
    # session folder (<out>/.msmemscope_session_XXXX/python/sitecustomize.py,
    # one per side) and a bare frame address under its start-up hook.
    p, rows = compare(tmp_path, record_sites(tmp_path, "run_a"), record_sites(tmp_path, "run_b"))
    assert ("msmemscope: compare: device cpu has no operator or kernel rows in either run; compared by allocation "
            "site") in p.stdout
    for line in (2, 3):
        (r,) = [r for r in rows if r[1].endswith(f"/big.py({line}): <module>")]
        # the tensor's 20,000,000 bytes once, and the line's few Python objects
        assert 20_000_000 <= int(r[3]) < 20_100_000 and 20_000_000 <= int(r[4]) < 20_100_000, r
    assert [r for r in rows if ".msmemscope_session_" in r[1]] == []
    assert [r for r in rows if re.fullmatch(r"0x[0-9a-f]+", r[1])] == []
    assert [r for r in rows if "/msmemscope/_msmemscope" in r[1]] == []


def test_a_run_without_operator_rows_against_one_with_them_is_said(tmp_path, runs):
    # One run recorded with launch events (operator rows), the other without:
    # every operator was listed as new, without a word.
    plain = record_sites(tmp_path, "plain")
    for base, other, has, lacks in ((runs["a"], plain, "base", "compare"), (plain, runs["a"], "compare", "base")):
        p, rows = compare(tmp_path, base, other)
        assert rows and all(r[0] == "OP_LAUNCH" for r in rows), rows[:3]
        assert all(r[4 if lacks == "compare" else 3] == "N/A" for r in rows), rows[:3]
        assert (f"msmemscope: warning: --compare: device cpu: the {lacks} run ({other if lacks == 'compare' else base}) "
                f"has no operator or kernel rows, the {has} run has {len(rows)}: all {len(rows)} are listed as only "
                f"in the {has} run (record both runs with launch in --events to compare them operator by operator)"
                ) in p.stderr.splitlines(), p.stderr
        shutil.rmtree(tmp_path / "cmp")
    # both with operators: no such warning
    p, rows = compare(tmp_path, runs["a"], runs["b"])
    assert "no operator or kernel rows" not in p.stderr


def test_a_run_folder_of_several_processes_is_refused_with_the_process_folders_named(tmp_path, runs):
    # Both sides' run folders held a process folder per process (a launcher
    # and its children, DataLoader workers): their operators were merged by
    # time into one sequence and compared as one program's, the real
    # difference buried among hundreds of rows one side alone had.
    for name in ("two_a", "two_b"):
        run_cli(["--device=cpu", "--analysis=", f"--output={name}", "--", "/bin/sh", "-c", "/bin/true; /bin/true"],
                tmp_path, check_rc=0)
    folders = sorted(d.name for d in process_dirs(tmp_path / "two_a"))
    assert len(folders) == 3, folders
    p = run_cli(["--compare", "--input=two_a,two_b", f"--output={tmp_path / 'cmp'}"], tmp_path, check_rc=2)
    assert p.stderr.splitlines()[-1] == (
        f"msmemscope: error: --input: two_a: holds the dumps of 3 processes ({folders[0]}, {folders[1]}, ...): "
        "--compare compares one process with one; name one process folder (or dump file) on each side")
    assert list((tmp_path / "cmp").rglob("memory_compare_*.csv")) == []
    # one process folder per side (or a run folder of one process) is compared
    p, rows = compare(tmp_path, tmp_path / "two_a" / folders[0], runs["a"].parent)
    assert rows
