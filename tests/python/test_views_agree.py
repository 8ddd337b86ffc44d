"""What the trace says about a Python run agrees with the run's other views
(the console, summary.json, the HTML page, the memory_viz pickle): the
memory tracks end at the run's final bytes and reach its peak.

The imports' heap of a Python program (README, "Python programs under
--device=cpu") is one shadow block whose rows carry no `used`; it is written
again at exit with what the interpreter's shutdown left. The trace's host
track followed the rows' `used` only, so it ended at the heap's size from
before the shutdown (tens of MiB more than the run's final bytes for
PyTorch)."""
import json
import re
import subprocess
import textwrap

import pytest

from conftest import BUILD, process_dirs, run_cli
from sinks_common import load_trace, only, render

# Modules of the Python installation: their imports are folded into the
# imports' heap, and the shutdown frees much of what they allocated.
PROGRAM = textwrap.dedent("""
    import decimal, email.parser, json, xml.dom.minidom
    kept = [bytearray(4096) for _ in range(50)]
    print("done", len(kept))
""")


def track(doc, name):
    """(time, bytes) points of one counter track, in time order."""
    points = [(e["ts"], e["args"]["bytes"]) for e in doc["traceEvents"] if e["ph"] == "C" and e["name"] == name]
    assert points, name
    return sorted(points)


def test_trace_host_tracks_end_at_the_final_bytes_after_the_imports_heap_shrinks(tmp_path):
    (tmp_path / "prog.py").write_text(PROGRAM)
    run_cli(["--device=cpu", "--events=alloc,free", "--analysis=none", "--sinks=trace,memory_viz",
             f"--output={tmp_path}/out", "--", "/usr/bin/python3", tmp_path / "prog.py"], tmp_path, check_rc=0)
    proc = only(process_dirs(tmp_path / "out"))
    pool = json.loads((proc / "summary.json").read_text())["pools"]["cpu/HOST"]
    dump = (only(proc.glob("device_cpu/dump/memscope_dump_*.csv"))).read_text()
    # the exit's rewrite of the imports' heap is in the dump (a FREE then a smaller MALLOC)
    sizes = [int(line.split("size:")[1].split(",")[0]) for line in dump.splitlines()
             if "import:true" in line and ",MALLOC," in line]
    assert len(sizes) >= 2 and sizes[-1] < sizes[-2], sizes
    doc = load_trace(only(proc.glob("trace_*.json")))
    for name in ("cpu HOST allocated", "cpu in use"):  # a host-only run: in use is the host heap
        points = track(doc, name)
        assert (points[-1][1], max(v for _, v in points)) == (pool["final_bytes"], pool["peak_bytes"]), name


# Steps through the Python API; every step keeps a block.
STEPS_PROGRAM = textwrap.dedent("""
    import msmemscope
    kept = []
    for i in range(5):
        kept.append(bytearray(100000 + i))
        msmemscope.step()
""")


def test_html_says_the_leak_analysis_is_off_under_steps_as_the_console_does(tmp_path):
    """The leaks analyzer turns itself off when --steps selects steps (the
    console warns, summary.json has no leaks); the page said "The leaks
    analysis reported no leak." and showed 0 leaked blocks."""
    (tmp_path / "prog.py").write_text(STEPS_PROGRAM)
    p = run_cli(["--device=cpu", "--events=alloc,free", "--analysis=leaks", "--steps=2,3", "--sinks=html",
                 f"--output={tmp_path}/out", "--", "/usr/bin/python3", tmp_path / "prog.py"], tmp_path, check_rc=0)
    assert ("[msmemscope] warning: leaks: the leak analysis is off when --steps selects steps "
            "(only some events are collected)") in p.stdout + p.stderr
    proc = only(process_dirs(tmp_path / "out"))
    assert json.loads((proc / "summary.json").read_text())["leaks"] is None
    page = only(proc.glob("report_*.html"))
    data = json.loads(page.read_text().split('id="msms-data">')[1].split("</script>")[0])
    assert (data["leaks_ran"], data["leaks_off"]) == (False, "steps")
    dom = render(page, tmp_path)
    card = re.search(r'<div class="card" id="card-leaks"><div class="k">(.*?)</div><div class="v">(.*?)</div>', dom)
    assert card and card.groups() == ("leaks", "not analysed (off with --steps)"), dom[:3000]
    assert re.search(r'<p class="empty" id="no-leaks">(.*?)</p>', dom).group(1) == \
        "The leaks analysis did not run (it is off with --steps)."


def test_html_leak_analysis_without_steps_still_judges(tmp_path):
    (tmp_path / "prog.py").write_text(STEPS_PROGRAM)
    run_cli(["--device=cpu", "--events=alloc,free", "--analysis=leaks", "--sinks=html",
             f"--output={tmp_path}/out", "--", "/usr/bin/python3", tmp_path / "prog.py"], tmp_path, check_rc=0)
    page = only(only(process_dirs(tmp_path / "out")).glob("report_*.html"))
    data = json.loads(page.read_text().split('id="msms-data">')[1].split("</script>")[0])
    assert data["leaks_ran"] is True and "leaks_off" not in data


# The Python API without the CLI: the heap hooks go in at start(), after the
# model was built; its weights come as shadow PTA rows with no host block.
API_PROGRAM = textwrap.dedent("""
    import sys, torch, msmemscope
    msmemscope.config(device="cpu", analysis="none", output=sys.argv[1], sinks="trace")
    model = torch.nn.Linear(256, 512)            # before start(): 526336 bytes of weights
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    def train():
        msmemscope.start()
        for i in range(3):
            opt.zero_grad()
            model(torch.randn(8, 256)).sum().backward()
            opt.step()
        msmemscope.stop()
    train()
    print("weights", sum(p.numel() * p.element_size() for p in model.parameters()), flush=True)
    if sys.argv[2] == "new_model":  # the first model's weights freed while collection is off
        model = torch.nn.Linear(256, 512)
        opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
        train()
""")


@pytest.mark.parametrize("then", ["end", "new_model"])
def test_trace_in_use_holds_the_weights_made_before_a_python_api_start(tmp_path, then):
    """"cpu in use" is HOST + the pools (each byte once). It followed the
    rows' device_used, which holds no host block of a tensor made before the
    API's first start(): it ended at 1,076,040 B, under "cpu PTA allocated"'s
    1,579,008 B, short by the weights' 526,336 B. Weights freed while collection
    is off leave it at the next start(), as they leave the PTA track."""
    (tmp_path / "prog.py").write_text(API_PROGRAM)
    p = subprocess.run(["/usr/bin/python3", "prog.py", str(tmp_path / "out"), then], cwd=tmp_path, capture_output=True,
                       text=True, timeout=600, env={"PYTHONPATH": str(BUILD / "python"), "PATH": "/usr/bin:/bin"})
    assert p.returncode == 0, p.stderr
    assert "weights 526336" in p.stdout
    proc = only(process_dirs(tmp_path / "out"))
    pools = json.loads((proc / "summary.json").read_text())["pools"]
    doc = load_trace(only(proc.glob("trace_*.json")))
    final = {name: track(doc, name)[-1][1] for name in ("cpu HOST allocated", "cpu PTA allocated", "cpu in use")}
    assert (final["cpu HOST allocated"], final["cpu PTA allocated"]) == \
        (pools["cpu/HOST"]["final_bytes"], pools["cpu/PTA"]["final_bytes"]), final
    assert final["cpu in use"] == pools["cpu/HOST"]["final_bytes"] + pools["cpu/PTA"]["final_bytes"], (final, pools)
