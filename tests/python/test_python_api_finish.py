"""msmemscope.finish(): the session ends while the program goes on. Without
it a Python API run's files (the html, summary.json, the leak report) came
only at the process's exit: a notebook's kernel, which runs on, never had
them. After finish() they are complete, finish() returns the process folder,
nothing more is recorded, and start() and step() say why they refuse."""
import json
import os
import re
import subprocess
import textwrap

from conftest import BUILD, clean_env as env_for, process_dirs

PY = "/usr/bin/python3"

PROGRAM = """
import glob, json, os, sys, torch, msmemscope
msmemscope.config(device="cpu", analysis="leaks,decompose", sinks="csv,html", call_stack="python", output="out")
msmemscope.start()
keep = [torch.zeros(1000) for _ in range(10)]  # 10 x 4000 bytes, live at the end
msmemscope.step()
folder = msmemscope.finish()  # FINISH_LINE
print("FOLDER", folder, flush=True)
# everything is there now, while the program runs on
s = json.load(open(os.path.join(folder, "summary.json")))
print("ENDED", s["ended"]["how"], s["ended"]["text"], flush=True)
print("HTML", len(glob.glob(os.path.join(folder, "report_*.html"))), flush=True)
(dump,) = glob.glob(os.path.join(folder, "device_cpu", "dump", "memscope_dump_*.csv"))
rows = open(dump).read()
print("ROWS", rows.count(",MALLOC,PTA,"), rows.count("STOP_TRACE"), flush=True)
# not recorded: the dump is written and stays as it is
after = [torch.ones(5000) for _ in range(3)]
del after
for api in (msmemscope.start, msmemscope.step):
    try:
        api()
    except RuntimeError as e:
        print("REFUSED", e, flush=True)
msmemscope.stop()  # nothing to stop
print("AGAIN", msmemscope.finish() == folder, open(dump).read() == rows, flush=True)
sys.stdout.flush()
if sys.argv[1:] == ["_exit"]:
    os._exit(3)
"""


def run(tmp_path, body, args=(), cli=None, rc=0):
    (tmp_path / "prog.py").write_text(textwrap.dedent(body))
    cmd = [PY, "prog.py", *args]
    if cli is not None:
        cmd = [str(BUILD / "bin" / "msmemscope")] + cli + ["--"] + cmd
    p = subprocess.run(cmd, cwd=str(tmp_path), env=env_for(), capture_output=True, text=True, timeout=600)
    assert p.returncode == rc, f"rc={p.returncode}\nstdout:\n{p.stdout}\nstderr:\n{p.stderr}"
    return p


def lines(p, tag):
    return [l[len(tag) + 1:] for l in p.stdout.splitlines() if l.startswith(tag + " ")]


def test_finish_writes_every_file_while_the_program_goes_on(tmp_path):
    p = run(tmp_path, PROGRAM)
    (folder,) = process_dirs(tmp_path / "out")
    assert lines(p, "FOLDER") == [str(folder)]
    assert lines(p, "ENDED") == ["detached detached"]
    assert lines(p, "HTML") == ["1"]
    assert lines(p, "ROWS") == ["10 1"]
    finish_line = next(i for i, l in enumerate(PROGRAM.splitlines(), 1) if "FINISH_LINE" in l)
    where = f"msmemscope.finish() at {tmp_path / 'prog.py'}:{finish_line}"
    assert lines(p, "REFUSED") == [
        f"msmemscope.{api}(): this process's session was ended by {where}; a process has one session (its files are "
        f"in {folder}): profile another run in a new process" for api in ("start", "step")]
    assert lines(p, "AGAIN") == ["True True"]
    # the report came once, at finish(), before the program's next line
    assert p.stdout.count("msmemscope: pid ") == 1, p.stdout
    assert p.stdout.index(f"msmemscope: pid {json.loads((folder / 'summary.json').read_text())['pid']} ") < \
        p.stdout.index("FOLDER "), p.stdout
    # the decomposition: the ten kept tensors, nothing of what came after
    assert re.search(r"^  PTA@ops@aten +40000 +40000 +10$", p.stdout, re.M), p.stdout
    assert "Warning" not in p.stderr and "Traceback" not in p.stderr, p.stderr


def test_finish_then_exit_underscore(tmp_path):
    # os._exit() after finish(): the agent's _exit hook finds the stream
    # ended and writes nothing; the status is the program's
    p = run(tmp_path, PROGRAM, args=["_exit"], rc=3)
    assert lines(p, "AGAIN") == ["True True"]
    assert p.stdout.count("msmemscope: pid ") == 1, p.stdout
    assert "Traceback" not in p.stderr, p.stderr


def test_finish_without_a_session_and_under_the_cli(tmp_path):
    p = run(tmp_path, """
        import msmemscope
        try:
            msmemscope.finish()
        except RuntimeError as e:
            print("REFUSED", e)
        """)
    assert lines(p, "REFUSED") == ["msmemscope.finish(): there is no session to finish (msmemscope.start() was "
                                   "never called in this process)"]
    p = run(tmp_path, """
        import msmemscope
        msmemscope.start()
        try:
            msmemscope.finish()
        except RuntimeError as e:
            print("REFUSED", e)
        """, cli=["--device=cpu", "--output=cli_out"])
    assert lines(p, "REFUSED") == ["msmemscope.finish(): this process runs under the msmemscope command line, whose "
                                   "session ends with the program (its files are written then)"]
