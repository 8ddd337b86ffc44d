#!/usr/bin/env python3
"""Where the host's time goes, from one saved capture (issue #30 item 2):
the same capture (`--save-capture=true` of a run of train_gpt.py) replayed
(`msmemscope --replay`) with one part more each time, so the difference
between two lines is that part's CPU time:

  core            --aggregate --analysis=none   capture read + decode, per-row
                                                attribute views, live-block
                                                accounting, stack texts
  + analyzers     --aggregate --analysis=leaks,decompose
  + csv           --analysis=leaks,decompose (default CSV)
  + db            --analysis=leaks,decompose --format=db
  agg + html      --aggregate --analysis=leaks,decompose --sinks=html
  csv + html,memory_viz

Each line is run R times, interleaved (and with a second binary, --base, for
a before/after comparison); user + system CPU seconds of the whole command
and its wall seconds, median and range.

Usage: bench/torch/host_parts.py --capture FILE [--msmemscope BIN] [--base BIN] [--rounds 3]
The capture: build/bin/msmemscope --device=cpu --call-stack=python --save-capture=true
--output=OUT -- /usr/bin/python3 bench/torch/train_gpt.py, then
FILE = OUT/msmemscope_*_cpu/capture_<pid>.msmcap.
"""
import argparse
import os
import resource
import shutil
import statistics
import subprocess
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
AN = "--analysis=leaks,decompose"
PARTS = [
    ("core", ["--aggregate", "--analysis=none"]),
    ("core + analyzers", ["--aggregate", AN]),
    ("+ csv", [AN]),
    ("+ db", [AN, "--format=db"]),
    ("agg + html", ["--aggregate", AN, "--sinks=html"]),
    ("csv + html,memory_viz", [AN, "--sinks=html,memory_viz"]),
]


def run(binary, capture, extra, workdir):
    d = tempfile.mkdtemp(dir=workdir)
    ru0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.time()
    p = subprocess.run([binary, "--replay=" + capture, "--output-path=" + d] + extra,
                       stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    wall = time.time() - t0
    ru1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    shutil.rmtree(d, ignore_errors=True)
    if p.returncode != 0:
        print("FAILED %s %s: %s" % (binary, extra, p.stderr[-500:]))
        return None
    return (ru1.ru_utime - ru0.ru_utime) + (ru1.ru_stime - ru0.ru_stime), wall


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--capture", required=True)
    ap.add_argument("--msmemscope", default=os.path.join(ROOT, "build", "bin", "msmemscope"))
    ap.add_argument("--base", help="a second msmemscope to compare with (e.g. a copy of the build before a change)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--only", help="comma-separated part names")
    args = ap.parse_args()
    bins = [("new", args.msmemscope)] + ([("base", args.base)] if args.base else [])
    parts = [p for p in PARTS if not args.only or p[0] in args.only.split(",")]
    workdir = tempfile.mkdtemp(prefix="msms_host_parts_")
    res = {}
    for rnd in range(args.rounds):
        for name, extra in parts:
            for bname, b in bins:
                r = run(b, args.capture, extra, workdir)
                if r:
                    res.setdefault((name, bname), []).append(r)
                    print("round %d %-24s %-5s cpu %6.2f s wall %6.2f s" % (rnd + 1, name, bname, r[0], r[1]), flush=True)
    shutil.rmtree(workdir, ignore_errors=True)
    print()
    head = "| replay | " + " | ".join("%s CPU s | %s wall s" % (b, b) for b, _ in bins) + " |"
    print(head)
    print("|---|" + "---:|---:|" * len(bins))
    for name, _ in parts:
        cells = []
        for bname, _ in bins:
            for i in (0, 1):  # CPU, wall
                v = [r[i] for r in res.get((name, bname), [])]
                cells.append("%.2f (%.2f–%.2f)" % (statistics.median(v), min(v), max(v)) if v else "-")
        print("| %s | %s |" % (name, " | ".join(cells)))


if __name__ == "__main__":
    main()
