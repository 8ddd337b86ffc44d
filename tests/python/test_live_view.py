"""The live view (issue #31 items 3-5): `msmemscope --live` draws one screen
a second on a terminal (tested in a tmux pane) or appends plain lines
otherwise; `--live-http` serves a page and /live.json (tested with urllib and
headless Chromium). The figures shown are the pipeline's: they equal the
console summary's and summary.json's of the same run.

The program (tests/programs/live/live_steps.c) runs 5 mstx steps; step s
keeps s MiB from keep_step_buffer() and frees 100 blocks of 4 KiB. After
step 3 it waits on a FIFO the test opens (a barrier): then 1+2+3 MiB are live
from that site, exactly.
"""
import errno
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from conftest import CLI, TEST_BIN, process_dirs

PROG = TEST_BIN / "live_steps"
MiB = 1024 * 1024
BASE = ["--device=cpu", "--call-stack=c:16"]


def env():
    e = dict(os.environ)
    e.pop("LD_PRELOAD", None)
    return e


def until(cond, what, timeout=120):
    """Waits for a condition the run reaches (a barrier), failing after timeout."""
    deadline = time.monotonic() + timeout
    while True:
        v = cond()
        if v:
            return v
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


class Barrier:
    """The FIFO the program reads after step 3: open() returns once the
    program waits there; release() lets it go on."""

    def __init__(self, path):
        self.path = Path(path)
        os.mkfifo(self.path)
        self.fd = None

    def wait_reached(self, proc_alive):
        def opened():
            try:
                self.fd = os.open(self.path, os.O_WRONLY | os.O_NONBLOCK)
                return True
            except OSError as e:
                assert e.errno == errno.ENXIO, e
                assert proc_alive(), "the program ended before its barrier"
                return False
        until(opened, "the program at its barrier")

    def release(self):
        os.write(self.fd, b"x")
        os.close(self.fd)


def folder(out):
    dirs = process_dirs(out)
    assert len(dirs) == 1, dirs
    return dirs[0]


def read_json(path):
    try:
        return json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return None


def live_json_at_barrier(out):
    """The run folder's live.json once it is at the barrier; None before (the
    process's folder may not exist yet when the program reaches its barrier:
    the host makes it as the capture's first rows arrive)."""
    dirs = process_dirs(out)
    if not dirs:
        return None
    assert len(dirs) == 1, dirs
    j = read_json(dirs[0] / "live.json")
    return j if at_barrier(j) else None


def at_barrier(j):
    """live.json once every event before the barrier is in: 3 step ends, 6 MiB live at the top site."""
    return (j and j["steps"] and j["steps"][-1]["step"] == 3 and j["top_sites"]
            and j["top_sites"][0]["live_bytes"] == 6 * MiB)


def human(b):
    units = ["B", "KiB", "MiB", "GiB", "TiB"]
    v, u = float(b), 0
    while abs(v) >= 1024 and u < 4:
        v /= 1024
        u += 1
    return f"{b} B" if u == 0 else f"{v:.1f} {units[u]}"


def check_final(text, summary, console):
    """The last screen (text) against summary.json and the console summary of the same run."""
    pool = summary["pools"]["cpu/HOST"]
    # the console's own line, from the same totals
    assert f"  cpu/HOST: peak {human(pool['peak_bytes'])}, final {human(pool['final_bytes'])}\n" in console
    line = "  %-22s live %10s (%d B)  peak %10s (%d B)" % (
        "cpu/HOST", human(pool["final_bytes"]), pool["final_bytes"], human(pool["peak_bytes"]), pool["peak_bytes"])
    assert line in text, text
    top = summary["top_sites"][0]
    assert top["bytes"] == 15 * MiB and top["blocks"] == 5 and "keep_step_buffer" in top["site"], summary
    m = re.search(r"^ +(\d+) B +(\d+) blocks  cpu/HOST +(\S+)", text.split("TOP ALLOCATION SITES BY LIVE BYTES\n")[1],
                  re.M)
    assert m and (int(m.group(1)), int(m.group(2))) == (top["bytes"], top["blocks"]), text
    assert m.group(3).startswith("keep_step_buffer+"), text
    leaks = summary["leaks"]
    assert (f"leak analysis at the end: {leaks['allocations']} block(s), {leaks['bytes']} B in 1 finding(s)"
            in text), text
    assert f"[finished: {summary['ended']['text']}]" in text.split("\n", 1)[0]
    assert summary["ended"]["text"] == "exited with code 0"
    # growth per step: step s kept s MiB
    for s in range(2, 6):
        assert re.search(rf"^  step {s} +live \d+ B  \+{s * MiB} B$", text, re.M), text


