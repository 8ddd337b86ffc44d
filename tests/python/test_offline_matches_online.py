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

import pytest

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


@pytest.fixture(scope="module")
def api_run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("api_run")
    (tmp / "prog.py").write_text(PROGRAM)
    p = subprocess.run(["/usr/bin/python3", "prog.py"], cwd=tmp, capture_output=True, text=True, timeout=600,
                       env={"PYTHONPATH": str(BUILD / "python"), "PATH": "/usr/bin:/bin"})
    assert p.returncode == 0, p.stderr
    (folder,) = process_dirs(tmp / "out")
    return p, folder


def test_analyze_of_a_runs_dump_says_what_the_run_said(tmp_path, api_run):
    p, folder = api_run
    weights, grads, state = (int(v) for v in re.search(r"^TRUTH (\d+) (\d+) (\d+)$", p.stdout, re.M).groups())
    online = decompose_rows(p.stdout)
    # the run's own figures are torch's
    assert online["PTA@weight"][0] == weights and online["PTA@gradient"][0] == grads, online
    assert online["PTA@optimizer_state"][0] == state, online
    assert "1 block(s), 722400 bytes (step 4): allocated by: operator torch._ops.aten.zeros.default" in p.stdout

    shutil.copytree(folder, tmp_path / "copy")
    off = run_cli(["--analyze=leaks,decompose", "--input-path=copy"], tmp_path, check_rc=0)
    offline = decompose_rows(off.stdout)
    # Every owner's live, peak and allocations, as the run said them. A block
    # tagged after it was made (the weights made before start(), tagged at
    # the first step; each gradient, made inside an operator) counts under
    # the owner it ended with, which its row in the dump carries, for its
    # whole life, in the run's table too.
    assert online == offline, (online, offline)
    # the optimizer's state is what torch holds in it, at its peak too: what
    # step() allocates and drops (Adam's denominators) belongs to the operators
    assert online["PTA@optimizer_state"] == (state, state, 6), online
    # The leak report says the same, but for torch's one-time set-up that the
    # run knew by its allocator's caller (c10's hooks registry, made at the
    # first backward(): 2 blocks, 224 bytes): a dump has no such column (its
    # rows are upstream's, and their C stacks were not asked for), so there it
    # is the autograd line's host memory, as every report said it before.
    online_lines, offline_lines = leak_section(p.stdout).splitlines(), leak_section(off.stdout).splitlines()
    setup = [line for line in online_lines if "by the built-in list of torch's one-time set-up" in line]
    assert setup == ["  2 allocation site(s) suppressed on device cpu (2 block(s), 224 bytes): 2 by the built-in "
                     "list of torch's one-time set-up (cpuinfo's tables, libgomp's threads, c10's hooks registries; "
                     'default_suppressions="false" shows them)'], online_lines
    online_lines.remove(setup[0])
    assert len(online_lines) == len(offline_lines), (online_lines, offline_lines)
    differ = [(a, b) for a, b in zip(online_lines, offline_lines) if a != b]

    def plus_setup(line):  # the line with torch's 2 blocks and 224 bytes counted in
        m = re.fullmatch(r"(.*?: |    )(\d+) block\(s\), (\d+) bytes(.*)", line)
        return f"{m.group(1)}{int(m.group(2)) + 2} block(s), {int(m.group(3)) + 224} bytes{m.group(4)}"
    assert [b for _, b in differ] == [plus_setup(a) for a, _ in differ], differ
    assert [a.split("allocated at: ")[-1] for a, _ in differ][1:] == \
        ["/usr/lib/python3/dist-packages/torch/autograd/__init__.py(197): backward"], differ
    assert "Host memory still allocated at stop() on device cpu: " in differ[0][0], differ


def test_inefficient_on_a_dump_without_accesses_says_it_had_nothing_to_judge(tmp_path, api_run):
    # The run's default --events has no access: offline, the inefficient
    # analysis marked nothing and said only that it had analysed the file.
    _, folder = api_run
    shutil.copytree(folder, tmp_path / "copy")
    (dump,) = (tmp_path / "copy").rglob("memscope_dump_*.csv")
    rel = dump.relative_to(tmp_path)
    off = run_cli(["--analyze=inefficient", f"--input={rel}"], tmp_path, check_rc=0)
    assert (f"msmemscope: warning: --analyze: {rel} has no ACCESS rows (it was recorded without access in --events): "
            "the inefficient analysis, which judges accesses, had nothing to judge") in off.stderr.splitlines()
    # and its report agrees: it said "no block marked on device cpu, of N
    # block(s) judged" under that warning, when no block could earn a kind
    judged = sum(1 for line in dump.read_text().splitlines()
                 if ",MALLOC,PTA," in line and "shadow:true" not in line)  # the blocks it would judge
    assert judged > 0
    assert [line for line in off.stdout.splitlines() if line.startswith("inefficient: ")] == \
        [f"inefficient: no block judged on device cpu: none of its {judged} block(s) had an access (no ACCESS rows)"]
    # the Python function says it as a warning about the user's file, at the user's line, in config()'s words
    (tmp_path / "check.py").write_text("import sys, warnings, msmemscope\n"
                                       "warnings.simplefilter('always')\n"
                                       "msmemscope.check_inefficient(sys.argv[1])\n")
    p = subprocess.run(["/usr/bin/python3", "check.py", str(rel)], cwd=tmp_path, capture_output=True, text=True,
                       timeout=300, env={"PYTHONPATH": str(BUILD / "python"), "PATH": "/usr/bin:/bin"})
    assert p.returncode == 0, p.stderr
    assert (f"check.py:3: UserWarning: msmemscope.check_inefficient: {rel} has no ACCESS rows (it was recorded "
            "without access in 'events'): the inefficient analysis, which judges accesses, had nothing to judge"
            ) in p.stderr, p.stderr


