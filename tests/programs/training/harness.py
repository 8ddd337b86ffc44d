"""Runs tests/programs/training/train.py with plain python3 or under the CLI."""
import json
import os
import subprocess

from conftest import BUILD, SOURCE, dump_files, process_dirs, read_dump

PY = "/usr/bin/python3"
SCRIPT = SOURCE / "tests" / "programs" / "training" / "train.py"


def env():
    e = dict(os.environ)
    e.pop("LD_PRELOAD", None)
    e.pop("MSMEMSCOPE_SESSION", None)
    e["PYTHONPATH"] = str(BUILD / "python")
    return e


def run_python(tmp_path, cfg, *features, rc=0):
    """Plain python3: the package spawns the host; cfg goes to config()."""
    cfg = dict({"device": "cpu", "output": "out"}, **cfg)
    p = subprocess.run([PY, str(SCRIPT), json.dumps(cfg)] + list(features), cwd=str(tmp_path), env=env(),
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == rc, f"stdout:\n{p.stdout}\nstderr:\n{p.stderr}"
    return p


def run_cli(tmp_path, options, *features, rc=0):
    """Under the CLI. Deferred collection: the script's start()/stop() range
    only, not the ~2 million heap events of importing torch (which would make
    each dump hundreds of MB for nothing these tests look at)."""
    if not any(o.startswith("--collect-mode") for o in options):
        options = ["--collect-mode=deferred"] + list(options)
    cmd = [str(BUILD / "bin" / "msmemscope"), "--device=cpu", "--output=out"] + list(options) + \
          ["--", PY, str(SCRIPT), "{}"] + list(features)
    p = subprocess.run(cmd, cwd=str(tmp_path), env=env(), capture_output=True, text=True, timeout=300)
    assert p.returncode == rc, f"stdout:\n{p.stdout}\nstderr:\n{p.stderr}"
    return p


def proc_dir(tmp_path):
    dirs = process_dirs(tmp_path / "out")
    assert len(dirs) == 1, dirs
    return dirs[0]


def rows_of(tmp_path):
    files = dump_files(proc_dir(tmp_path))
    assert len(files) == 1, files
    return read_dump(files[0]), files[0]


def run_py_json(code, *args):
    """Runs a Python snippet with the package on the path; returns stdout."""
    p = subprocess.run([PY, "-c", code] + [str(a) for a in args], env=env(), capture_output=True, text=True,
                       timeout=300)
    assert p.returncode == 0, f"stdout:\n{p.stdout}\nstderr:\n{p.stderr}"
    return p.stdout
