"""Issue #19 item 3: one status line on stderr while a run goes on, only when
stderr is a terminal (a pty here) and --quiet was not given."""
import os
import pty
import select
import subprocess
import time

from conftest import CLI


def _env():
    e = dict(os.environ)
    e.pop("LD_PRELOAD", None)
    e["TERM"] = "xterm"
    return e


def _start(args, tmp_path, tty=True):
    fifo = tmp_path / "go"
    os.mkfifo(fifo)
    # The program waits on the fifo: the test lets it end once it has seen
    # (or not needed) the status line -- a barrier, not a sleep.
    prog = ["bash", "-c", f"read line < {fifo}; echo done"]
    master = slave = None
    if tty:
        master, slave = pty.openpty()
    p = subprocess.Popen([str(CLI), *args, f"--output={tmp_path}/out", "--", *prog], cwd=tmp_path, env=_env(),
                         stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                         stderr=slave if tty else subprocess.PIPE)
    if slave is not None:
        os.close(slave)
    return p, master, fifo


def _read_until(master, needle, limit_s=120):
    seen = b""
    end = time.monotonic() + limit_s
    while needle not in seen and time.monotonic() < end:
        r, _, _ = select.select([master], [], [], 1.0)
        if r:
            try:
                seen += os.read(master, 65536)
            except OSError:
                break
    return seen


def _drain(master):
    out = b""
    while True:
        r, _, _ = select.select([master], [], [], 5.0)
        if not r:
            return out
        try:
            chunk = os.read(master, 65536)
        except OSError:
            return out
        if not chunk:
            return out
        out += chunk


def test_status_line_on_a_terminal(tmp_path):
    p, master, fifo = _start(["--device=cpu"], tmp_path)
    seen = _read_until(master, b"program running")
    with open(fifo, "w") as f:
        f.write("go\n")
    rest = _drain(master)
    out, _ = p.communicate(timeout=120)
    os.close(master)
    assert p.returncode == 0, seen + rest
    text = (seen + rest).decode(errors="replace")
    # One line, redrawn in place: carriage return and erase-line, no newline.
    assert "\r\x1b[Kmsmemscope: " in text, text
    status = [s for s in text.split("\r\x1b[K") if s.startswith("msmemscope: ") and " events (" in s]
    assert status, text
    assert all("\n" not in s for s in status), status
    assert "/s)" in status[0] and "cpu/HOST" in status[-1] and "program running" in text
    # The line is cleared before the run ends: the last thing on the terminal is no status line.
    assert text.rstrip(" ").endswith("\r\x1b[K") or "events (" not in text.split("\r\x1b[K")[-1]
    assert "done" in out.decode()


def test_no_status_line_when_stderr_is_not_a_terminal_or_with_quiet(tmp_path):
    (tmp_path / "a").mkdir()
    p, _, fifo = _start(["--device=cpu"], tmp_path / "a", tty=False)
    # The host runs for as long as the program waits; then it is let go.
    time.sleep(1.5)
    with open(fifo, "w") as f:
        f.write("go\n")
    out, err = p.communicate(timeout=120)
    assert p.returncode == 0, err
    assert b"\r" not in err and b"events (" not in err and b"\x1b[" not in err
    (tmp_path / "b").mkdir()
    p, master, fifo = _start(["--device=cpu", "--quiet"], tmp_path / "b")
    time.sleep(1.5)
    with open(fifo, "w") as f:
        f.write("go\n")
    rest = _drain(master)
    p.communicate(timeout=120)
    os.close(master)
    assert p.returncode == 0
    assert b"events (" not in rest and b"\x1b[K" not in rest, rest

