"""The leak report's site is "the first frame of the program's own code"
(README, Leak report), checked end to end where the innermost Python frame
is not the user's: each step a user's training loop keeps a tensor made
inside a library function (a module under a site-packages folder) and one
made by the standard library's copy.deepcopy (/usr/lib/python3.X, then
torch's own __deepcopy__). The sites must name the user's lines in
train.py, never helperlib.py, copy.py or torch's files (issue #29 item 10)."""
import pytest

from conftest import process_dirs, run_cli

pytest.importorskip("torch")
PY = "/usr/bin/python3"

LIB = '''import torch


def make(n):
    buf = torch.ones(n)  # the innermost frame: the library's
    return buf
'''

TRAIN = '''import copy
import sys

import torch

sys.path.insert(0, sys.argv[1])
import helperlib  # noqa: E402

model = torch.nn.Linear(4, 4)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
kept = []
template = torch.zeros(300)


def train_step():
    loss = model(torch.ones(2, 4)).sum()
    opt.zero_grad()
    loss.backward()
    kept.append(helperlib.make(1000))  # SITE_LIB
    kept.append(copy.deepcopy(template))  # SITE_COPY
    opt.step()


for _ in range(8):
    train_step()
print("kept", len(kept))
'''


def line_of(text, marker):
    return next(i for i, l in enumerate(text.splitlines(), 1) if l.rstrip().endswith(marker))


def test_leak_sites_name_the_users_line_not_the_librarys(tmp_path):
    lib = tmp_path / "site-packages"
    lib.mkdir()
    (lib / "helperlib.py").write_text(LIB)
    train = tmp_path / "train.py"
    train.write_text(TRAIN)
    p = run_cli(["--device=cpu", "--analysis=leaks", "--call-stack=python", "--output=out", "--",
                 PY, train, lib], tmp_path, env={"PYTHONPATH": ""}, check_rc=0)
    assert "kept 16" in p.stdout
    assert len(process_dirs(tmp_path / "out")) == 1
    lines = p.stdout.splitlines()
    start = lines.index("leaks: msmemscope's details (not in upstream's report):")
    head = "  Leaked blocks on device cpu by site, largest first: "
    i = next(i for i in range(start, len(lines)) if lines[i].startswith(head))
    # steps 0 and 1 are warm-up, step 8's blocks have not outlived a step: steps 2-7 leak
    assert lines[i:i + 3] == [
        head + "12 block(s), 31200 bytes, from 2 site(s):",
        "    6 block(s), 24000 bytes (steps 2-7): allocated by: operator torch._ops.aten.ones.default, "
        f"called from {train}({line_of(TRAIN, '# SITE_LIB')}): train_step",
        "    6 block(s), 7200 bytes (steps 2-7): allocated by: "
        f"called from {train}({line_of(TRAIN, '# SITE_COPY')}): train_step",
    ], "\n".join(lines[start:])
    assert lines[i + 3].startswith("  Note: steps 0 and 1 are warm-up"), lines[i + 3]
