"""Issue #29 item 4: every file the tool writes is created O_EXCL|O_NOFOLLOW
relative to a folder descriptor opened without following links.

- The symlink-swap race: a run's process folder swapped for a symbolic link
  while the program runs (the program blocks on a FIFO while the test swaps)
  is never written through: the link's target stays empty, this run's files
  are in the folder the run made (wherever it was moved), and the run says so
  (exit 70, one `msmemscope: error:` line). As root with a root-owned
  --output, the README's setting; run by any user the same holds.
- `--compare -o` with a `compare` link planted in the output folder is
  refused and writes nothing through it (before: the result and the log went
  into the link's target)."""
import os
import stat
import subprocess
import threading

from conftest import CLI, run_cli

IS_ROOT = os.geteuid() == 0


def _env():
    e = dict(os.environ)
    for k in ("LD_PRELOAD", "MSMEMSCOPE_HOME", "MSMEMSCOPE_PLUGIN_PATH"):
        e.pop(k, None)
    return e


def _wait_for(pred, proc, what, limit_s=120):
    """Waits on a file barrier (what the host writes); fails if the run ends first."""
    import time
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        got = pred()
        if got:
            return got
        if proc.poll() is not None:
            raise AssertionError(f"the run ended before {what}: " + proc.stdout.read() + proc.stderr.read())
        time.sleep(0.02)
    raise AssertionError(f"no {what} within {limit_s} s")


def test_process_folder_swapped_for_a_link_mid_run_is_never_written_through(tmp_path):
    out = tmp_path / "out"
    out.mkdir(mode=0o755)
    os.chmod(out, 0o755)
    if IS_ROOT:
        # The README's case: root profiling into a folder only root can write.
        st = out.stat()
        assert st.st_uid == 0 and not (st.st_mode & (stat.S_IWGRP | stat.S_IWOTH))
    target = tmp_path / "target"   # where a planted link points: must stay empty
    target.mkdir()
    moved = tmp_path / "moved"     # where the real process folder is moved to
    gate = tmp_path / "gate"
    os.mkfifo(gate)
    # The program blocks reading the FIFO until the swap is done.
    prog = ["/bin/sh", "-c", f"read x < {gate}; echo released $x"]
    p = subprocess.Popen([str(CLI), "--device=cpu", "--analysis=leaks", "--sinks=csv,html,trace",
                          f"--output={out}", "--"] + prog,
                         cwd=str(tmp_path), env=_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        # Barrier: the host made the process folder and wrote its config.json.
        folder = _wait_for(lambda: next((d for d in out.glob("msmemscope_*") if (d / "config.json").exists()), None),
                           p, "process folder")
        os.rename(folder, moved)
        os.symlink(target, folder)
        with open(gate, "w") as g:   # releases the program
            g.write("now\n")
        stdout, stderr = p.communicate(timeout=300)
    finally:
        if p.poll() is None:
            p.kill()
            p.communicate()
    assert "released now" in stdout
    # Nothing was written through the link.
    assert list(target.iterdir()) == [], sorted(str(x) for x in target.rglob("*"))
    assert folder.is_symlink()
    # This run's files are in the folder it made, now at `moved`.
    names = {x.name for x in moved.iterdir()}
    assert {"config.json", "summary.json", "msmemscope_logs"} <= names, names
    assert any(n.startswith("report_") and n.endswith(".html") for n in names), names
    assert any(n.startswith("trace_") and n.endswith(".json") for n in names), names
    assert list(moved.glob("device_*/dump/memscope_dump_*.csv")), names
    # ... and the run says so: 70, with one error line naming the folder.
    assert p.returncode == 70, stdout + stderr
    errors = [line for line in stderr.splitlines() if line.startswith("msmemscope: error:")]
    assert any(f"{folder}: the process folder was replaced during the run (by a symbolic link); nothing was "
               "written through it" in line for line in errors), stderr


def test_compare_output_with_a_planted_compare_link_is_refused(tmp_path):
    for name in ("a", "b"):
        run_cli(["--device=cpu", "--analysis=", f"--output={tmp_path}/{name}", "--", "/bin/true"],
                cwd=tmp_path, check_rc=0)
    victim = tmp_path / "victim"
    victim.mkdir()
    cmp_out = tmp_path / "cmp"
    cmp_out.mkdir()
    (cmp_out / "compare").symlink_to(victim)
    p = subprocess.run([str(CLI), "--compare", f"--input={tmp_path}/a,{tmp_path}/b", f"--output={cmp_out}"],
                       cwd=str(tmp_path), env=_env(), capture_output=True, text=True, timeout=300)
    assert p.returncode == 2, p.stdout + p.stderr
    assert p.stderr.strip().splitlines()[-1] == (
        f"msmemscope: error: --output: cannot create or write '{cmp_out}/compare': compare: Not a directory "
        "(not a folder, or a symbolic link)")
    # Nothing through the link: no result, no log.
    assert list(victim.iterdir()) == []
    assert (cmp_out / "compare").is_symlink()


def test_compare_output_positive_control(tmp_path):
    """The same compare into a fresh folder writes its result and its log."""
    for name in ("a", "b"):
        run_cli(["--device=cpu", "--analysis=", f"--output={tmp_path}/{name}", "--", "/bin/true"],
                cwd=tmp_path, check_rc=0)
    p = subprocess.run([str(CLI), "--compare", f"--input={tmp_path}/a,{tmp_path}/b", f"--output={tmp_path}/cmp"],
                       cwd=str(tmp_path), env=_env(), capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stdout + p.stderr
    assert len(list((tmp_path / "cmp" / "compare").glob("memory_compare_*.csv"))) == 1
    logs = list((tmp_path / "cmp" / "compare" / "msmemscope_logs").glob("msmemscope_*.log"))
    assert len(logs) == 1
    text = logs[0].read_text()
    assert "Start to compare memory data." in text and "The memory comparison has been completed" in text
