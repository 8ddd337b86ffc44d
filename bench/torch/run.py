#!/usr/bin/env python3
"""Issue #30's benchmark: the GPT-style CPU training loop of train_gpt.py
bare, under the msmemscope CLI (--device=cpu --call-stack=python
--analysis=leaks,decompose) with each output and, for the CSV, started
from a shell script (`bash train.sh`, item 3), under torch.profiler
(profile_memory=True, with_stack=True), and under memray when it is
importable; all variants interleaved over N rounds (each round runs every
variant once, in turn), so that a shared machine's load falls on all alike.

For each variant: end-to-end wall time (start to exit) / bare's, the training
loop's own time (printed by the script) / bare's, the seconds the tool still
worked after the program ended (exit time minus the program's own end
time), the CPU time of all its processes (user + system; steadier than
wall time on a shared machine) / bare's, and the bytes it wrote (the output folder after the run). Medians,
with the range over the rounds in parentheses. Then the lower quartile of
each variant's wall times over bare's: a VM that now and then runs a whole
run ~1.5× slow, whichever variant it hits, moves the medians and pairs of
a few rounds but leaves the faster runs alone (bench/torch/builds_ab.py
reads the loop the same way).

Usage: bench/torch/run.py [--rounds 3] [--steps 20] [--msmemscope build/bin/msmemscope]
       [--python /usr/bin/python3] [--only csv,db,...] [--workdir DIR]
"""
import argparse
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
SCRIPT = os.path.join(HERE, "train_gpt.py")

MSMS_COMMON = ["--device=cpu", "--call-stack=python", "--analysis=leaks,decompose"]
MSMS_VARIANTS = [
    ("csv", "msmemscope CSV (default)", []),
    ("db", "msmemscope --format=db", ["--format=db"]),
    ("agg_html", "msmemscope --aggregate --sinks=html", ["--aggregate", "--sinks=html"]),
    ("csv_html_viz", "msmemscope CSV + --sinks=html,memory_viz", ["--sinks=html,memory_viz"]),
]


def has_module(python, name):
    return subprocess.run([python, "-c", "import " + name], stdout=subprocess.DEVNULL,
                          stderr=subprocess.DEVNULL).returncode == 0


def variants(args):
    py, steps = args.python, ["--steps", str(args.steps)]
    out = [("bare", "bare", lambda d: [py, SCRIPT] + steps)]
    for key, label, extra in MSMS_VARIANTS:
        out.append((key, label, lambda d, extra=extra: [args.msmemscope] + MSMS_COMMON + extra +
                    ["--output-path=" + d, "--", py, SCRIPT] + steps))
    # item 3: the same program started from a shell script (upstream's
    # recommended form, `msmemscope ... bash user.sh`), the default CSV
    out.append(("csv_sh", "msmemscope CSV, `bash train.sh`",
                lambda d: [args.msmemscope] + MSMS_COMMON + ["--output-path=" + d, "--", "bash", shell_script(d, py, steps)]))
    out.append(("torch_profiler", "torch.profiler(profile_memory, with_stack)",
                lambda d: [py, SCRIPT] + steps + ["--torch-profiler", os.path.join(d, "trace.json")]))
    if has_module(py, "memray"):
        # memray_run.py: `memray run`'s own tracking through memray's API (its
        # command line needs a newer `textual` than Debian 12 has)
        runner = os.path.join(HERE, "memray_run.py")
        out.append(("memray", "memray run", lambda d: [py, runner, os.path.join(d, "out.bin"), SCRIPT] + steps))
        out.append(("memray_native", "memray run --native",
                    lambda d: [py, runner, "--native", os.path.join(d, "out.bin"), SCRIPT] + steps))
    if args.only:
        keep = set(args.only.split(",")) | {"bare"}
        out = [v for v in out if v[0] in keep]
    return out


def shell_script(d, py, steps):
    """train.sh in the run's folder: the script run by bash (not exec'd), as a user's launcher."""
    path = os.path.join(d, "train.sh")
    with open(path, "w") as f:
        f.write("#!/bin/bash\nset -e\n%s %s %s\n" % (py, SCRIPT, " ".join(steps)))
    return path


def dir_bytes(d):
    total = 0
    for base, _, files in os.walk(d):
        for f in files:
            try:
                total += os.lstat(os.path.join(base, f)).st_size
            except OSError:
                pass
    return total