STEPS_PROGRAM = """
import ctypes, torch
libc = ctypes.CDLL(None)
libc.malloc.restype = ctypes.c_void_p
libc.free.argtypes = [ctypes.c_void_p]
torch.manual_seed(0)
model = torch.nn.Linear(64, 64)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
x = torch.randn(8, 64)
held = []
for s in range(6):
    opt.zero_grad()
    model(x).sum().backward()
    opt.step()
    held.append(libc.malloc(77771))  # freed two steps later: never a leak
    if len(held) > 2:
        libc.free(held.pop(0))
for p in held:
    libc.free(p)
print("done")
"""


def test_analyze_of_a_steps_dump_turns_the_leak_analysis_off_as_the_run_did(tmp_path):
    # A dump recorded with --steps holds those steps' events, then a shadow
    # FREE for each block still live when collection ended: a block freed
    # in a later step looked live at the end, "Host memory still allocated
    # at exit" listed it. The run itself turns the leak analysis off.
    (tmp_path / "prog.py").write_text(STEPS_PROGRAM)
    p = run_cli(["--device=cpu", "--call-stack=python", "--analysis=leaks", "--steps=3,4", "--output=out", "--",
                 "/usr/bin/python3", "prog.py"], tmp_path, env={"PYTHONPATH": "", "LD_PRELOAD": ""}, check_rc=0)
    off_line = "leaks: the leak analysis is off when --steps selects steps (only some events are collected)"
    assert off_line in p.stderr + p.stdout
    (folder,) = process_dirs(tmp_path / "out")
    (dump,) = (folder / "device_cpu" / "dump").glob("memscope_dump_*.csv")
    # the dump says so itself: a copy anywhere is known for what it holds
    lines = dump.read_text().splitlines(keepends=True)
    (start,) = [i for i, l in enumerate(lines) if ",SYSTEM,START_TRACE," in l]
    # (and, step 1 not being selected, that nothing is collected from its first row: step_filter.h)
    assert lines[start].rstrip("\n").endswith(',"{steps:[3, 4],step_selected:false}",,')
    moved = tmp_path / "elsewhere" / "copy.csv"
    moved.parent.mkdir()
    moved.write_text("".join(lines))
    # a dump of an earlier build (no Attr there): its run's config.json says so
    lines[start] = lines[start].replace('"{steps:[3, 4],step_selected:false}"', "")
    dump.write_text("".join(lines))
    for rel, source in ((dump.relative_to(tmp_path), f"{folder.relative_to(tmp_path)}/config.json"),
                        (moved.relative_to(tmp_path), "its START_TRACE row says so")):
        off = run_cli(["--analyze=leaks", f"--input={rel}"], tmp_path, check_rc=0)
        assert (f"msmemscope: warning: --analyze: {rel} was recorded with --steps=3,4 ({source}): it holds only "
                f"those steps' events, and a block freed in a later step looks live at its end; the leak analysis "
                f"is off for it, as it was in the run") in off.stderr.splitlines()
        assert off_line in off.stderr + off.stdout
        assert "still allocated" not in off.stdout and "ERROR: Detected memory leaks" not in off.stdout, off.stdout
    # the same for a db dump copied out of its run folder
    run_cli(["--device=cpu", "--call-stack=python", "--analysis=leaks", "--steps=3,4", "--data-format=db",
             "--output=outdb", "--", "/usr/bin/python3", "prog.py"], tmp_path,
            env={"PYTHONPATH": "", "LD_PRELOAD": ""}, check_rc=0)
    (db,) = (process_dirs(tmp_path / "outdb")[0] / "device_cpu" / "dump").glob("memscope_dump_*.db")
    moved_db = tmp_path / "elsewhere" / "copy.db"
    moved_db.write_bytes(db.read_bytes())
    off = run_cli(["--analyze=leaks", "--input=elsewhere/copy.db"], tmp_path, check_rc=0)
    assert ("msmemscope: warning: --analyze: elsewhere/copy.db was recorded with --steps=3,4 (its START_TRACE row "
            "says so)") in off.stderr
    assert "still allocated" not in off.stdout and "ERROR: Detected memory leaks" not in off.stdout, off.stdout
    # the same rows from a run of every step: no warning (the analysis runs)
    whole = run_cli(["--device=cpu", "--call-stack=python", "--analysis=decompose", "--output=whole", "--",
                     "/usr/bin/python3", "prog.py"], tmp_path, env={"PYTHONPATH": "", "LD_PRELOAD": ""}, check_rc=0)
    (wfolder,) = process_dirs(tmp_path / "whole")
    (wdump,) = (wfolder / "device_cpu" / "dump").glob("memscope_dump_*.csv")
    won = run_cli(["--analyze=leaks", f"--input={wdump}"], tmp_path, check_rc=0)
    assert "recorded with --steps" not in won.stderr and off_line not in won.stderr + won.stdout
    assert "leaks: msmemscope's details" in won.stdout
