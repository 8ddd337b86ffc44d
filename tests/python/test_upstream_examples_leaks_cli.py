"""Upstream's leak example run its documented way under the command line:
`bash test_leaks.sh` (example/leaks/python/test_leaks.sh: it sets its own
LD_PRELOAD and LD_LIBRARY_PATH, then runs the Python API script) as the
target of msmemscope, adapted to the CPU (upstream_examples/leaks.sh). The
script's API joins the command line's session: one process folder of the
python process, with the same console report as the API form."""
import pytest

from conftest import process_dirs, dump_files
from upstream_examples_util import BUILD, cli, clean_env, read_rows, rows_of
from test_upstream_examples_leaks import KEPT, check_upstream_leak_report

pytest.importorskip("torch")


def test_leaks_script_under_the_command_line(tmp_path):
    # upstream's script preloads its own libraries: here one of the system's
    env = clean_env(TOOL_PRELOAD="/lib/x86_64-linux-gnu/libm.so.6", TOOL_LIB_PATH=str(BUILD / "lib"), PYTHON="/usr/bin/python3")
    p = cli(tmp_path, ["--device=cpu", "--output=out"], ["bash", "leaks.sh"], env=env)
    assert "Test finished." in p.stdout.splitlines()
    assert "Operation already in progress" not in p.stderr
    assert not (tmp_path / "output").exists()  # the API's output= gave way to the CLI's session
    check_upstream_leak_report(p.stdout)
    python = []
    for d in process_dirs(tmp_path / "out"):
        rows = read_rows(dump_files(d)[0])
        if rows_of(rows, "SYSTEM", "STEP"):
            python.append(rows)
    assert len(python) == 1
    assert len([r for r in rows_of(python[0], "MALLOC", "PTA") if r["attr"]["size"] == str(KEPT)]) == 6
