"""The console's leak report is readable at any size (issue #27 item 3).

A user's own PyTorch training loop (tests/programs/python/leak_graphs.py)
keeps every step's loss with its graph and every batch: 21 framework blocks
leak per step, 1,218 in 60 steps, from six sites. On the console:
upstream's lines stay, capped (the first 20 blocks, then "... N more in
FILE" with every block in leaks_{ts}.txt in the run folder), the step
warnings are one line per step, and our details group the blocks by site
(operator + first user frame), largest first, with counts and bytes. The
whole leak section fits on one screen.
"""
import json
import re
import shutil
import sqlite3
import stat

import pytest

from conftest import SOURCE, process_dirs, run_cli

pytest.importorskip("torch")
PY = "/usr/bin/python3"
SCRIPT = SOURCE / "tests" / "programs" / "python" / "leak_graphs.py"
STEPS = 60
# steps 0 and 1 are warm-up and the last one has not outlived a step: 2..59
LEAK_STEPS = STEPS - 2
# what one step keeps (float32; batch 32, Linear 64-128-128-8), by the line of
# leak_graphs.py that allocates it: {site: (blocks, bytes each)}
LINE = {"x": 22, "relu": 25, "loss": 26, "kept": 31}
PER_STEP = {
    ("torch._ops.aten.relu.default", LINE["relu"]): (2, 32 * 128 * 4),  # the two ReLUs' outputs, saved by the graph
    ("torch._ops.aten.randn.default", LINE["x"]): (1, 32 * 64 * 4),     # the batch, appended to `batches`
    ("torch._ops.aten.sub.Tensor", LINE["loss"]): (1, 32 * 8 * 4),      # out - y, saved by pow's backward
    ("torch._ops.aten.add.Tensor", LINE["kept"]): (8, 4),               # the 8 kept sums
    (None, LINE["kept"]): (8, 8),                                       # the scalar 2 that mul saves (no operator)
    ("torch._ops.aten.mean.default", LINE["loss"]): (1, 4),             # the loss itself
}


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    cwd = tmp_path_factory.mktemp("leaks_console")
    # The program lives in a folder named msmemscope (as a checkout of ours
    # does): its frames are still the program's own.
    script = cwd / "msmemscope" / "project" / SCRIPT.name
    script.parent.mkdir(parents=True)
    shutil.copy(SCRIPT, script)
    p = run_cli(["--device=cpu", "--analysis=leaks", "--call-stack=python", "--format=db", "--output=out", "--",
                 PY, script, str(STEPS)], cwd, env={"PYTHONPATH": ""}, check_rc=0)
    assert f"kept {STEPS * 10} tensors" in p.stdout
    (d,) = process_dirs(cwd / "out")
    return {"p": p, "cwd": cwd, "dir": d, "lines": p.stdout.splitlines(), "script": script}


def leak_section(lines):
    """From upstream's ERROR line to the end of our details (the host's list
    of files follows)."""
    start = lines.index("====== ERROR: Detected memory leaks on device cpu ======")
    end = next(i for i in range(start, len(lines)) if lines[i].startswith("  files (in "))
    return lines[start:end]


def test_upstream_lines_capped_with_the_full_list_in_the_run_folder(run):
    lines, d = run["lines"], run["dir"]
    sec = leak_section(lines)
    total = sum(n for n, _ in PER_STEP.values()) * LEAK_STEPS
    assert total == 1218
    # upstream's lines, the first 20 of them, at column 0
    direct = [l for l in sec if l.startswith("Direct ")]
    assert len(direct) == 20, sec
    for l in direct:
        assert re.fullmatch(r"Direct Pytorch Caching memory pool leak of \d+\.\d{6} Mb\(s\) at 0x[0-9a-f]+ "
                            r"in kernel_\d+ at step \d+\.", l), l
    ts = d.name.split("_")[2]
    name = f"leaks_{ts}.txt"
    more = sec.index(direct[-1]) + 1
    assert sec[more] == f"... {total - 20} more in out/{d.name}/{name}"
    total_bytes = sum(n * size for n, size in PER_STEP.values()) * LEAK_STEPS
    summary = f"====== SUMMARY: {total_bytes / 2 ** 20:.6g} Mb(s) leaked in {total} allocation(s) ======"
    assert sec[more + 1] == summary
    assert sec[more + 2] == "======= Pytorch Caching memory pool Gap Analysis of Device cpu ======="
    # the file: ours alone, private, in the run folder, with every block
    f = d / name
    st = f.lstat()
    assert stat.S_ISREG(st.st_mode) and stat.S_IMODE(st.st_mode) == 0o600
    assert not [x for x in d.iterdir() if x.name.startswith(".leaks_")]  # no temporary left
    text = f.read_text().splitlines()
    assert text[0] == "====== ERROR: Detected memory leaks on device cpu ======"
    all_direct = [l for l in text if l.startswith("Direct ")]
    assert len(all_direct) == total and all_direct[:20] == direct
    assert len(set(all_direct)) == total
    # each block's line is followed by where it was allocated
    for i, l in enumerate(text):
        if l.startswith("Direct "):
            assert text[i + 1].startswith("  allocated by: "), text[i:i + 2]
    assert summary in text
    # the leak analysis's findings (db) hold the same blocks
    db = next((d / "device_cpu" / "dump").glob("memscope_dump_*.db"))
    con = sqlite3.connect(str(db))
    step = [json.loads(c) for (c,) in con.execute("SELECT cols FROM msms_findings WHERE \"table\"='leaks'")]
    step = [c for c in step if c["kind"] == "step"]
    assert len(step) == total
    assert sum(int(c["size"]) for c in step) == total_bytes
    ptrs = {re.search(r" at (0x[0-9a-f]+) in kernel_\d+ at step (\d+)\.", l).groups() for l in all_direct}
    assert ptrs == {(c["ptr"], str(c["step"])) for c in step}


