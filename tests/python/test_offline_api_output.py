"""The files msmemscope.analyze()'s report names are there to open.

analyze() runs the command line's offline mode, whose analyzers write files
of their own into --output: the leak list past max_lines ("... N more in
FILE") and watch's checkpoint hashes ("written under FOLDER"). analyze()
gave --output a temporary folder and removed it before returning, so each
such line named a file that no longer existed. The files now go where the
command line's go and a session's run folders go: the folder
msmemscope.config(output=...) names, memscopeDumpResults unless set; the
command line makes it only to write a file there.

The dumps are those of live runs under the CLI: a PyTorch loop that keeps
tensors from every step (tests/programs/python/leak_graphs.py) and one
watched with --watch (tests/programs/training/watch_train_truth.py)."""
import re
import subprocess

import pytest

from conftest import SOURCE, clean_env, dump_files, process_dirs, read_dump, run_cli
from test_analyzers_cli import upstream_inefficient_csv

pytest.importorskip("torch")
PY = "/usr/bin/python3"

ANALYZE = """\
import os, sys, warnings

import msmemscope

warnings.simplefilter("ignore")  # the leaks analysis' per-step warnings
name, path, cwd, output = sys.argv[1], os.path.abspath(sys.argv[2]), sys.argv[3], sys.argv[4]
kw = dict(a.split("=", 1) for a in sys.argv[5:])
if output != "-":
    msmemscope.config(output=output)
os.chdir(cwd)  # (where the call is made, after config())
try:
    print(msmemscope.analyze(name, input_path=path, **kw))
except Exception as e:
    print(f"raised {type(e).__name__}: {e}")
"""


def only(items):
    assert len(items) == 1, items
    return items[0]


@pytest.fixture(scope="module")
def dumps(tmp_path_factory):
    """{"leaks": a leaking loop's dump, "watch": a watched loop's dump}."""
    tmp = tmp_path_factory.mktemp("recorded")
    run_cli(["--device=cpu", "--analysis=leaks", "--output=leaks", "--",
             PY, SOURCE / "tests" / "programs" / "python" / "leak_graphs.py", "4"],
            tmp, env={"PYTHONPATH": ""}, check_rc=0)
    run_cli(["--device=cpu", "--analysis=", "--watch=aten::addmm,aten::mse_loss", "--output=watch", "--",
             PY, SOURCE / "tests" / "programs" / "training" / "watch_train_truth.py"],
            tmp, env={"PYTHONPATH": ""}, check_rc=0)
    return {k: only(dump_files(only(process_dirs(tmp / k)))) for k in ("leaks", "watch")}


def analyze(tmp, name, dump, *kw, cwd=None, output="-"):
    """analyze()'s report, called in `cwd` (tmp unless given) after
    config(output=OUTPUT) in tmp (no config() call for "-")."""
    (tmp / "analyze.py").write_text(ANALYZE)
    p = subprocess.run([PY, "analyze.py", name, str(dump), str(cwd or tmp), output] + list(kw), cwd=str(tmp),
                       env=clean_env(), capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr
    return p.stdout.splitlines()


def full_list_line(lines):
    return only([line for line in lines if line.startswith("... ")])


def test_the_full_leak_list_is_in_the_output_folder(dumps, tmp_path):
    # Before: "... 41 more in /tmp/msmemscope_offline_XXXXXXXX/leaks_<ts>.txt",
    # a folder removed before analyze() returned
    lines = analyze(tmp_path, "leaks", dumps["leaks"], "max_lines=1")
    m = re.fullmatch(r"\.\.\. (\d+) more in memscopeDumpResults/(leaks_\d{14}\.txt)", full_list_line(lines))
    assert m, lines
    listed = (tmp_path / "memscopeDumpResults" / m[2]).read_text().splitlines()
    assert len([line for line in listed if line.startswith("Direct ")]) == int(m[1]) + 1


def test_the_full_leak_list_goes_where_config_output_names(dumps, tmp_path):
    # config(output=...) names the folder, as for a session's run folders:
    # resolved from where config() was called, said as given there
    lines = analyze(tmp_path, "leaks", dumps["leaks"], "max_lines=1", output="res")
    m = re.fullmatch(r"\.\.\. \d+ more in res/(leaks_\d{14}\.txt)", full_list_line(lines))
    assert m and (tmp_path / "res" / m[1]).is_file(), lines
    # analyze() called from another folder: the file is in config()'s folder,
    # which the line names as a path from there
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    lines = analyze(tmp_path, "leaks", dumps["leaks"], "max_lines=1", cwd=elsewhere, output="res2")
    m = re.fullmatch(rf"\.\.\. \d+ more in {re.escape(str(tmp_path))}/res2/(leaks_\d{{14}}\.txt)",
                     full_list_line(lines))
    assert m and (tmp_path / "res2" / m[1]).is_file(), lines
    assert list(elsewhere.iterdir()) == []


def test_watch_checkpoints_are_in_the_output_folder(dumps, tmp_path):
    # Before: "watch: 15 checkpoint(s) written under
    # /tmp/msmemscope_offline_XXXXXXXX/device_*/watch_dump", removed
    lines = analyze(tmp_path, "watch", dumps["watch"])
    assert "watch: 15 checkpoint(s) written under memscopeDumpResults/device_*/watch_dump" in lines, lines
    hashes = only(list((tmp_path / "memscopeDumpResults" / "device_cpu" / "watch_dump").glob(
        "watch_dump_data_check_sum_*.csv"))).read_text().splitlines()
    assert len(hashes) == 1 + 15


def test_an_analysis_that_writes_no_file_makes_no_folder(dumps, tmp_path):
    lines = analyze(tmp_path, "leaks", dumps["leaks"], "max_lines=1000")
    assert [line for line in lines if line.startswith("====== SUMMARY: ")], lines  # leaks found, all listed
    assert not [line for line in lines if line.startswith("... ")], lines
    assert not (tmp_path / "memscopeDumpResults").exists()


def test_an_output_folder_that_cannot_be_made(dumps, tmp_path):
    (tmp_path / "file").write_text("")
    # an analysis that writes its files there fails, naming config()'s key
    lines = analyze(tmp_path, "leaks", dumps["leaks"], "max_lines=1", output="file/res")
    assert lines == ["raised RuntimeError: msmemscope.analyze: output: file/res: Not a directory"], lines
    # the inefficient analysis writes none (its results go back into the
    # input): it is not stopped
    dump = upstream_inefficient_csv(tmp_path / "ineff.csv")
    lines = analyze(tmp_path, "inefficient", dump, output="file/res")
    assert not [line for line in lines if line.startswith("raised")], lines
    assert [r["ID"] for r in read_dump(dump) if "inefficient_type" in r["attr"]] == ["1"]
