"""Issue #19 item 3: one status line on stderr while a run goes on, only when
stderr is a terminal (a pty here) and --quiet was not given: events, rate,
memory per pool, and the phases with their numbers -- the capture read after
the program ended, "symbolizing A / B stacks", and per sink that is writing
"writing csv 12.3 MiB / 40.1 MiB" (plugin ABI 1.2 progress), ending at the
files' real sizes. A sink built against ABI 1.1 runs beside them unchanged.

MSMEMSCOPE_PROGRESS_SYNC=1 makes the host draw every state it reports before
going on (progress.h): the test sees each step whatever the machine's speed,
and without a terminal any line at all would show at once."""
import fcntl
import os
import pty
import re
import select
import struct
import subprocess
import termios
import time

from conftest import BUILD, CLI, TEST_BIN, dump_files, process_dirs

ABI_PLUGINS = BUILD / "tests" / "lib" / "abi_plugins"
UNITS = {"B": 1, "KiB": 1024, "MiB": 1024 ** 2, "GiB": 1024 ** 3, "TiB": 1024 ** 4}


def _env(sync=False):
    e = dict(os.environ)
    e.pop("LD_PRELOAD", None)
    e.pop("PYTHONPATH", None)
    e["TERM"] = "xterm"
    if sync:
        e["MSMEMSCOPE_PROGRESS_SYNC"] = "1"
    return e


def _pty(cols=400):
    master, slave = pty.openpty()
    # A wide terminal: the line is cut at its width.
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 50, cols, 0, 0))
    return master, slave


def _read_all(master, p):
    """Everything written to the terminal until the process has ended."""
    out = b""
    while True:
        r, _, _ = select.select([master], [], [], 0.5)
        chunk = b""
        if r:
            try:
                chunk = os.read(master, 65536)
            except OSError:  # EIO: no writer has the terminal open any more
                chunk = b""
        if chunk:
            out += chunk
        elif p.poll() is not None:
            return out
        elif r:
            p.wait(timeout=300)


def _human(n):
    """The line's byte figure, as framework/host/progress.cpp writes it."""
    units = [" B", " KiB", " MiB", " GiB", " TiB"]
    v, u = float(n), 0
    while v >= 1024 and u < len(units) - 1:
        v /= 1024
        u += 1
    return f"{v:.0f}{units[0]}" if u == 0 else f"{v:.1f}{units[u]}"


def _bytes(text):
    num, unit = text.split(" ")
    return float(num) * UNITS[unit]


def _lines(raw):
    text = raw.decode(errors="replace")
    return [s for s in text.split("\r\x1b[K") if s.startswith("msmemscope: ") and " events (" in s]


# ---------------------------------------------------------------- the default line
def _start_waiting(args, tmp_path):
    fifo = tmp_path / "go"
    os.mkfifo(fifo)
    # The program waits on the fifo: the test lets it end once it has seen
    # the status line -- a barrier, not a sleep.
    prog = ["bash", "-c", f"read line < {fifo}; echo done"]
    master, slave = _pty()
    p = subprocess.Popen([str(CLI), *args, f"--output={tmp_path}/out", "--", *prog], cwd=tmp_path, env=_env(),
                         stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=slave)
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


def test_status_line_on_a_terminal(tmp_path):
    p, master, fifo = _start_waiting(["--device=cpu"], tmp_path)
    seen = _read_until(master, b"program running")
    with open(fifo, "w") as f:
        f.write("go\n")
    rest = _read_all(master, p)
    out, _ = p.communicate(timeout=120)
    os.close(master)
    assert p.returncode == 0, seen + rest
    text = (seen + rest).decode(errors="replace")
    # One line, redrawn in place: carriage return and erase-line, no newline.
    assert "\r\x1b[Kmsmemscope: " in text, text
    status = _lines(seen + rest)
    assert status, text
    assert all("\n" not in s for s in status), status
    assert "/s)" in status[0] and "cpu/HOST" in status[-1] and "program running" in text
    # The line is cleared before the run ends: the last thing on the terminal is no status line.
    assert text.rstrip(" ").endswith("\r\x1b[K") or "events (" not in text.split("\r\x1b[K")[-1]
    assert "done" in out.decode()


