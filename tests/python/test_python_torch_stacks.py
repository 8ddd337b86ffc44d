"""PyTorch attribution (issue #14), Python API on CPU: every tensor allocation
names its Python line (forward, a custom autograd Function's backward,
backward(), the optimizer, DataLoader worker processes), each byte is counted
once (HOST vs PTA), and leak reports name the operator and the program's line.

One run of tests/programs/python/torch_attrib.py (SGD + momentum, a custom
Function, a DataLoader with 2 workers, one 128 KiB tensor kept per step)
serves the API tests; C-stack interning uses cap_threads.
"""
import json
import os
import re
import sqlite3
import subprocess

import pytest

from conftest import BUILD, SOURCE, TEST_BIN, dump_files, process_dirs, read_dump, run_cli

torch = pytest.importorskip("torch")
PY = "/usr/bin/python3"
SCRIPT = SOURCE / "tests" / "programs" / "python" / "torch_attrib.py"


def line_of(marker):
    for i, line in enumerate(SCRIPT.read_text().splitlines(), 1):
        if marker in line:
            return i
    raise AssertionError(marker)


def script_frame(marker, func):
    return f"{SCRIPT}({line_of(marker)}): {func}"


@pytest.fixture(scope="module")
def api_run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("api")
    e = dict(os.environ)
    for k in ("LD_PRELOAD", "MSMEMSCOPE_SESSION", "MSMEMSCOPE_AGENT_OPTS"):
        e.pop(k, None)
    e["PYTHONPATH"] = str(BUILD / "python")
    e["ATTRIB_SINKS"] = "db,html"
    e["ATTRIB_EVENTS"] = "alloc,free,launch,traceback"  # stacks and the Python trace together
    p = subprocess.run([PY, str(SCRIPT), "out", "api", "leak", "2"], cwd=str(tmp), env=e, capture_output=True,
                       text=True, timeout=300)
    assert p.returncode == 0, f"stdout:\n{p.stdout}\nstderr:\n{p.stderr}"
    dirs = process_dirs(tmp / "out")
    return {"dirs": dirs, "stdout": p.stdout, "stderr": p.stderr, "tmp": tmp}


def rows_of(d):
    return read_dump(dump_files(d)[0])


def pta_mallocs(rows):
    return [r for r in rows if r["Event"] == "MALLOC" and r["Event Type"] == "PTA"]


def main_dir(run):
    # The training process is the one whose PTA rows include the kept tensors.
    for d in run["dirs"]:
        rows = rows_of(d)
        if any("keep_one" in r["Call Stack(Python)"] for r in pta_mallocs(rows)):
            return d, rows
    raise AssertionError(f"no training process among {run['dirs']}")


def test_tensor_allocations_carry_the_python_line(api_run):
    d, rows = main_dir(api_run)
    pta = pta_mallocs(rows)
    with_stack = [r for r in pta if r["Call Stack(Python)"].strip()]
    share = len(with_stack) / len(pta)
    print(f"main process: {len(with_stack)} of {len(pta)} PTA allocations carry a Python stack ({share:.1%})")
    assert len(pta) > 100 and share >= 0.95, (len(pta), len(with_stack))
    firsts = {r["Call Stack(Python)"].split("\n")[0] for r in with_stack}
    stacks = [r["Call Stack(Python)"] for r in with_stack]
    # forward of the custom Function, and its backward run by autograd
    assert script_frame("return x * x", "forward") in firsts, firsts
    assert script_frame("# CUSTOM_BACKWARD_LINE", "backward") in firsts, firsts
    # autograd's own operators (addmm's gradients ...) name the backward() line
    custom = script_frame("# CUSTOM_BACKWARD_LINE", "backward")
    assert any(script_frame("# BACKWARD_LINE", "main") in s and custom not in s for s in stacks)
    # the optimizer's momentum buffers name the opt.step() line
    opt = [r for r in pta if r["attr"].get("owner") == "PTA@optimizer_state"]
    assert opt and all(script_frame("# STEP_LINE", "main") in r["Call Stack(Python)"] for r in opt)
    # module-level code of the script that was running when start() was called
    assert any(script_frame("# KEEP_LINE", "keep_one") == f for f in firsts)
    # the Python trace of the same run has the custom backward (run by autograd) too
    (trace,) = dump_files(d, kind="python_trace")
    funcs = [l.rsplit(",", 4)[0] for l in trace.read_text().splitlines()[1:]]
    assert sum(1 for f in funcs if f.startswith(f"{SCRIPT}(") and f.endswith("): backward")) == 8, funcs[:20]


