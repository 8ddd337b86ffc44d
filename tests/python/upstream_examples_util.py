"""Running our adaptations of upstream's examples (tests/python/upstream_examples/,
see its README) the way upstream's docs run them: `python script.py` for the
Python API form, `msmemscope <options> python script.py` for the CLI form,
each in a fresh folder holding a copy of the scripts."""
import os
import shutil
import subprocess
from pathlib import Path

import csv

from conftest import BUILD, DUMP_HEADER, clean_env, dump_files, parse_attr, process_dirs  # noqa: F401 (clean_env: for the tests)

PY = "/usr/bin/python3"
EXAMPLES = Path(__file__).resolve().parent / "upstream_examples"
CLI = BUILD / "bin" / "msmemscope"


def workdir(tmp_path):
    for f in EXAMPLES.iterdir():
        if f.suffix in (".py", ".sh"):
            shutil.copy(f, tmp_path / f.name)
    return tmp_path


def run(cmd, cwd, rc=0, env=None, timeout=600, preexec_fn=None):
    p = subprocess.run([str(c) for c in cmd], cwd=str(cwd), env=env or clean_env(), capture_output=True, text=True,
                       timeout=timeout, preexec_fn=preexec_fn)
    if rc is not None:
        assert p.returncode == rc, f"rc={p.returncode}\nstdout:\n{p.stdout[-6000:]}\nstderr:\n{p.stderr[-6000:]}"
    return p


def api(tmp_path, script, *args, **kw):
    """`python script.py args` (the Python API form)."""
    return run([PY, script, *args], workdir(tmp_path), **kw)


def cli(tmp_path, options, command, **kw):
    """`msmemscope <options> <command>` (the CLI form)."""
    return run([CLI, *options, *command], workdir(tmp_path), **kw)


def only_process(out):
    dirs = process_dirs(out)
    assert len(dirs) == 1, dirs
    return dirs[0]


def read_rows(path):
    """The dump's rows as dicts with Attr parsed, leaving out the host heap's
    MALLOC/FREE HOST rows (millions under the command line, where the whole
    interpreter is recorded; upstream has no such rows)."""
    with open(path, newline="") as f:
        r = csv.reader(f)
        assert next(r) == DUMP_HEADER
        rows = []
        for rec in r:
            if rec[2] == "HOST" and rec[1] in ("MALLOC", "FREE"):
                continue
            d = dict(zip(DUMP_HEADER, rec))
            d["attr"] = parse_attr(d["Attr"])
            rows.append(d)
        return rows


def upstream_layout(procdir, device="cpu"):
    """The folder upstream's README draws (example/profile/README.md):
    msmemscope_{pid}_{ts}_{device}/ with config.json, msmemscope_logs/msmemscope_{ts}.log
    and device_{id}/dump/memscope_dump_{ts}.csv. Returns the dump's rows."""
    name = procdir.name.split("_")
    assert name[0] == "msmemscope" and name[1].isdigit() and len(name[2]) == 14 and name[3] == device, procdir.name
    assert (procdir / "config.json").is_file()
    logs = list((procdir / "msmemscope_logs").glob("msmemscope_*.log"))
    assert len(logs) == 1, logs
    dumps = dump_files(procdir, device)
    assert len(dumps) == 1, dumps
    return read_rows(dumps[0])


def rows_of(rows, event, etype=None):
    return [r for r in rows if r["Event"] == event and (etype is None or r["Event Type"] == etype)]