# ---------------------------------------------------------------- phases and sinks
SINK_FILES = {
    "csv": lambda d: dump_files(d),
    "db": lambda d: list(d.glob("device_cpu/dump/memscope_dump_*.db")),
    "html": lambda d: list(d.glob("report_*.html")),
    "trace": lambda d: list(d.glob("trace_*.json")),
    "memory_viz": lambda d: list(d.glob("memory_viz_*.pickle")),
}


def test_phases_with_numbers_that_grow_and_end_at_the_file_sizes(tmp_path):
    master, slave = _pty()
    # 30000 malloc/free pairs with C stacks: a csv of tens of MiB, written in
    # 8 MiB pieces, a db reported every 16384 rows, a trace in 1 MiB pieces.
    args = [str(CLI), "--device=cpu", "--call-stack=c", "--data-format=csv", "--sinks=db,html,trace,memory_viz,abi11_sink",
            f"--plugin-path={ABI_PLUGINS}", f"--output={tmp_path}/out", "--", str(TEST_BIN / "sinks_alloc_loop"), "30000"]
    p = subprocess.Popen(args, cwd=tmp_path, env=_env(sync=True), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                         stderr=slave)
    os.close(slave)
    raw = _read_all(master, p)
    out, _ = p.communicate(timeout=300)
    os.close(master)
    text = raw.decode(errors="replace")
    assert p.returncode == 0, text[-3000:] + out.decode()
    lines = _lines(raw)
    assert lines, text[-3000:]
    [proc] = process_dirs(tmp_path / "out")

    # The capture read after the program ended, with how much of it.
    assert any(re.search(r"\| program ended, reading its capture \d+%", s) for s in lines), lines[-5:]
    # ... up to all of it (a thread's staging slot counts as read: it holds no chunk of its own).
    assert any("| program ended, reading its capture 100%" in s for s in lines), lines[-5:]
    assert any("| writing outputs" in s for s in lines), lines[-5:]

    # Symbolizing: done / total, growing, ending with every stack the program defined.
    sym = [tuple(int(x) for x in m.groups()) for s in lines for m in [re.search(r"symbolizing (\d+) / (\d+) stacks", s)]
           if m]
    assert sym, lines[-5:]
    assert all(a <= b for a, b in sym), sym
    assert [a for a, _ in sym] == sorted(a for a, _ in sym), sym
    assert sym[-1][0] == sym[-1][1] >= 1, sym

    # Each sink: its bytes so far (with a total once known), never shrinking,
    # and at the end exactly its files' size (as the line writes sizes).
    for sink, files_of in SINK_FILES.items():
        files = files_of(proc)
        assert files, (sink, list(proc.rglob("*")))
        real = sum(f.stat().st_size for f in files)
        shown = [m.groups() for s in lines
                 for m in re.finditer(rf"writing {sink} ([\d.]+ [KMGT]?i?B)(?: / (~?)([\d.]+ [KMGT]?i?B))?", s)]
        assert shown, (sink, lines[-5:])
        done = [_bytes(d) for d, _, _ in shown]
        assert done == sorted(done), (sink, shown)
        last_done, tilde, last_total = shown[-1]
        assert (last_done, tilde, last_total) == (_human(real), "", _human(real)), (sink, shown[-3:], real)
        if sink in ("csv", "db", "trace"):
            assert len(set(done)) >= 3, (sink, shown)  # written as the run goes, not all at the end
        if sink == "html":
            # rendered into the file in 256 KiB pieces, not built whole in memory first
            assert real > 2 * 256 * 1024, real
            assert len(set(done)) >= 3, (sink, shown)
            # its size is known only at its end (the line may draw that last state more than once)
            assert not any(t for d, _, t in shown if d != last_done), shown
    # The csv: a total (here an estimate) shown while the capture was still being read, or exact at the end.
    csv_totals = [t for s in lines for t in re.findall(r"writing csv [\d.]+ [KMGT]?i?B / (~?[\d.]+ [KMGT]?i?B)", s)]
    assert csv_totals, lines[-5:]

    # The ABI 1.1 sink ran and wrote its file; it reports nothing (it cannot).
    [txt] = proc.glob("abi11_sink_*.txt")
    assert re.fullmatch(r"events \d+\n", txt.read_text())
    assert "abi11_sink" not in text
    # The line is cleared before the summary.
    assert "\r\x1b[K" in text and "events (" not in text.split("\r\x1b[K")[-1]