# ---------------------------------------------------------------- terminal

@pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed")
def test_live_terminal_screen_in_tmux(tmp_path):
    """--live on a terminal: one screen redrawn in place while the program
    runs (the pool, its peak, the top site), the last screen stays above the
    console summary, with the same figures as the summary and summary.json."""
    fifo = Barrier(tmp_path / "barrier")
    out = tmp_path / "out"
    script = tmp_path / "run.sh"
    args = " ".join([str(CLI), "--live", *BASE, "-o", str(out), "--", str(PROG), str(fifo.path), "3"])
    script.write_text(f"#!/bin/sh\nunset LD_PRELOAD\ncd {tmp_path}\n{args} 2>{tmp_path}/stderr.txt\n"
                      f"echo MSMS_EXIT=$?\nexec sleep 600\n")
    script.chmod(0o755)
    sock = f"msms_live_{os.getpid()}"
    tmux = ["tmux", "-L", sock]
    subprocess.run(tmux + ["-f", "/dev/null", "new-session", "-d", "-x", "200", "-y", "90", str(script)],
                   check=True, env=env())
    try:
        def pane():
            return subprocess.run(tmux + ["capture-pane", "-p", "-t", "0"], capture_output=True, text=True).stdout

        def alive():
            return "MSMS_EXIT=" not in pane()

        fifo.wait_reached(alive)
        live = until(lambda: live_json_at_barrier(out), "live.json at the barrier")
        assert live["finished"] is False
        pool = next(p for p in live["pools"] if p["pool"] == "cpu/HOST")
        # the screen shows that snapshot (redrawn each second): the pool, its peak, the top site
        want = "  %-22s live %10s (%d B)  peak %10s (%d B)" % (
            "cpu/HOST", human(pool["live_bytes"]), pool["live_bytes"], human(pool["peak_bytes"]), pool["peak_bytes"])
        screen = until(lambda: (lambda s: s if want in s and "[running]" in s else None)(pane()),
                       "the screen at the barrier")
        assert re.search(r"^ +6291456 B +3 blocks  cpu/HOST +keep_step_buffer\+", screen, re.M), screen
        assert "msmemscope live: pid " in screen and "  step 3  " in screen, screen
        # one screen: drawn in place, not appended (the header once)
        assert screen.count("msmemscope live: pid ") == 1, screen
        fifo.release()
        final = until(lambda: (lambda s: s if "MSMS_EXIT=" in s else None)(pane()), "the end of the run")
        assert "MSMS_EXIT=0" in final, final + (tmp_path / "stderr.txt").read_text()
        summary = json.loads((folder(out) / "summary.json").read_text())
        live_part, _, console = final.partition("msmemscope: pid ")
        check_final(live_part, summary, "msmemscope: pid " + console)
        final_json = read_json(folder(out) / "live.json")
        assert final_json["finished"] is True
        assert {p["pool"]: p["peak_bytes"] for p in final_json["pools"]} == {
            k: v["peak_bytes"] for k, v in summary["pools"].items()}
    finally:
        subprocess.run(tmux + ["kill-server"], capture_output=True)


