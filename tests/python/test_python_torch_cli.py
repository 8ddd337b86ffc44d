"""A plain PyTorch script under the CLI (issue #14 point 4, #20 item 2): no
`import msmemscope`, yet tensor storage (PTA), aten operators, steps (from
the optimizer), owners and Python stacks are recorded as with the API;
`import msmemscope` works without PYTHONPATH; the target's own
sitecustomize still runs; a script that uses the API under the CLI (also
through a shell script that sets its own LD_PRELOAD, as upstream's
test_leaks.sh does) joins the CLI's session.
"""
import csv
import json
import os
import re

import pytest

from conftest import BUILD, DUMP_HEADER, SOURCE, dump_files, parse_attr, process_dirs, read_dump, run_cli

pytest.importorskip("torch")
PY = "/usr/bin/python3"
SCRIPT = SOURCE / "tests" / "programs" / "python" / "torch_attrib.py"


def rows_without_host(path):
    """The dump's rows but the host heap ones (`import torch` alone makes
    about two million of them; parsing every Attr would take minutes)."""
    out = []
    with open(path, newline="") as f:
        r = csv.reader(f)
        assert next(r) == DUMP_HEADER
        for rec in r:
            if rec[2] == "HOST":
                continue
            d = dict(zip(DUMP_HEADER, rec))
            d["attr"] = parse_attr(d["Attr"])
            out.append(d)
    return out


def clean_env(**extra):
    e = {"PYTHONPATH": "", "LD_PRELOAD": ""}
    e.update(extra)
    return e


def test_plain_script_is_tracked_like_the_api(tmp_path):
    # (no --call-stack here: with Python stacks every malloc of `import torch`
    # carries one, gigabytes of rows; the API tests check the stacks)
    p = run_cli(["--device=cpu", "--events=alloc,free,launch", "--analysis=leaks,decompose",
                 "--output=out", "--", PY, SCRIPT, "out", "plain", "leak", "0"], tmp_path, env=clean_env(),
                check_rc=0)
    assert "trained 8" in p.stdout
    (d,) = process_dirs(tmp_path / "out")
    rows = rows_without_host(dump_files(d)[0])
    steps = [r["Name"] for r in rows if r["Event"] == "SYSTEM" and r["Event Type"] == "STEP"]
    assert steps == [str(i) for i in range(1, 9)]  # one per optimizer step
    ops = {r["Name"] for r in rows if r["Event"] == "OP_LAUNCH" and r["Event Type"] == "ATEN_START"}
    assert {"torch._ops.aten.addmm.default", "torch._ops.aten.mse_loss.default",
            "torch._ops.aten.ones.default"} <= ops, ops
    pta = [r for r in rows if r["Event"] == "MALLOC" and r["Event Type"] == "PTA"]
    assert len(pta) > 100
    # (the rows carry the owner decompose ended with: the optimizer's state
    # is tagged once step() made it)
    owners = {r["attr"].get("owner") for r in pta}
    assert {"PTA@ops@aten", "PTA@optimizer_state"} <= owners, owners
    # the leak analysis works from the optimizer's steps and names the operator
    direct = re.findall(r"^Direct Pytorch Caching memory pool leak of 0\.125000 Mb\(s\) at (0x[0-9a-f]+) ", p.stdout, re.M)
    assert len(direct) == 6, p.stdout
    # our details group them by site (issue #27 item 3): all six from one operator
    sites = re.findall(r"^    (\d+) block\(s\), (\d+) bytes \(steps? [\d-]+\): allocated by: operator ([^,\s]+)",
                       p.stdout, re.M)
    assert sites == [("6", str(6 * 131072), "torch._ops.aten.ones.default")], p.stdout


def test_import_works_and_own_sitecustomize_is_chained(tmp_path):
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text("import os\nos.environ['OWN_SITECUSTOMIZE'] = 'ran'\n")
    prog = tmp_path / "prog.py"
    prog.write_text("import os, sys, msmemscope, torch\n"
                    "print('site', os.environ.get('OWN_SITECUSTOMIZE'))\n"
                    "print('pkg', os.path.dirname(msmemscope.__file__))\n"
                    "t = torch.ones(1000)\n")
    p = run_cli(["--device=cpu", "--analysis=", "--output=out", "--", PY, prog], tmp_path,
                env=clean_env(PYTHONPATH=str(site)), check_rc=0)
    assert "site ran" in p.stdout, p.stdout + p.stderr
    assert f"pkg {BUILD / 'python' / 'msmemscope'}" in p.stdout, p.stdout
    (d,) = process_dirs(tmp_path / "out")
    rows = rows_without_host(dump_files(d)[0])
    assert any(r["Event"] == "MALLOC" and r["Event Type"] == "PTA" and r["attr"].get("size") == "4000" for r in rows)