def test_no_status_line_when_stderr_is_not_a_terminal_or_with_quiet(tmp_path):
    # In sync mode the first state would be drawn at once: no waiting needed.
    run = [str(CLI), "--device=cpu", "--sinks=trace", "--", str(TEST_BIN / "sinks_alloc_loop"), "20000"]
    p = subprocess.run(run[:1] + [f"--output={tmp_path}/a"] + run[1:], cwd=tmp_path, env=_env(sync=True),
                       stdin=subprocess.DEVNULL, capture_output=True, timeout=300)
    assert p.returncode == 0, p.stderr
    assert b"\r" not in p.stderr and b"events (" not in p.stderr and b"\x1b[" not in p.stderr, p.stderr
    master, slave = _pty()
    q = subprocess.Popen(run[:1] + ["--quiet", f"--output={tmp_path}/b"] + run[1:], cwd=tmp_path,
                         env=_env(sync=True), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=slave)
    os.close(slave)
    rest = _read_all(master, q)
    q.communicate(timeout=300)
    os.close(master)
    assert q.returncode == 0
    assert b"events (" not in rest and b"\x1b[K" not in rest, rest
    # The same run on a terminal without --quiet draws it (the check above can fail).
    master, slave = _pty()
    r = subprocess.Popen(run[:1] + [f"--output={tmp_path}/c"] + run[1:], cwd=tmp_path, env=_env(sync=True),
                         stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=slave)
    os.close(slave)
    drawn = _read_all(master, r)
    r.communicate(timeout=300)
    os.close(master)
    assert r.returncode == 0
    assert b"\r\x1b[Kmsmemscope: " in drawn and b"writing trace" in drawn, drawn[-2000:]


# ---------------------------------------------------------------- a backlog read in one go
def _count(s):
    """The line's event count ("599.9k events" -> 599900)."""
    num = re.match(r"msmemscope: ([\d.]+)([kMG]?) events", s)
    return float(num.group(1)) * {"": 1, "k": 1e3, "M": 1e6, "G": 1e9}[num.group(2)]


def test_the_count_and_the_capture_read_move_while_one_poll_delivers_a_backlog(tmp_path):
    # A replay is the whole capture in one poll, as a live run's backlog once
    # the program has ended: the line showed "0 events" (or the count before)
    # until all of it was through.
    save = [str(CLI), "--device=cpu", "--call-stack=c", "--save-capture=true", "--analysis=",
            f"--output={tmp_path}/saved", "--", str(TEST_BIN / "sinks_alloc_loop"), "1000000"]
    p = subprocess.run(save, cwd=tmp_path, env=_env(), stdin=subprocess.DEVNULL, capture_output=True, timeout=300)
    assert p.returncode == 0, p.stderr
    [cap] = list((tmp_path / "saved").rglob("*.msmcap"))
    master, slave = _pty()
    q = subprocess.Popen([str(CLI), f"--replay={cap}", "--data-format=db", f"--output={tmp_path}/replayed"],
                         cwd=tmp_path, env=_env(sync=True), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                         stderr=slave)
    os.close(slave)
    raw = _read_all(master, q)
    out, _ = q.communicate(timeout=300)
    os.close(master)
    assert q.returncode == 0, raw[-2000:] + out
    lines = _lines(raw)
    counts = [_count(s) for s in lines]
    assert counts == sorted(counts), counts
    total = counts[-1]
    assert total >= 2_000_000 * 0.99, lines[-3:]
    # Shown on the way, not only at 0 and at the end: counts and how much of the capture was read.
    between = sorted({c for c in counts if 0 < c < total})
    assert len(between) >= 2, lines[:: max(1, len(lines) // 20)]
    read = {int(m.group(1)) for s in lines for m in [re.search(r"reading its capture (\d+)%", s)] if m}
    assert any(0 < x < 100 for x in read), sorted(read)
