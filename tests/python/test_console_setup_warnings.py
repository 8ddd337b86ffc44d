"""A plugin's warning about its setup is said on the console once per run,
at once: a PyTorch script with --steps and a DataLoader with 4 workers (each
worker a profiled process) heard the leak analysis say it is off 5 times,
and then (0634ee5) only when the run ended, hours after it was true. The
first process to say it says it while the program runs; at the end one line
names how many processes said it and their pids. Each process's log keeps
its own copy."""
import os
import queue
import re
import subprocess
import threading

import pytest

from conftest import CLI, process_dirs

pytest.importorskip("torch")
PY = "/usr/bin/python3"
OFF = "leaks: the leak analysis is off when --steps selects steps (only some events are collected)"
WARNED = f"[msmemscope] warning: {OFF}"
# The program's barrier: it ends once the test has seen the warning.
HOLD = 'open("go").readline()\n'

LOADER = r'''
import torch


class Rows(torch.utils.data.Dataset):
    def __len__(self):
        return 8

    def __getitem__(self, i):
        return torch.full((256,), float(i))


loader = torch.utils.data.DataLoader(Rows(), batch_size=2, num_workers=4, multiprocessing_context="fork")
model = torch.nn.Linear(256, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for x in loader:
    loss = model(x).sum()
    opt.zero_grad()
    loss.backward()
    opt.step()
print("batches done", flush=True)
''' + HOLD


def run_held(args, cwd):
    """Runs msmemscope on a program that ends only once the test writes a
    line on the FIFO 'go'. Returns (stderr's lines up to the warning, said
    while the program waited; the rest of stderr; stdout). Without the
    warning in 120 s the program is let go and the test fails."""
    os.mkfifo(cwd / "go")
    go = os.open(cwd / "go", os.O_RDWR)  # open both ways: neither side blocks in open()
    env = dict(os.environ, PYTHONPATH="")
    env.pop("LD_PRELOAD", None)
    p = subprocess.Popen([str(CLI)] + args, cwd=str(cwd), env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True)
    lines = queue.Queue()

    def read_stderr():
        for line in p.stderr:
            lines.put(line.rstrip("\n"))
        lines.put(None)

    reader = threading.Thread(target=read_stderr)
    reader.start()
    before = []
    try:
        while True:
            line = lines.get(timeout=120)
            if line is None:
                break
            before.append(line)
            if OFF in line:
                break
    except queue.Empty:
        pass
    finally:
        os.write(go, b"go\n")
        stdout = p.stdout.read()
        p.wait(timeout=600)
        reader.join()
        os.close(go)
    after = []
    while (line := lines.get()) is not None:
        after.append(line)
    return before, after, stdout


def pid_of(d):
    return int(re.match(r"msmemscope_(\d+)_", d.name)[1])


def test_a_dataloaders_processes_say_the_leak_analysis_is_off_once_while_it_runs(tmp_path):
    (tmp_path / "loader.py").write_text(LOADER)
    before, after, stdout = run_held(["--device=cpu", "--analysis=leaks", "--sinks=csv", "--steps=1,2",
                                      "--output=out", "--", PY, "loader.py"], tmp_path)
    everything = "\n".join(before + after)
    assert "batches done" in stdout, stdout + everything
    assert before and before[-1] == WARNED, "not said while the program ran:\n" + everything
    dirs = process_dirs(tmp_path / "out")
    assert len(dirs) == 5, dirs  # the program and its 4 workers
    # said once; the end names the processes that said it
    assert [l for l in before + after if OFF in l][0] == WARNED
    ends = [l for l in after if OFF in l]
    assert len(ends) == 1, everything
    m = re.fullmatch(r"\[msmemscope\] warning: \(the warning above, \"" + re.escape(OFF) +
                     r"\", was said by 5 processes: pids ([\d, ]+)\)", ends[0])
    assert m, ends[0]
    assert sorted(int(x) for x in m[1].split(", ")) == sorted(pid_of(d) for d in dirs), ends[0]
    # the log of each process keeps the warning as that process said it
    for d in dirs:
        log = next((d / "msmemscope_logs").glob("*.log")).read_text()
        assert f"[warning] {OFF}\n" in log, log


def test_one_process_says_it_while_it_runs_and_nothing_at_the_end(tmp_path):
    (tmp_path / "one.py").write_text("import torch\nprint(torch.ones(4).sum().item(), flush=True)\n" + HOLD)
    before, after, stdout = run_held(["--device=cpu", "--analysis=leaks", "--sinks=csv", "--steps=1",
                                      "--output=out", "--", PY, "one.py"], tmp_path)
    everything = "\n".join(before + after)
    assert "4.0" in stdout, stdout + everything
    assert before and before[-1] == WARNED, "not said while the program ran:\n" + everything
    assert [l for l in before + after if OFF in l] == [WARNED], everything
    assert not [l for l in after if "was said by" in l], everything
