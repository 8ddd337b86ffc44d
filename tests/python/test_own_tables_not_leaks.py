"""msmemscope's own bookkeeping in the profiled process is not the program's
leak.

The package's PyTorch hooks keep tables of the tensors they tagged and the
parameters they know (msmemscope/_torch.py: `_tagged`, `_params`, ...). They
grow with the model and live until the process exits, and the package's own
Python frames are left out of the stacks, so their host blocks named the
program's line that was running: a training run with Adam reported
`1 block(s), 2200 bytes, allocated at: .../torch/optim/optimizer.py(140):
wrapper` (the optimizer's step, whose wrapper tags the state) and
`.../torch/nn/modules/module.py(1287): __setattr__` (a parameter's
registration) as host memory still allocated at exit, growing with the
number of tensors."""
import json
import re
import textwrap

import pytest

from conftest import process_dirs, run_cli
from sinks_common import only

pytest.importorskip("torch")

# 40 Linear layers: 80 parameters, their gradients and Adam's 240 state tensors
# are tagged; the tables reach hundreds of entries (blocks past pymalloc's
# 512 bytes, so the host heap hooks see them).
PROGRAM = textwrap.dedent("""
    import sys
    import torch
    model = torch.nn.Sequential(*[torch.nn.Linear(8, 8) for _ in range(40)])
    opt = torch.optim.Adam(model.parameters())
    for _ in range(3):
        opt.zero_grad()
        model(torch.ones(2, 8)).sum().backward()
        opt.step()
    own = sys.modules["msmemscope._torch"]
    print("tagged", len(own._tagged), "params", len(own._params))
""")


def exit_sites(console):
    """The sites of the report's "Host memory still allocated at exit" list."""
    lines = console.splitlines()
    heads = [i for i, l in enumerate(lines) if l.startswith("  Host memory still allocated at exit on device cpu:")]
    assert len(heads) <= 1, console
    if not heads:
        return []
    sites = []
    for line in lines[heads[0] + 1:]:
        m = re.match(r"    \d+ block\(s\), \d+ bytes, allocated at: (.*)", line)
        if not m:
            break
        sites.append(m.group(1))
    return sites


def test_the_packages_tables_are_not_host_memory_still_allocated_at_exit(tmp_path):
    (tmp_path / "prog.py").write_text(PROGRAM)
    p = run_cli(["--device=cpu", "--analysis=leaks", "--call-stack=python", f"--output={tmp_path}/out",
                 "--", "/usr/bin/python3", tmp_path / "prog.py"], tmp_path, check_rc=0)
    m = re.search(r"tagged (\d+) params (\d+)", p.stdout)
    assert m and int(m.group(1)) >= 300 and int(m.group(2)) == 80, p.stdout  # the tables did grow
    sites = exit_sites(p.stdout)
    assert not [s for s in sites if "torch/optim/" in s or "torch/nn/modules/" in s], sites
    # and nothing else: what was left, torch's own one-time set-up (cpuinfo, the hooks' registry, a few
    # hundred bytes), is known by its allocator's caller (test_leaks_torch_setup.py)
    assert sites == [], p.stdout
    leaks = json.loads((only(process_dirs(tmp_path / "out")) / "summary.json").read_text())["leaks"]
    assert leaks["bytes"] == 0, (leaks, sites)
