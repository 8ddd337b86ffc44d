"""`--analyze` of a run's own dump says what the run said (issue #29's offline
modes, found wrong by a user trial): the dump ends with a FREE marked
shadow:true for every block still live when collection ended (COMPAT §8,
so that upstream's dump checker pairs every allocation), and the offline
analyzers took those for real frees: decompose's Live was 0 for every
owner, and the leak analysis lost its "still allocated" section. The
figures are checked against torch's own counts of the same program.
"""
import re
import shutil
import subprocess

from conftest import BUILD, process_dirs, run_cli

PROGRAM = """
import torch, msmemscope
msmemscope.config(device="cpu", call_stack="python", analysis="leaks,decompose", output="out")
torch.manual_seed(0)
model = torch.nn.Linear(256, 256)
opt = torch.optim.Adam(model.parameters(), lr=1e-3)
keep = []
msmemscope.start()
x = torch.randn(8, 256)
for i in range(6):
    opt.zero_grad()
    model(x).sum().backward()
    opt.step()
    if i == 3:
        keep.append(torch.zeros(300, 301, dtype=torch.float64))  # the leak: 722400 bytes
    msmemscope.step()
def nb(ts): return sum(t.numel() * t.element_size() for t in ts)
print("TRUTH", nb(model.parameters()), nb(p.grad for p in model.parameters()),
      nb(v for s in opt.state.values() for v in s.values() if torch.is_tensor(v)), flush=True)
msmemscope.stop()
"""


def decompose_rows(text):
    """{owner: (live, peak, allocations)} of the decompose table."""
    section = text.split("decompose: memory by owner on device cpu:\n", 1)[1]
    rows = {}
    for line in section.splitlines()[1:]:
        m = re.fullmatch(r"  (\S+) +(\d+) +(\d+) +(\d+)", line)
        if not m:
            break
        rows[m.group(1)] = tuple(int(g) for g in m.groups()[1:])
    return rows


def leak_section(text):
    """The leak report, upstream's lines and ours, up to the decompose table."""
    start = text.index("====== ERROR: Detected memory leaks on device cpu ======")
    return text[start:text.index("decompose: memory by owner")]


def test_analyze_of_a_runs_dump_says_what_the_run_said(tmp_path):
    (tmp_path / "prog.py").write_text(PROGRAM)
    env = {"PYTHONPATH": str(BUILD / "python")}
    p = subprocess.run(["/usr/bin/python3", "prog.py"], cwd=tmp_path, capture_output=True, text=True, timeout=600,
                       env={**env, "PATH": "/usr/bin:/bin"})
    assert p.returncode == 0, p.stderr
    weights, grads, state = (int(v) for v in re.search(r"^TRUTH (\d+) (\d+) (\d+)$", p.stdout, re.M).groups())
    online = decompose_rows(p.stdout)
    # the run's own figures are torch's
    assert online["PTA@weight"][0] == weights and online["PTA@gradient"][0] == grads, online
    assert online["PTA@optimizer_state"][0] == state, online
    assert "1 block(s), 722400 bytes (step 4): allocated by: operator torch._ops.aten.zeros.default" in p.stdout

    (folder,) = process_dirs(tmp_path / "out")
    shutil.copytree(folder, tmp_path / "copy")
    off = run_cli(["--analyze=leaks,decompose", "--input-path=copy"], tmp_path, check_rc=0)
    offline = decompose_rows(off.stdout)
    for owner, (live, peak, n) in offline.items():
        assert online[owner] == (live, peak, n), (owner, online, offline)
    # an owner the run's table has only for a block tagged after it was
    # made (0 allocations) is the only difference
    assert {o for o in online if online[o][2]} == set(offline), (online, offline)
    assert leak_section(off.stdout) == leak_section(p.stdout), (leak_section(p.stdout), leak_section(off.stdout))
    assert "Host memory still allocated at stop() on device cpu: " in off.stdout
