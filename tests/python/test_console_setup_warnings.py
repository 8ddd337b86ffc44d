"""A plugin's warning about its setup is said once per run, not once per
process: a PyTorch script with --steps and a DataLoader with 4 workers (each
worker a profiled process) heard the leak analysis say it is off 5 times.
The console now says the text once, with how many processes said it and
their pids; each process's log keeps its own copy."""
import re

import pytest

from conftest import process_dirs, run_cli

pytest.importorskip("torch")
PY = "/usr/bin/python3"
OFF = "leaks: the leak analysis is off when --steps selects steps (only some events are collected)"

SCRIPT = r'''
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
'''


def pid_of(d):
    return int(re.match(r"msmemscope_(\d+)_", d.name)[1])


def test_a_dataloaders_processes_say_the_leak_analysis_is_off_once(tmp_path):
    (tmp_path / "loader.py").write_text(SCRIPT)
    p = run_cli(["--device=cpu", "--analysis=leaks", "--sinks=csv", "--steps=1,2", "--output=out", "--", PY,
                 "loader.py"], tmp_path, env={"PYTHONPATH": ""})
    assert "batches done" in p.stdout, p.stdout + p.stderr
    dirs = process_dirs(tmp_path / "out")
    assert len(dirs) == 5, dirs  # the program and its 4 workers
    said = [l for l in p.stderr.splitlines() if OFF in l]
    assert len(said) == 1, p.stderr
    m = re.fullmatch(r"\[msmemscope\] warning: " + re.escape(OFF) + r" \(said by 5 processes: pids ([\d, ]+)\)",
                     said[0])
    assert m, said[0]
    assert sorted(int(x) for x in m[1].split(", ")) == sorted(pid_of(d) for d in dirs), said[0]
    # the log of each process keeps the warning as that process said it
    for d in dirs:
        log = next((d / "msmemscope_logs").glob("*.log")).read_text()
        assert f"[warning] {OFF}\n" in log, log


def test_one_process_says_it_as_before(tmp_path):
    (tmp_path / "one.py").write_text("import torch\nprint(torch.ones(4).sum().item(), flush=True)\n")
    p = run_cli(["--device=cpu", "--analysis=leaks", "--sinks=csv", "--steps=1", "--output=out", "--", PY,
                 "one.py"], tmp_path, env={"PYTHONPATH": ""})
    assert [l for l in p.stderr.splitlines() if OFF in l] == [f"[msmemscope] warning: {OFF}"], p.stderr
