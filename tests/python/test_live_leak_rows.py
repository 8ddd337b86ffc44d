"""The live view's leak rows at the end say what the leak report says, on a
real PyTorch loop with C and Python stacks (tests/programs/live/
live_torch_leaks.py: 12 judged step leaks of 13332 bytes at KEEP_LINE, one
host block of 77777 bytes at MALLOC_LINE never freed). Each row is a site as
the report groups them, largest first: a step leak names its operator and the
program's line (not the framework allocator's frame, the same for every
PyTorch leak), and more findings than rows cannot hide the largest leak."""
import json
import os
import subprocess
from pathlib import Path

import pytest

from conftest import CLI, process_dirs

PROG = Path(__file__).resolve().parents[1] / "programs" / "live" / "live_torch_leaks.py"


def line_of(mark):
    return next(i for i, l in enumerate(PROG.read_text().splitlines(), 1) if mark in l)


def run_live(tmp_path, *options):
    """The program under `msmemscope --live --device=cpu OPTIONS`: (the
    completed run, its output folder)."""
    pytest.importorskip("torch")
    env = dict(os.environ)
    env.pop("LD_PRELOAD", None)
    out = tmp_path / "out"
    p = subprocess.run([str(CLI), "--live", "--device=cpu", *options, "-o", str(out), "--", "/usr/bin/python3",
                        str(PROG)],
                       cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=600)
    assert p.returncode == 0, p.stderr
    return p, out


def test_live_leak_rows_match_the_leak_report(tmp_path):
    p, out = run_live(tmp_path, "--call-stack=c,python", "--analysis=leaks")
    keep = f"{PROG}({line_of('# KEEP_LINE')}): <module>"
    host = f"{PROG}({line_of('# MALLOC_LINE')}): <module>"
    # the leak report (on stdout after the last screen), the ground truth's figures
    assert (f"    12 block(s), 159984 bytes (steps 2-13): allocated by: operator torch._ops.aten.full.default, "
            f"called from {keep}") in p.stdout, p.stdout
    assert f"    1 block(s), 77777 bytes, allocated at: {host}" in p.stdout, p.stdout
    dirs = process_dirs(out)
    assert len(dirs) == 1, dirs
    summary = json.loads((dirs[0] / "summary.json").read_text())
    live = json.loads((dirs[0] / "live.json").read_text())
    assert live["finished"] is True
    la = live["leak_suspects"]["leak_analysis"]
    assert la["reported"] is True
    assert (la["blocks"], la["bytes"]) == (summary["leaks"]["allocations"], summary["leaks"]["bytes"])
    rows = la["rows"]
    assert rows[0] == {"kind": "step", "device": "cpu", "pool": "PTA", "site": keep,
                       "operator": "torch._ops.aten.full.default", "bytes": 12 * 13332, "blocks": 12}, rows
    assert rows[1] == {"kind": "exit", "device": "cpu", "pool": "HOST", "site": host, "operator": "",
                       "bytes": 77777, "blocks": 1}, rows
    assert [r["bytes"] for r in rows] == sorted((r["bytes"] for r in rows), reverse=True), rows
    shown = (sum(r["blocks"] for r in rows), sum(r["bytes"] for r in rows))
    rest = la["not_in_rows"]
    assert (shown[0] + rest["blocks"], shown[1] + rest["bytes"]) == (la["blocks"], la["bytes"]), la
    # the same sites as summary.json's largest of the leak report
    by_site = {(s["kind"], s["bytes"], s["blocks"]): s["site"] for s in summary["top_sites"]}
    assert by_site[("live_at_exit", 77777, 1)] == host
    assert by_site[("leak", 12 * 13332, 12)].endswith(f"called from {keep}")
    # the screen (plain lines: stdout is a pipe), its last one
    last = p.stdout[p.stdout.rindex("msmemscope live:"):]
    # (a row's site is cut to 110 characters there: the path of a checkout
    # in a deeper folder is)
    def cut(text, n=110):
        return text if len(text) <= n else text[:n - 3] + "..."

    assert "    cpu    HOST exit            77777 B      1 blocks  " + cut(host) + "\n" in last, last
    assert ("    cpu    PTA  step           159984 B     12 blocks  "
            + cut("torch._ops.aten.full.default, called from " + keep) + "\n") in last, last


def test_live_without_the_leak_analysis_says_so(tmp_path):
    """--analysis without leaks: the view says the analysis does not run, not
    "none found" over a program that leaks."""
    p, out = run_live(tmp_path, "--call-stack=python", "--analysis=decompose")
    (d,) = process_dirs(out)
    la = json.loads((d / "live.json").read_text())["leak_suspects"]["leak_analysis"]
    assert (la["runs"], la["not_running"], la["reported"]) == (False, "--analysis does not list leaks", False), la
    last = p.stdout[p.stdout.rindex("msmemscope live:"):]
    assert ("LEAK SUSPECTS\n  (the leak analysis does not run: --analysis does not list leaks; nothing here is "
            "judged)\n") in last, last
    assert "none found" not in last, last
