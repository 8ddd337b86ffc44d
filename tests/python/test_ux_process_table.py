"""Issue #27 item 8: the table of processes after a PyTorch DataLoader run
(num_workers=2) under the CLI: each row has its parent pid, says how the
process ended in the words of its summary line, shows that process's own
command, and a worker forked without exec that ended with _exit() (as every
DataLoader worker does) shows no leak: its memory went with it. A child
that exec'ed another program and ended with _exit() still has its leaks."""
import os
import re
import subprocess

import pytest

from conftest import CLI, process_dirs, run_cli

pytest.importorskip("torch")
PY = "/usr/bin/python3"

SCRIPT = r'''
import subprocess, sys
import torch
from torch.utils.data import DataLoader, TensorDataset

ds = TensorDataset(torch.randn(64, 3, 16, 16), torch.randint(0, 10, (64,)))
total = 0.0
for x, y in DataLoader(ds, batch_size=16, num_workers=2):
    total += float(x.sum())
# Another program, run by this one: it ends with _exit(3) holding memory.
rc = subprocess.run([sys.executable, "-c", "import os; kept = [bytearray(4096) for _ in range(100)]; os._exit(3)"]).returncode
print("batches done, child", rc)
'''


def test_dataloader_process_table(tmp_path):
    (tmp_path / "dl.py").write_text(SCRIPT)
    e = dict(os.environ)
    e.pop("LD_PRELOAD", None)
    e.pop("MSMEMSCOPE_SESSION", None)
    p = subprocess.Popen([str(CLI), "--device=cpu", "--sinks=csv", "--output=out", "--", PY, "dl.py"], cwd=str(tmp_path),
                         env=e, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    out, err = p.communicate(timeout=600)
    host = p.pid  # the wrapper execs the host: the program's parent
    assert p.returncode == 0, err
    assert "batches done, child 3" in out, out
    # The summary lines: pid, command, how it ended.
    lines = {int(m[1]): (m[2], m[3]) for m in re.finditer(r"^msmemscope: pid (\d+) \((.*?)\) (.*)$", out, re.M)}
    blocks = {int(b.split(" ", 1)[0]): b for b in re.split(r"^msmemscope: pid ", out, flags=re.M)[1:]}
    m = re.search(r"^msmemscope: (\d+) processes\n  pid +ppid +rank +ended +leaked +peak +command\n((?:  \d+ .*\n)+)",
                  out, re.M)
    assert m, out
    rows = {}
    for r in m[2].splitlines():
        f = re.match(r"^  (\d+) +(\d+) +(\S+) +(.+?) +(-|\d+(?:\.\d)? \w?i?B(?: \(steps\))?) +(cpu/\S+ [\d.]+ \w+(?:; cpu/\S+ [\d.]+ \w+)*) +(\S.*)$", r)
        assert f, r
        rows.setdefault(int(f[1]), []).append(f)
    assert int(m[1]) == sum(len(v) for v in rows.values()) == len(process_dirs(tmp_path / "out"))
    root = [pid for pid, v in rows.items() if int(v[0][2]) == host]
    assert len(root) == 1, (host, m[2])
    root = root[0]
    assert rows[root][0][4] == "exited with code 0" == lines[root][1]
    assert rows[root][0][7] == f"{PY} dl.py"
    # The two DataLoader workers: forked by the program, its command, _exit after fork, no leak.
    workers = [pid for pid, v in rows.items() if pid != root and v[-1][7] == f"{PY} dl.py"]
    assert len(workers) == 2, m[2]
    for w in workers:
        (row,) = rows[w]
        assert int(row[2]) == root
        assert row[4] == "exited with code 0 (_exit after fork)" == lines[w][1], row[0]
        # its steps were judged (none), what it held at its _exit was not, and it says so
        assert row[5] == "0 B (steps)", row[0]
        assert "still allocated at exit" not in blocks[w] and "Detected memory leaks" not in blocks[w], blocks[w]
        assert re.search(r"^leaks: not judged at its end: what it held at its _exit \(cpu/HOST [\d.]+ \w?i?B\) went "
                         r"with it, as a child forked without exec leaves its memory; its step leaks are judged as any "
                         r"process's$", blocks[w], re.M), blocks[w]
    # The program the script ran (after vfork or fork, then exec): its own command, its _exit, its leaks.
    child = [pid for pid, v in rows.items() if v[-1][7].startswith(f"{PY} -c import os")]
    assert len(child) == 1, m[2]
    last = rows[child[0]][-1]
    assert int(last[2]) == root
    assert last[4] == "exited with code 3 (_exit)", last[0]
    assert last[5] != "-", last[0]
    assert "Host memory still allocated at exit" in blocks[child[0]].split("\nmsmemscope: pid ")[-1]
    # index.html: the parent pid column.
    html = (tmp_path / "out" / "index.html").read_text()
    assert "<th>pid</th><th>ppid</th>" in html
    assert f'<td class="n">{workers[0]}</td><td class="n">{root}</td>' in html


def test_a_child_whose_main_returns_says_its_exit_code(tmp_path):
    # (issue #27 item 8) the agent learns the status through on_exit, also
    # when main returns (Python's does, with sys.exit's code): one wording,
    # "exited with code N", for every process, not "exited normally".
    (tmp_path / "kids.py").write_text(
        "import subprocess\n"
        "subprocess.run(['/usr/bin/python3', '-c', 'pass'])\n"
        "subprocess.run(['/usr/bin/python3', '-c', 'import sys; sys.exit(3)'])\n")
    p = run_cli(["--device=cpu", "--analysis=", "--output=out", "--", "/usr/bin/python3", "kids.py"], tmp_path,
                env={"PYTHONPATH": "", "LD_PRELOAD": ""}, check_rc=0)
    assert re.search(r"^msmemscope: pid \d+ \(/usr/bin/python3 -c pass\) exited with code 0$", p.stdout, re.M), p.stdout
    assert re.search(r"^msmemscope: pid \d+ \(/usr/bin/python3 -c import sys; sys\.exit\(3\)\) exited with code 3$",
                     p.stdout, re.M), p.stdout
    assert "exited normally" not in p.stdout
