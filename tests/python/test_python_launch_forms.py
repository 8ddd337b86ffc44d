"""A PyTorch training script launched the ways users launch it: the Python side
is collected (tensor rows with Python stacks), the leak report names the one
deliberate leak (its size, count and line), and summary.json says the same.

The interpreter's isolated modes (-I, -E: PYTHONPATH ignored; -S: no site
module) never import the CLI's sitecustomize; the agent runs it itself from an
audit hook (framework/agent/python_boot.cpp). Before, such a run printed a
warning, had no PTA row, no Python stack and no step, and its leak report was
44941 blocks (9.3 MB, import torch's heap) at an unknown site instead of the
script's 3 leaked tensors."""
import json
import textwrap

import pytest

from conftest import dump_files, process_dirs, read_dump

PY = "/usr/bin/python3"

TRAIN = textwrap.dedent("""\
    import torch
    torch.set_num_threads(1)
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 10))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    kept = []
    for step in range(5):
        x, y = torch.randn(32, 64), torch.randint(0, 10, (32,))
        loss = torch.nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        kept.append(torch.ones(1000, 250))  # the leak: 1,000,000 bytes a step
    print("trained", len(kept))
    """)
LEAK_LINE = 13


@pytest.mark.parametrize("flag", ["-I", "-E", "-sE"])
def test_an_isolated_interpreter_reports_its_training_leak(cli, tmp_path, flag):
    pytest.importorskip("torch")
    (tmp_path / "train.py").write_text(TRAIN)
    p = cli(["--device=cpu", "--analysis=leaks", "--call-stack=python", "--output=out", "--", PY, flag, "train.py"],
            tmp_path, env={"PYTHONPATH": ""}, check_rc=0)
    assert "trained 5" in p.stdout
    assert "never imports msmemscope's sitecustomize" not in p.stderr, p.stderr
    (folder,) = process_dirs(tmp_path / "out")
    pid = int(folder.name.split("_")[1])
    assert f"msmemscope: pid {pid} ({PY} {flag} train.py) exited with code 0\n" in p.stdout, p.stdout
    # steps 0 and 1 are warm-up, the last step's block is not judged: steps 2-4
    assert "====== SUMMARY: 2.86102 Mb(s) leaked in 3 allocation(s) ======" in p.stdout, p.stdout
    assert ("    3 block(s), 3000000 bytes (steps 2-4): allocated by: operator torch._ops.aten.ones.default, "
            f"called from {tmp_path}/train.py({LEAK_LINE}): <module>\n") in p.stdout, p.stdout
    rows = read_dump(dump_files(folder)[0])
    pta = [r for r in rows if r["Event Type"] == "PTA" and r["Event"] == "MALLOC"]
    assert len(pta) > 100 and sum(1 for r in pta if r["Call Stack(Python)"]) > 100, len(pta)
    assert sum(1 for r in pta if r["Call Stack(Python)"].splitlines()[-1:] == [f"{tmp_path}/train.py({LEAK_LINE}): "
                                                                                "<module>"]) == 5
    summary = json.loads((folder / "summary.json").read_text())
    assert summary["steps"] == 5 and summary["command"] == f"{PY} {flag} train.py", summary
    assert summary["top_sites"][0] == {
        "kind": "leak", "device": "cpu", "blocks": 3, "bytes": 3000000,
        "site": f"allocated by: operator torch._ops.aten.ones.default, called from {tmp_path}/train.py({LEAK_LINE}): "
                "<module>"}, summary["top_sites"]
    # what else is live at exit is torch's own first use (~900 bytes), never import torch's heap
    assert 3000000 <= summary["leaks"]["bytes"] < 3000000 + 4096, summary["leaks"]