def test_non_python_target_gets_no_python_path(tmp_path):
    p = run_cli(["--device=cpu", "--analysis=", "--output=out", "--", "/usr/bin/env"], tmp_path, env=clean_env(),
                check_rc=0)
    env = dict(l.split("=", 1) for l in p.stdout.splitlines() if "=" in l)
    assert not env.get("PYTHONPATH"), env.get("PYTHONPATH")
    assert "libmsmemscope_agent.so" in env["LD_PRELOAD"]


API_SCRIPT = """
import msmemscope, torch
msmemscope.config(events='alloc,free,launch', data_format='csv', output='./api_out')
msmemscope.start()
kept = []
for i in range(4):
    kept.append(torch.ones(1024))
    msmemscope.step()
msmemscope.stop()
print('api done')
"""


@pytest.mark.parametrize("own_preload", [False, True])
def test_api_script_under_cli_joins_its_session(tmp_path, own_preload):
    (tmp_path / "test_leaks.py").write_text(API_SCRIPT)
    libm = "/lib/x86_64-linux-gnu/libm.so.6"
    sh = "#!/bin/bash\n"
    if own_preload:  # as upstream's test_leaks.sh: replaces the CLI's LD_PRELOAD
        sh += f"export LD_PRELOAD={libm}\n"
    sh += f"export PYTHONPATH={BUILD / 'python'}\n{PY} test_leaks.py\n"
    (tmp_path / "test_leaks.sh").write_text(sh)
    p = run_cli(["--device=cpu", "--analysis=", "--collect-mode=deferred", "--output=out", "--", "bash",
                 "test_leaks.sh"], tmp_path,
                env=clean_env(), check_rc=0)
    assert "api done" in p.stdout, p.stdout + p.stderr
    assert "Operation already in progress" not in p.stderr
    assert not (tmp_path / "api_out").exists()  # one session: the CLI's output
    found = []
    for d in process_dirs(tmp_path / "out"):
        rows = read_dump(dump_files(d)[0])
        if [r["Name"] for r in rows if r["Event"] == "SYSTEM" and r["Event Type"] == "STEP"] == ["1", "2", "3", "4"]:
            found.append(rows)
    assert len(found) == 1, p.stdout
    assert any(r["Event"] == "MALLOC" and r["Event Type"] == "PTA" for r in found[0])
    assert any(r["Event"] == "MALLOC" and r["Event Type"] == "HOST" for r in found[0])


def test_target_ld_preload_is_merged(tmp_path):
    libm = "/lib/x86_64-linux-gnu/libm.so.6"
    p = run_cli(["--device=cpu", "--analysis=", "--output=out", "--", "/usr/bin/env"], tmp_path,
                env=clean_env(LD_PRELOAD=libm), check_rc=0)
    env = dict(l.split("=", 1) for l in p.stdout.splitlines() if "=" in l)
    parts = env["LD_PRELOAD"].split(":")
    assert libm in parts and any(x.endswith("libmsmemscope_agent.so") for x in parts), parts


STEPPED = """
import sys
import torch, msmemscope
first = int(sys.argv[1])  # the iteration of the script's first msmemscope.step()
model = torch.nn.Linear(8, 8)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for i in range(6):
    opt.zero_grad(); model(torch.randn(2, 8)).sum().backward(); opt.step()
    if i >= first:
        print("step", i, "->", msmemscope.step(), flush=True)
"""


@pytest.mark.parametrize("first", [0, 2])
def test_a_script_calling_step_after_its_optimizer_has_one_step_per_iteration(tmp_path, first):
    # Under the CLI the optimizer marks the steps of a script that does not
    # use the API; its first msmemscope.step() (after opt.step(), upstream's
    # pattern) marked a second, empty step: 7 steps for 6 iterations, the
    # first call returned 2 and every leak's step was one past the script's.
    (tmp_path / "prog.py").write_text(STEPPED)
    p = run_cli(["--device=cpu", "--analysis=", "--output=out", "--", PY, "prog.py", str(first)], tmp_path,
                env=clean_env(), check_rc=0)
    got = [(int(i), int(n)) for i, n in re.findall(r"^step (\d+) -> (\d+)$", p.stdout, re.M)]
    assert got == [(i, i + 1) for i in range(first, 6)], p.stdout
    (d,) = process_dirs(tmp_path / "out")
    rows = rows_without_host(dump_files(d)[0])
    assert [r["Name"] for r in rows if r["Event"] == "SYSTEM" and r["Event Type"] == "STEP"] == \
        [str(i) for i in range(1, 7)]
    assert json.loads((d / "summary.json").read_text())["steps"] == 6
