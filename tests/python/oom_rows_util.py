"""Running tests/programs/python/oom_cpu.py (an impossible 1 PiB tensor
after four 1 MiB ones) with the Python API or under the CLI, and reading
its out-of-memory rows (test_oom_rows.py, test_oom_rows_plain.py)."""
import os
import subprocess

from conftest import BUILD, CLI, SOURCE, dump_files, process_dirs, read_dump

SCRIPT = SOURCE / "tests" / "programs" / "python" / "oom_cpu.py"
MiB = 1 << 20


def run(tmp_path, under_cli, analysis="oom:3"):
    """analysis None: upstream's default analyses (leaks), no --analysis."""
    e = dict(os.environ)
    for k in ("LD_PRELOAD", "MSMEMSCOPE_SESSION"):
        e.pop(k, None)
    e["PYTHONPATH"] = str(BUILD / "python")
    cmd = ["/usr/bin/python3", str(SCRIPT), "out", analysis or "leaks"]
    if under_cli:
        cmd = [str(CLI), "--device=cpu", "--events=alloc,free", *([f"--analysis={analysis}"] if analysis else []),
               "--collect-mode=deferred", "--output=out", "--"] + cmd
    p = subprocess.run(cmd, cwd=str(tmp_path), env=e, capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, f"stdout:\n{p.stdout}\nstderr:\n{p.stderr}"
    assert "allocation failed" in p.stdout.splitlines()
    assert f"oom: posix_memalign of {1 << 50} bytes failed on device cpu with {4 * MiB} bytes allocated" in p.stderr, \
        p.stderr
    [d] = process_dirs(tmp_path / "out")
    [dump] = dump_files(d)
    return read_dump(dump)


def oom_rows(rows):
    return [r for r in rows if r["Event"] == "OOM_DETAIL" or (r["Event"] == "SNAPSHOT" and r["Name"].startswith("OOM_"))]


def live_framework_bytes(rows, before_id):
    """The tensors' bytes live just before row before_id: the framework
    (PTA) blocks, as upstream's snapshot counts them (torch's
    memory_allocated); never the mallocs under them."""
    live = {}
    for r in rows:
        if int(r["ID"]) >= before_id:
            break
        if r["Event"] == "MALLOC" and r["Event Type"] == "PTA":
            live[r["Ptr"]] = int(r["attr"]["size"])
        elif r["Event"] == "FREE" and r["Event Type"] == "PTA":
            live.pop(r["Ptr"], None)
    return sum(live.values())