def test_dataloader_workers_are_tracked_with_stacks(api_run):
    d_main, _ = main_dir(api_run)
    workers = [d for d in api_run["dirs"] if d != d_main]
    assert len(workers) == 2, api_run["dirs"]
    for w in workers:
        pta = pta_mallocs(rows_of(w))
        assert pta, w
        with_stack = [r for r in pta if r["Call Stack(Python)"].strip()]
        assert len(with_stack) / len(pta) >= 0.95, (w, len(pta), len(with_stack))
        assert any("__getitem__" in r["Call Stack(Python)"].split("\n")[0] for r in with_stack)


def leak_block(stdout, pid):
    """The console report of one process (from its summary line on)."""
    start = stdout.index(f"msmemscope: pid {pid} ")
    nxt = stdout.find("msmemscope: pid ", start + 1)
    return stdout[start: nxt if nxt >= 0 else len(stdout)]


def test_leak_report_names_operator_and_user_line(api_run):
    d, _ = main_dir(api_run)
    pid = d.name.split("_")[1]
    text = leak_block(api_run["stdout"], pid)
    lines = [l.strip() for l in text.splitlines()]
    leak_idx = [i for i, l in enumerate(lines) if l.startswith("Direct Pytorch Caching memory pool leak of ")]
    assert len(leak_idx) == 6, text  # steps 2..7; step 0 is warm-up, step 8 the last
    for i in leak_idx:
        # upstream's line
        m = re.fullmatch(r"Direct Pytorch Caching memory pool leak of 0\.125000 Mb\(s\) at (0x[0-9a-f]+) in "
                         r"kernel_\d+ at step (\d+)\.", lines[i])
        assert m, lines[i]
    # then, in our own section after upstream's report, where they were
    # allocated, grouped by site (issue #27 item 3): the six blocks, one site
    assert (f"6 block(s), {6 * 131072} bytes (steps 2-7): allocated by: operator torch._ops.aten.ones.default, "
            f"called from {script_frame('# KEEP_LINE', 'keep_one')}") in lines[leak_idx[-1]:], text
    note = [l for l in lines if l.startswith("Note: steps 0 and 1 are warm-up")]
    assert len(note) == 1 and re.search(r"on device cpu, \d+ block\(s\) \(\d+ bytes\) allocated then were still live when step \d+ \(the last\) ended",
                                        note[0])
    hidden = int(re.search(r"on device cpu, (\d+) block", note[0]).group(1))
    assert hidden >= 1  # the tensor kept in step 0 at least


def test_db_and_html_findings_name_operator_and_line(api_run):
    d, _ = main_dir(api_run)
    db = dump_files(d, kind="memscope_dump")[0].with_suffix(".db")
    con = sqlite3.connect(str(db))
    leaks = [json.loads(c) for (c,) in con.execute("SELECT cols FROM msms_findings WHERE \"table\"='leaks'")]
    step = [f for f in leaks if f["kind"] == "step"]
    assert len(step) == 6
    for f in step:
        assert f["operator"] == "torch._ops.aten.ones.default"
        assert f["python_site"] == script_frame("# KEEP_LINE", "keep_one")
    owners = [json.loads(c) for (c,) in con.execute("SELECT cols FROM msms_findings WHERE \"table\"='owners'")]
    con.close()
    # an owner never has live bytes without allocations (relabels move both)
    for o in owners:
        assert int(o["live_bytes"]) <= 0 or int(o["allocations"]) > 0, o
    html = next(d.glob("report_*.html")).read_text()
    assert "torch._ops.aten.ones.default" in html and "keep_one" in html