def test_details_are_grouped_by_site_largest_first(run):
    sec = leak_section(run["lines"])
    total = sum(n for n, _ in PER_STEP.values()) * LEAK_STEPS
    total_bytes = sum(n * size for n, size in PER_STEP.values()) * LEAK_STEPS
    h = sec.index("leaks: msmemscope's details (not in upstream's report):")
    assert sec[h + 1] == (f"  Leaked blocks on device cpu by site, largest first: {total} block(s), {total_bytes} "
                          f"bytes, from {len(PER_STEP)} site(s):")
    got = []
    for l in sec[h + 2: h + 2 + len(PER_STEP)]:
        m = re.fullmatch(r"    (\d+) block\(s\), (\d+) bytes \(steps 2-59\): allocated by: (?:operator (\S+), )?"
                         r"called from (\S+)\((\d+)\): train_step", l)
        assert m, l
        assert m[4] == str(run["script"])
        got.append(((m[3], int(m[5])), int(m[1]), int(m[2])))
    want = sorted(((k, n * LEAK_STEPS, n * size * LEAK_STEPS) for k, (n, size) in PER_STEP.items()),
                  key=lambda s: -s[2])
    assert got == want
    # the sites' blocks and bytes add up to the total leaked
    assert sum(g[1] for g in got) == total and sum(g[2] for g in got) == total_bytes
    # no per-block detail lines on the console
    assert not [l for l in sec if re.match(r"\s+0x[0-9a-f]+ \(device cpu", l)]


def test_the_leak_section_fits_on_one_screen(run):
    sec = leak_section(run["lines"])
    assert len(sec) < 60, "\n".join(sec)
    assert max(len(l) for l in sec[:25]) < 120  # upstream's lines


def test_step_warnings_are_one_line_per_step(run):
    err = run["p"].stderr.splitlines()
    warned = [l for l in err if "have lasted for" in l or "has lasted for" in l]
    # steps 3..60 end with the blocks of steps 2..59 newly outliving theirs
    steps = [int(re.search(r"\]\[step (\d+)\]: ", l)[1]) for l in warned]
    assert steps == list(range(3, STEPS + 1)), warned[:3]
    per_step = sum(n for n, _ in PER_STEP.values())
    per_step_bytes = sum(n * size for n, size in PER_STEP.values())
    for l in warned:
        m = re.search(r"\]: (\d+) ptrs \((0x[0-9a-f]+), (0x[0-9a-f]+), (0x[0-9a-f]+) and (\d+) more; (\d+) bytes\) "
                      r"have lasted for 1 steps\. Please check if there is leaks in PTA\.", l)
        assert m, l
        assert int(m[1]) == per_step and int(m[5]) == per_step - 3 and int(m[6]) == per_step_bytes
        assert l.startswith("[msmemscope] warning: leaks: [device cpu][step ")
    # nothing else from the leak check per block
    assert not [l for l in err if "ptr: 0x" in l]


def _dump_with_step_leaks(path, steps=11, per_step=5):
    """An upstream-format dump whose every PTA block is kept: steps 2..10 leak."""
    header = ("ID,Event,Event Type,Name,Timestamp(ns),Process Id,Thread Id,Device Id,Ptr,Attr,"
              "Call Stack(Python),Call Stack(C)")
    rows, i, ts, used, ptr = [header], 0, 1000, 0, 0x100000
    for step in range(1, steps + 1):
        for _ in range(per_step):
            i += 1; ts += 10; used += 1024; ptr += 0x1000
            rows.append(f'{i},MALLOC,PTA,N/A,{ts},100,200,0,0x{ptr:016x},'
                        f'"{{allocation_id:{i},addr:0x{ptr:x},size:1024,used:{used}}}",,')
        i += 1; ts += 10
        rows.append(f"{i},SYSTEM,STEP,{step},{ts},100,200,N/A,N/A,{{}},,")
    path.write_text("\n".join(rows) + "\n")
    return path