def test_live_plain_lines_when_not_a_terminal(tmp_path):
    """stdout a pipe: no terminal control, each changed screen appended as
    plain lines, the last one before the console summary with its figures."""
    out = tmp_path / "out"
    p = subprocess.run([str(CLI), "--live", *BASE, "-o", str(out), "--", str(PROG)], cwd=tmp_path, env=env(),
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    assert "\x1b" not in p.stdout
    live_part, _, console = p.stdout.partition("msmemscope: pid ")
    last = live_part.split("msmemscope live: pid ")[-1]
    summary = json.loads((folder(out) / "summary.json").read_text())
    check_final(last, summary, "msmemscope: pid " + console)
    assert (folder(out) / "live.txt").read_text() == "msmemscope live: pid " + last[:-1]


def test_live_without_live_option_writes_no_view(tmp_path):
    out = tmp_path / "out"
    p = subprocess.run([str(CLI), *BASE, "-o", str(out), "--", str(PROG)], cwd=tmp_path, env=env(),
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    assert not (folder(out) / "live.json").exists()
    assert "msmemscope live" not in p.stdout


def test_live_interrupted_after_the_program_ended_says_not_finished(tmp_path):
    """Ctrl-C once the program has ended, while a sink's finish() hangs: the
    worker that writes live.json and live.txt is killed, and they said
    "running" for good (the CLI's last screen too). They now say the view is
    not finished."""
    fixtures = CLI.parent.parent / "tests" / "lib" / "bad_plugins"
    fifo = Barrier(tmp_path / "barrier")
    in_finish = tmp_path / "in_finish"
    os.mkfifo(in_finish)
    out = tmp_path / "out"
    e = env()
    e["MSMEMSCOPE_FIXTURE_FIFO"] = str(in_finish)
    p = subprocess.Popen([str(CLI), "--live", *BASE, "--plugin-path", str(fixtures), "--sinks=hang_in_finish",
                          "-o", str(out), "--", str(PROG), str(fifo.path), "3"], cwd=tmp_path, env=e,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    fifo.wait_reached(lambda: p.poll() is None)
    until(lambda: live_json_at_barrier(out), "live.json at the barrier")
    fifo.release()
    got = []
    t = threading.Thread(target=lambda: got.append(open(in_finish, "rb").read(1)), daemon=True)
    t.start()
    t.join(120)
    assert got, "the sink's finish() was not reached"
    p.send_signal(signal.SIGINT)
    stdout, stderr = p.communicate(timeout=120)
    assert p.returncode == 70, stderr
    assert "not finished: msmemscope was interrupted by SIGINT after the program had ended" in stderr, stderr
    live = read_json(folder(out) / "live.json")
    assert live["finished"] is False and live["interrupted"] is True, live
    assert live["steps"][-1]["step"] >= 3, live
    text = (folder(out) / "live.txt").read_text()
    first = text.split("\n", 1)[0]
    assert first.endswith("  [not finished: msmemscope was interrupted]"), first
    assert "[running]" not in text
    # the CLI's last screen (stdout a pipe: appended lines) is that file's
    last = stdout.split("msmemscope live: pid ")[-1]
    assert last.split("\n", 1)[0] == first[len("msmemscope live: pid "):], stdout


def test_live_view_names_a_plugin_failure_while_the_program_runs(tmp_path):
    """An analyzer that fails while the program runs is left out: its figures
    stop changing. The live view says so when it happens (not only the
    report at the end), in the HTML report's words, in live.json (the
    --live-http page) and on the screen (live.txt, the terminal's view)."""
    fixtures = CLI.parent.parent / "tests" / "lib" / "bad_plugins"
    fifo = Barrier(tmp_path / "barrier")
    out = tmp_path / "out"
    with open(tmp_path / "stdout.txt", "w") as so, open(tmp_path / "stderr.txt", "w") as se:
        p = subprocess.Popen([str(CLI), "--live", *BASE, "--plugin-path", str(fixtures),
                              "--analysis=leaks,throws_in_event", "-o", str(out), "--", str(PROG), str(fifo.path),
                              "3"], cwd=tmp_path, env=env(), stdout=so, stderr=se)
        try:
            fifo.wait_reached(lambda: p.poll() is None)
            live = until(lambda: live_json_at_barrier(out), "live.json at the barrier")
            banner = ("Plugin 'throws_in_event' (analyzer) failed: failed on event 1: throws_in_event: on purpose. "
                      "This page is without what it would have added.")
            assert live["finished"] is False
            assert live["plugin_failures"] == [{"plugin": "throws_in_event", "kind": "analyzer",
                                                "what": "failed on event 1: throws_in_event: on purpose",
                                                "text": banner}], live
            screen = until(lambda: (lambda t: t if t and "[running]" in t and "  step 3  " in t else None)(
                (folder(out) / "live.txt").read_text()), "live.txt at the barrier")
            assert screen.split("\n")[2] == banner, screen  # under the header, above the figures
        finally:
            fifo.release()
        assert p.wait(timeout=300) == 71, (tmp_path / "stderr.txt").read_text()
    final = read_json(folder(out) / "live.json")
    assert final["finished"] is True and [f["plugin"] for f in final["plugin_failures"]] == ["throws_in_event"]


@pytest.mark.parametrize("sig", ["SIGSEGV", "SIGKILL"])
def test_live_last_screen_says_how_the_program_ended(tmp_path, sig):
    """A program that dies: the view's last screen said only "[finished]", as
    for a run that went well. It now says how the program ended, in
    summary.json's words (SIGKILL leaves no end record: the CLI's wait
    status says it)."""
    fifo = Barrier(tmp_path / "barrier")
    out = tmp_path / "out"
    p = subprocess.Popen([str(CLI), "--live", *BASE, "-o", str(out), "--", str(PROG), str(fifo.path), "3"],
                         cwd=tmp_path, env=env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    fifo.wait_reached(lambda: p.poll() is None)
    live = until(lambda: live_json_at_barrier(out), "live.json at the barrier")
    os.kill(live["pid"], getattr(signal, sig))
    stdout, stderr = p.communicate(timeout=120)
    os.close(fifo.fd)
    number = int(getattr(signal, sig))
    summary = json.loads((folder(out) / "summary.json").read_text())
    assert summary["ended"]["text"] == f"killed by signal {number} ({sig})", summary["ended"]
    text = (folder(out) / "live.txt").read_text()
    first = text.split("\n", 1)[0]
    assert first.endswith(f"  [finished: killed by signal {number} ({sig})]"), first
    final = read_json(folder(out) / "live.json")
    assert final["finished"] is True and final["ended"] == summary["ended"]["text"], final
    # the CLI's last screen (appended lines) is that file's
    assert stdout.split("msmemscope live: pid ")[-1].split("\n", 1)[0] == first[len("msmemscope live: pid "):], stdout


# ---------------------------------------------------------------- web page

def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def get(url):
    with urllib.request.urlopen(url, timeout=30) as r:
        return r.status, r.headers.get("Content-Type"), r.read().decode()


@pytest.mark.skipif(shutil.which("chromium") is None, reason="chromium is not installed")
def test_live_http_page_in_headless_chromium(tmp_path):
    """--live-http=127.0.0.1:PORT: /live.json has the pipeline's figures;
    the page, run by headless Chromium, shows the same figures; any other
    path is 404; after the run the figures equal summary.json's and the
    server is gone."""
    fifo = Barrier(tmp_path / "barrier")
    out = tmp_path / "out"
    port = free_port()
    proc = subprocess.Popen([str(CLI), f"--live-http=127.0.0.1:{port}", *BASE, "-o", str(out), "--", str(PROG),
                             str(fifo.path), "3"], cwd=tmp_path, env=env(), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    errs = []
    t = threading.Thread(target=lambda: errs.append(proc.stderr.read()))
    t.start()
    try:
        fifo.wait_reached(lambda: proc.poll() is None)
        base = f"http://127.0.0.1:{port}"

        def snapshot():
            status, ctype, body = get(base + "/live.json")
            assert status == 200 and ctype == "application/json"
            j = json.loads(body)
            return j if j["processes"] and at_barrier(j["processes"][0]) else None

        j = until(snapshot, "/live.json at the barrier")
        assert j["running"] is True and len(j["processes"]) == 1
        p = j["processes"][0]
        # the same as the run folder's live.json (what the host's worker wrote)
        on_disk = read_json(folder(out) / "live.json")
        assert on_disk["pools"] == p["pools"] and on_disk["top_sites"] == p["top_sites"]

        status, ctype, page = get(base + "/")
        assert status == 200 and ctype == "text/html; charset=utf-8"
        assert "<script>" in page and "/live.json" in page
        for path in ["/etc/passwd", "/live.txt", "/summary.json", "/../live.json", "/config.json"]:
            with pytest.raises(urllib.error.HTTPError) as e:
                get(base + path)
            assert e.value.code == 404, path

        # another site's name in Host (DNS rebinding): refused
        import http.client
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        c.request("GET", "/live.json", headers={"Host": f"evil.example:{port}"})
        r = c.getresponse()
        assert r.status == 403 and r.read() == b"forbidden: unexpected Host header\n"
        c.close()

        shot = tmp_path / "live.png"
        chrome = ["chromium", "--headless", "--no-sandbox", "--disable-gpu", "--virtual-time-budget=5000",
                  "--window-size=1400,1000", f"--user-data-dir={tmp_path / 'chrome'}"]
        dom = subprocess.run(chrome + ["--dump-dom", base + "/"], capture_output=True, text=True, timeout=120).stdout
        subprocess.run(chrome + [f"--screenshot={shot}", base + "/"], capture_output=True, timeout=120)
        assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        assert 'data-updated="1"' in dom, dom[:2000]
        pool = next(x for x in p["pools"] if x["pool"] == "cpu/HOST")
        m = re.search(r'<tr class="pool" data-pool="cpu/HOST">.*?class="num live" data-bytes="(\d+)">.*?'
                      r'class="num peak" data-bytes="(\d+)"', dom)
        assert m and (int(m.group(1)), int(m.group(2))) == (pool["live_bytes"], pool["peak_bytes"]), dom[:3000]
        assert f"{human(pool['peak_bytes'])} ({pool['peak_bytes']} B)" in dom
        m = re.search(r'<tr class="site"><td class="num live" data-bytes="(\d+)">.*?data-count="(\d+)".*?<code>([^<]*)</code>',
                      dom)
        top = p["top_sites"][0]
        assert m and (int(m.group(1)), int(m.group(2)), m.group(3)) == (top["live_bytes"], top["live_blocks"],
                                                                         top["site"].replace("&", "&amp;"))
        assert top["live_bytes"] == 6 * MiB and top["live_blocks"] == 3
        steps = re.findall(r'<tr class="step" data-step="(\d+)">.*?class="num growth[^"]*" data-bytes="(-?\d+)"', dom)
        assert steps == [(str(s["step"]), str(s["growth_bytes"])) for s in p["steps"]]

        fifo.release()
        stdout, _ = proc.communicate(timeout=300)
        t.join()
        assert proc.returncode == 0, errs
        assert f"msmemscope: live view on http://127.0.0.1:{port}/\n" in errs[0]
        summary = json.loads((folder(out) / "summary.json").read_text())
        final = read_json(folder(out) / "live.json")
        assert final["finished"] is True
        for x in final["pools"]:
            assert (x["peak_bytes"], x["live_bytes"]) == (summary["pools"][x["pool"]]["peak_bytes"],
                                                          summary["pools"][x["pool"]]["final_bytes"])
            assert f"  {x['pool']}: peak {human(x['peak_bytes'])}, final {human(x['live_bytes'])}\n" in stdout
        assert final["top_sites"][0]["live_bytes"] == summary["top_sites"][0]["bytes"]
        # the server stopped with the run
        with pytest.raises(urllib.error.URLError):
            get(base + "/live.json")
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_live_http_bad_address_and_taken_port(tmp_path):
    p = subprocess.run([str(CLI), "--live-http=example.com:80", *BASE, "--", str(PROG)], cwd=tmp_path, env=env(),
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 2
    assert p.stderr.endswith(
        "msmemscope: error: --live-http: invalid value 'example.com:80' (allowed: PORT or ADDRESS:PORT; ADDRESS an "
        "IPv4 address, an [IPv6] address in brackets or localhost; PORT 0..65535 (0: any free port); e.g. "
        "--live-http=127.0.0.1:8765)\n"), p.stderr
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen(1)
    port = s.getsockname()[1]
    try:
        out = tmp_path / "out"
        p = subprocess.run([str(CLI), f"--live-http=127.0.0.1:{port}", *BASE, "-o", str(out), "--", str(PROG)],
                           cwd=tmp_path, env=env(), capture_output=True, text=True, timeout=60)
    finally:
        s.close()
    assert p.returncode == 2
    assert p.stderr.endswith(f"msmemscope: error: --live-http=127.0.0.1:{port}: cannot listen there: "
                             "Address already in use\n"), p.stderr
    assert not out.exists() or not process_dirs(out)  # the program never started


# ---------------------------------------------------------------- attached

@pytest.mark.skipif(shutil.which("gdb") is None, reason="msmemscope --attach needs gdb")
def test_live_http_on_an_attached_run(tmp_path):
    """The same view for a run attached to a process started without
    msmemscope (the view reads the host's pipeline, not how the program was
    started): its leak shows as the top site while it runs; after Ctrl-C the
    final figures equal summary.json's."""
    ready = tmp_path / "ready"
    prog = subprocess.Popen([str(TEST_BIN / "attach_loop"), str(ready)], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True, env=env(), cwd=str(tmp_path))
    host = None
    try:
        pid = until(lambda: ready.exists() and ready.read_text() and int(ready.read_text()), "attach_loop ready")
        port = free_port()
        out = tmp_path / "out"
        host = subprocess.Popen([str(CLI), f"--attach={pid}", f"--live-http=127.0.0.1:{port}", *BASE,
                                 f"--output={out}"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                env=env(), cwd="/")
        seen = []
        for line in host.stderr:
            seen.append(line)
            if line.startswith(f"msmemscope: attached to pid {pid};"):
                break
        assert f"msmemscope: live view on http://127.0.0.1:{port}/\n" in seen, seen
        prog.stdin.write("leak 5\n")
        prog.stdin.flush()
        assert prog.stdout.readline() == "leaked 5\n"

        def leak_shown():
            j = json.loads(get(f"http://127.0.0.1:{port}/live.json")[2])
            if not j["processes"]:
                return None
            p = j["processes"][0]
            return p if any(s["live_bytes"] == 15000 and s["live_blocks"] == 5 for s in p["top_sites"]) else None

        p = until(leak_shown, "the attached run's leak in /live.json")
        assert p["pid"] == pid and p["finished"] is False
        host.send_signal(signal.SIGINT)  # Ctrl-C: detach
        stdout, _ = host.communicate(timeout=300)
        assert host.returncode == 0, stdout
        summary = json.loads((folder(out) / "summary.json").read_text())
        final = read_json(folder(out) / "live.json")
        assert final["finished"] is True
        assert {x["pool"]: (x["peak_bytes"], x["live_bytes"]) for x in final["pools"]} == {
            k: (v["peak_bytes"], v["final_bytes"]) for k, v in summary["pools"].items()}
        with pytest.raises(urllib.error.URLError):
            get(f"http://127.0.0.1:{port}/live.json")
        assert prog.poll() is None  # detached: it goes on
        prog.stdin.write("quit\n")
        prog.stdin.flush()
        prog.communicate(timeout=60)
        assert prog.returncode == 0
    finally:
        for p in (host, prog):
            if p is not None and p.poll() is None:
                p.kill()
                p.wait()


# ---------------------------------------------------------------- PyTorch

TORCH_PROG = Path(__file__).resolve().parents[1] / "programs" / "live" / "live_torch.py"


def test_live_pytorch_operator_python_line_and_step_suspects(tmp_path):
    """A PyTorch loop under --live-http: the top site names its operator and
    the program's Python line; the leak suspects are the step analysis's
    warnings as it says them (the same lines as on stderr), while the loop
    waits at its barrier."""
    pytest.importorskip("torch")
    fifo = Barrier(tmp_path / "barrier")
    out = tmp_path / "out"
    port = free_port()
    proc = subprocess.Popen([str(CLI), f"--live-http=127.0.0.1:{port}", "--device=cpu", "--call-stack=python",
                             "-o", str(out), "--", "/usr/bin/python3", str(TORCH_PROG), str(fifo.path), "5"],
                            cwd=tmp_path, env=env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    errs = []
    t = threading.Thread(target=lambda: errs.append(proc.stderr.read()))
    t.start()
    try:
        fifo.wait_reached(lambda: proc.poll() is None)
        leak_line = next(i for i, l in enumerate(TORCH_PROG.read_text().splitlines(), 1) if "LEAK_LINE" in l)

        def ready():
            j = json.loads(get(f"http://127.0.0.1:{port}/live.json")[2])
            p = j["processes"][0] if j["processes"] else None
            # every event before the barrier: steps 1..5 ended, 5 MiB kept
            if not p or not p["steps"] or p["steps"][-1]["step"] != 5:
                return None
            pta = [s for s in p["top_sites"] if s["pool"] == "cpu/PTA"]
            return p if pta and pta[0]["live_bytes"] == 5 * MiB else None

        p = until(ready, "/live.json at the loop's barrier", timeout=300)
        # (the imports' host blocks, live all along, are above it: one site)
        assert p["top_sites"][0]["site"] == "(no stack) while importing Python modules", p["top_sites"][0]
        top = next(s for s in p["top_sites"] if s["pool"] == "cpu/PTA")
        assert top["pool"] == "cpu/PTA" and top["live_blocks"] == 5, top
        assert top["operator"].endswith("aten.ones.default"), top
        assert top["python"] == f"{TORCH_PROG}({leak_line}): <module>", top
        # growth per step: the kept MiB, step after step
        assert all(s["growth_bytes"] >= MiB for s in p["steps"][2:]), p["steps"]
        warnings = p["leak_suspects"]["step_warnings"]
        assert warnings and all(w.startswith("leaks: [device cpu][step ") and "Please check if there is leaks in PTA"
                                in w for w in warnings), warnings
        fifo.release()
        proc.communicate(timeout=600)
        t.join()
        assert proc.returncode == 0, errs
        said = [l[len("[msmemscope] warning: "):] for l in errs[0].splitlines()
                if l.startswith("[msmemscope] warning: leaks: [device cpu][step ")]
        for w in warnings:  # the same lines the analysis wrote on stderr
            assert w in said, (w, said)
        final = read_json(folder(out) / "live.json")
        assert final["finished"] and final["leak_suspects"]["leak_analysis"]["reported"] is True
        rows = [r for r in final["leak_suspects"]["leak_analysis"]["rows"] if r["pool"] == "PTA"]
        # one row per site, as the leak report groups them: steps 2-7's kept MiB
        assert rows == [{"kind": "step", "device": "cpu", "pool": "PTA", "site": f"{TORCH_PROG}({leak_line}): <module>",
                         "operator": "torch._ops.aten.ones.default", "bytes": 6 * MiB, "blocks": 6}], rows
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