def run_one(cmd_of, workdir):
    d = tempfile.mkdtemp(prefix="out_", dir=workdir)
    cmd = cmd_of(d)
    ru0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.time()
    p = subprocess.run(cmd, cwd=d, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    t1 = time.time()
    ru1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (ru1.ru_utime - ru0.ru_utime) + (ru1.ru_stime - ru0.ru_stime)
    loop = end = None
    for line in p.stdout.splitlines():
        if line.startswith("loop_s="):
            kv = dict(f.split("=", 1) for f in line.split())
            loop, end = float(kv["loop_s"]), float(kv["end_wall"])
    if p.returncode != 0 or loop is None:
        sys.stderr.write("FAILED (%d): %s\n%s\n" % (p.returncode, " ".join(cmd), p.stderr[-3000:]))
        shutil.rmtree(d, ignore_errors=True)
        return None
    r = {"wall": t1 - t0, "loop": loop, "after": max(0.0, t1 - end), "cpu": cpu, "bytes": dir_bytes(d)}
    shutil.rmtree(d, ignore_errors=True)
    return r


def fmt_ratio(vals):
    if not vals:
        return "-"
    m = statistics.median(vals)
    if len(vals) == 1:
        return "%.2f×" % m
    return "%.2f× (%.2f–%.2f)" % (m, min(vals), max(vals))


def lower_quartile(vals):
    return statistics.quantiles(vals, n=4)[0] if len(vals) >= 2 else vals[0]


def fmt_s(vals):
    if not vals:
        return "-"
    m = statistics.median(vals)
    if len(vals) == 1:
        return "%.1f" % m
    return "%.1f (%.1f–%.1f)" % (m, min(vals), max(vals))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--msmemscope", default=os.path.join(ROOT, "build", "bin", "msmemscope"))
    ap.add_argument("--python", default="/usr/bin/python3")
    ap.add_argument("--only", help="comma-separated variant keys (bare is always run)")
    ap.add_argument("--workdir", help="where outputs go while measured (default: a temporary folder)")
    args = ap.parse_args()
    if not has_module(args.python, "memray"):
        print("memray: not importable by %s, not measured (build it from its source: see bench/README.md)" % args.python)
    vs = variants(args)
    workdir = args.workdir or tempfile.mkdtemp(prefix="msms_bench_torch_")
    os.makedirs(workdir, exist_ok=True)
    res = {k: [] for k, _, _ in vs}
    for rnd in range(args.rounds):
        for key, label, cmd_of in vs:
            r = run_one(cmd_of, workdir)
            if r:
                res[key].append(r)
                print("round %d %-16s wall %7.2f s  loop %6.2f s  after %6.2f s  cpu %7.2f s  %10.1f MB" %
                      (rnd + 1, key, r["wall"], r["loop"], r["after"], r["cpu"], r["bytes"] / 1e6), flush=True)
    if not args.workdir:
        shutil.rmtree(workdir, ignore_errors=True)
    bare = res["bare"]
    if not bare:
        sys.exit("bare run failed")
    bw, bl = statistics.median(r["wall"] for r in bare), statistics.median(r["loop"] for r in bare)
    print()
    print("rounds: %d, steps: %d; bare: wall %.2f s, loop %.2f s (medians)" % (args.rounds, args.steps, bw, bl))
    print()
    bq = lower_quartile([r["wall"] for r in bare])
    print("| tool | wall ÷ bare | wall ÷ bare, lower quartiles | training loop ÷ bare | CPU (all processes) ÷ bare | "
          "s after the program ended | written MB |")
    print("|---|---|---|---|---|---|---:|")
    for key, label, _ in vs:
        rs = res[key]
        if not rs:
            print("| %s | failed | | | | | |" % label)
            continue
        # ratios per round against that round's bare run (interleaved pairs)
        walls = [r["wall"] / bare[min(i, len(bare) - 1)]["wall"] for i, r in enumerate(rs)]
        loops = [r["loop"] / bare[min(i, len(bare) - 1)]["loop"] for i, r in enumerate(rs)]
        cpus = [r["cpu"] / bare[min(i, len(bare) - 1)]["cpu"] for i, r in enumerate(rs)]
        lq = lower_quartile([r["wall"] for r in rs]) / bq
        print("| %s | %s | %.2f× | %s | %s | %s | %.1f |" % (label, fmt_ratio(walls), lq, fmt_ratio(loops),
                                                        fmt_ratio(cpus), fmt_s([r["after"] for r in rs]),
                                                        statistics.median(r["bytes"] for r in rs) / 1e6))


if __name__ == "__main__":
    main()