def test_offline_analysis_writes_the_full_list_into_the_output_folder(tmp_path):
    f = _dump_with_step_leaks(tmp_path / "memscope_dump_1.csv")
    (tmp_path / "res").mkdir()
    p = run_cli(["--analyze=leaks", f"--input={f}", "--output=res"], tmp_path, check_rc=0)
    lines = p.stdout.splitlines()
    [more] = [l for l in lines if l.startswith("... ")]
    m = re.fullmatch(r"\.\.\. 25 more in res/(leaks_\d{14}\.txt)", more)
    assert m, more
    assert lines[lines.index(more) + 1] == "====== SUMMARY: 0.0439453 Mb(s) leaked in 45 allocation(s) ======"
    text = (tmp_path / "res" / m[1]).read_text().splitlines()
    assert len([l for l in text if l.startswith("Direct ")]) == 45
    assert [x.name for x in (tmp_path / "res").iterdir()] == [m[1]]
    # without --output, the default folder (as a run's) is made for it
    p = run_cli(["--analyze=leaks", f"--input={f}"], tmp_path, check_rc=0)
    [more] = [l for l in p.stdout.splitlines() if l.startswith("... ")]
    m = re.fullmatch(r"\.\.\. 25 more in memscopeDumpResults/(leaks_\d{14}\.txt)", more)
    assert m, more
    assert "====== SUMMARY: 0.0439453 Mb(s) leaked in 45 allocation(s) ======" in p.stdout
    assert [x.name for x in (tmp_path / "memscopeDumpResults").iterdir()] == [m[1]]
    # a folder that cannot be made: the console says so, and the output is incomplete (70)
    (tmp_path / "file").write_text("")
    p = run_cli(["--analyze=leaks", f"--input={f}", "--output=file/res"], tmp_path, check_rc=70)
    assert p.stderr.splitlines()[-1].startswith("msmemscope: error: --output: file/res: "), p.stderr


WARMUP = '''import torch
model = torch.nn.Linear(8, 8)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
kept = []
for step in range(6):
    loss = model(torch.ones(4, 8)).sum()
    opt.zero_grad(set_to_none=True)
    loss.backward()
    if step == 0:
        kept.append(torch.ones(31337))  # kept for the whole run: not judged (warm-up)
    opt.step()
'''


def test_the_warm_up_note_counts_what_outlived_the_steps(tmp_path):
    # The note counted the warm-up's blocks still live at exit, after
    # CPython's teardown had freed every global: "0 block(s) (0 bytes)" in
    # every Python program, telling the user nothing was left unjudged. It
    # now counts them when the last step ended: the weights (256 + 32
    # bytes) and the tensor kept in step 0 (31337 floats).
    (tmp_path / "wu.py").write_text(WARMUP)
    p = run_cli(["--device=cpu", "--analysis=leaks", "--call-stack=python", f"--output={tmp_path}/out", "--", PY,
                 "wu.py"], tmp_path, check_rc=0)
    assert ("  Note: steps 0 and 1 are warm-up and not checked for leaks; on device cpu, 3 block(s) "
            f"({256 + 32 + 31337 * 4} bytes) allocated then were still live when step 6 (the last) ended and were "
            "not judged.") in p.stdout.splitlines(), p.stdout


LAST = '''import torch
torch.set_num_threads(1)
model = torch.nn.Linear(8, 4)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
x = torch.ones(4, 8)
kept = []
for step in range(6):
    opt.zero_grad()
    model(x).sum().backward()
    opt.step()
    kept.append(torch.ones(31337))  # kept from every step on: a leak repeated every step
print("kept", len(kept))
'''


def test_the_last_steps_blocks_are_said_not_judged(tmp_path):
    # Each optimizer step ends a step; the tensor kept after it is the next
    # step's: steps 2..7 keep one each. A block is judged when the step after
    # its own ends, so the report has steps 2-5 (4 of the 6 kept), and said
    # nothing of the two others: "leaked in 4 allocation(s)" was all a user
    # learned of a script that keeps one tensor a step. The one of step 6
    # (the last to end) was still live when it ended, and is said now.
    (tmp_path / "last.py").write_text(LAST)
    p = run_cli(["--device=cpu", "--analysis=leaks", "--call-stack=python", f"--output={tmp_path}/out", "--", PY,
                 "last.py"], tmp_path, env={"PYTHONPATH": ""}, check_rc=0)
    lines = p.stdout.splitlines()
    assert "kept 6" in lines
    assert f"====== SUMMARY: {4 * 31337 * 4 / 1048576:g} Mb(s) leaked in 4 allocation(s) ======" in lines, p.stdout
    assert ("    4 block(s), 501392 bytes (steps 2-5): allocated by: operator torch._ops.aten.ones.default, "
            f"called from {tmp_path}/last.py(11): <module>") in lines, p.stdout
    assert ("  Note: a block is judged once the step after its own has ended; on device cpu, 1 block(s) "
            f"({31337 * 4} bytes) allocated in step 6 (the last) were still live when it ended and were not "
            "judged, nor was what was allocated after it.") in lines, p.stdout
