"""A multiprocessing queue whose join was cancelled (cancel_join_thread(), as
a PyTorch DataLoader does with its queues) and that was closed just before
the program ended: its feeder thread is still flushing when the interpreter
exits. CPython never frees what a thread still running then references (the
queue's buffer, locks and condition, the thread itself, the object being
sent), so the leak report listed them as host memory still allocated at
exit, at lines of multiprocessing/queues.py and threading.py, varying from
run to run with how far the feeder had got. The Python collector waits for
such feeders at the exit (bindings/msmemscope/_collect.py before_exit).

The feeder here takes 0.3 s to pickle the one object it sends (a wait no
one ends), so it is always still running when the program's last line has
run."""
import re

from conftest import run_cli

PY = "/usr/bin/python3"

PROG = r'''
import multiprocessing, threading


class Slow:
    def __reduce__(self):  # runs on the feeder thread
        threading.Event().wait(0.3)
        return (Slow, ())


reader = multiprocessing.get_context("fork").Queue()
reader.cancel_join_thread()
reader.put(Slow())
reader.close()
print("feeder running:", reader._thread.is_alive(), flush=True)
'''


def host_sites(stdout):
    m = re.search(r"^  Host memory still allocated at exit on device cpu: .*\n((?:    \d+ block\(s\).*\n)*)", stdout,
                  re.M)
    return re.findall(r"^    \d+ block\(s\), \d+ bytes, allocated at: (.*)$", m.group(1), re.M) if m else []


def test_a_closed_queue_feeder_still_running_at_exit_is_waited_for(tmp_path):
    (tmp_path / "prog.py").write_text(PROG)
    p = run_cli(["--device=cpu", "--call-stack=python", "--analysis=leaks", "--output=out", "--", PY, "prog.py"],
                tmp_path, env={"PYTHONPATH": ""}, timeout=120, check_rc=0)
    assert "feeder running: True" in p.stdout, p.stdout
    # the closed queue's feeder finished: nothing of it (or of the object it sent) is left
    sites = host_sites(p.stdout)
    assert not [s for s in sites if re.search(r"multiprocessing/|threading\.py|prog\.py\(\d+\)", s)], p.stdout