def human_bytes(text):
    n, unit = text.split()
    return float(n) * {"B": 1, "KiB": 1024, "MiB": 1024 ** 2, "GiB": 1024 ** 3}[unit]


def test_each_byte_once(api_run):
    d, rows = main_dir(api_run)
    pid = d.name.split("_")[1]
    text = leak_block(api_run["stdout"], pid)
    host_final = human_bytes(re.search(r"cpu/HOST: peak [^,]+, final ([\d.]+ \w+)", text).group(1))
    pta_final = human_bytes(re.search(r"cpu/PTA: peak [^,]+, final ([\d.]+ \w+)", text).group(1))
    assert pta_final >= 8 * 128 * 1024
    # The CSV keeps upstream's rows: a HOST row for the malloc under every
    # tensor, and the HOST pool's running total with them.
    host_rows = [r for r in rows if r["Event Type"] == "HOST" and r["Event"] in ("MALLOC", "FREE")]
    # (the last running total written: the end's shadow FREEs carry none)
    csv_host_final = int([r for r in host_rows if "used" in r["attr"]][-1]["attr"]["used"])
    pta_ptrs = {r["Ptr"] for r in pta_mallocs(rows)}
    assert any(r["Ptr"] in pta_ptrs for r in host_rows if r["Event"] == "MALLOC")
    # the console's HOST figure leaves the tensors' storage out
    assert host_final < csv_host_final - 8 * 128 * 1024 + 4096, (host_final, csv_host_final)
    # so does the leak summary: the kept tensors are PTA leaks, not host ones
    m = re.search(r"Host memory still allocated at stop\(\) on device cpu: (\d+) block\(s\), (\d+) bytes", text)
    assert m, text
    # upstream's SUMMARY counts the step leaks only: the six kept tensors
    summary = float(re.search(r"SUMMARY: ([\d.]+) Mb\(s\) leaked", text).group(1))
    assert abs(summary - 6 * 0.125) < 0.001, summary
    assert not re.search(r"\d+ block\(s\), \d{6,} bytes, allocated at: .*keep_one", text)
    # decomposition and HTML agree on the HOST peak (both without tensor storage)
    db = dump_files(d, kind="memscope_dump")[0].with_suffix(".db")
    con = sqlite3.connect(str(db))
    owners = {json.loads(c)["owner"]: json.loads(c)
              for (c,) in con.execute("SELECT cols FROM msms_findings WHERE \"table\"='owners'")}
    con.close()
    html = next(d.glob("report_*.html")).read_text()
    # (the chart's fields up to its peak: "device" and any later ones)
    html_host_peak = int(re.search(r'"label":"cpu host memory",[^{}\[]*?"peak":(\d+)', html).group(1))
    assert int(owners["HOST"]["peak_bytes"]) == html_host_peak
    assert int(owners["HOST"]["live_bytes"]) < csv_host_final - 8 * 128 * 1024 + 4096


def test_one_stack_one_id_across_threads(tmp_path):
    """Interning is per process: three threads with the same C stack share one id."""
    run_cli(["--device=cpu", "--call-stack=c", "--data-format=db", "--analysis=", "--output=out", "--",
             TEST_BIN / "cap_threads", "3", "50", "0"], tmp_path, check_rc=0)
    (d,) = process_dirs(tmp_path / "out")
    db = next((d / "device_cpu" / "dump").glob("*.db"))
    con = sqlite3.connect(str(db))
    n, distinct = con.execute("SELECT count(*), count(DISTINCT text) FROM msms_stacks").fetchone()
    workers = con.execute("SELECT count(DISTINCT \"Call Stack(C)\") FROM memscope_dump WHERE Event='MALLOC' "
                          "AND \"Thread Id\" != \"Process Id\"").fetchone()[0]
    con.close()
    assert n == distinct, (n, distinct)
    assert workers == 1
