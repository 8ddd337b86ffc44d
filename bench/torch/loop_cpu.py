#!/usr/bin/env python3
"""The training loop's cost at equal CPU speed (issue #30 item 1): on a VM
whose CPU speed swings from run to run (the same bare loop has taken 0.70 s
and 1.27 s of CPU time in consecutive runs), the loop's wall time under
msmemscope over bare's says more about the VM than about msmemscope. The
program's BLAS work (`sgemm_` in libblas: the model's matrix products) is
the same in every run, so its CPU samples measure how fast the CPU ran;
every other sample of the program is measured against them.

For each variant (bare; the CLI as issue #30 runs it, --device=cpu
--call-stack=python --analysis=leaks,decompose, with each output), in
interleaved rounds: `perf record -a -k CLOCK_MONOTONIC` of train_gpt.py;
the program's samples inside its loop (the window ends at the script's
end_mono and lasts its loop_s), split by library. Its ratio is
(all loop samples / libblas loop samples) over bare's in the same round;
the median and range over the rounds are printed, with the median's 90%
confidence interval against the 1.15x target (run.py's verdict), and per
library the samples over libblas's, above bare's (what each part adds, as
a share of bare's loop). The program never waits on msmemscope (under the
CLI its wall time equals its CPU time), so at equal CPU speed this ratio is the
loop's wall ratio. It reads the cost a little low: what msmemscope does
to the caches slows the BLAS work too, and that part cancels out.

Needs perf and the right to record every CPU (root, or
kernel.perf_event_paranoid <= -1).

Usage: bench/torch/loop_cpu.py [--rounds 5] [--steps 80] [--only csv,agg_html,...]
       [--msmemscope build/bin/msmemscope] [--python /usr/bin/python3]
"""
import argparse
import collections
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile

from rounds import verdict
from run import LOOP_TARGET, MSMS_COMMON, MSMS_VARIANTS, ROOT, SCRIPT, fmt_ci  # the variants run.py measures end to end

BLAS = re.compile(r"^libblas\.so")
SAMPLE = re.compile(r"^\s*(\S.*?)\s+(\d+)\s+([0-9.]+):\s+[0-9a-f]+\s+.*\((.*)\)\s*$")


def variants(args):
    out = [("bare", "bare", [])]
    for key, label, extra in MSMS_VARIANTS:
        if args.only and key not in args.only:
            continue
        out.append((key, label, [args.msmemscope] + MSMS_COMMON + extra + ["--output-path=@OUT@", "--"]))
    return out


PERF_MAP = re.compile(r"^perf-\d+\.map$")
JIT_NAME = "JIT code (perf-PID.map)"


def record(prefix, args, workdir):
    """One perf-recorded run; returns {library: samples} of the program's
    loop, or None when the run failed."""
    data = os.path.join(workdir, "perf.data")
    out = tempfile.mkdtemp(prefix="out_", dir=workdir)
    cmd = ["perf", "record", "-q", "-a", "-F", str(args.freq), "-k", "CLOCK_MONOTONIC", "-o", data, "--"]
    cmd += [a.replace("@OUT@", out) for a in prefix] + [args.python, SCRIPT, "--steps", str(args.steps)]
    p = subprocess.run(cmd, cwd=workdir, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    shutil.rmtree(out, ignore_errors=True)
    m = re.search(r"loop_s=([0-9.]+) .*end_mono=([0-9.]+)", p.stdout)
    if p.returncode != 0 or not m:
        sys.stderr.write("FAILED (%d): %s\n%s\n" % (p.returncode, " ".join(cmd), p.stderr[-2000:]))
        return None
    loop, end = float(m.group(1)), float(m.group(2))
    script = subprocess.run(["perf", "script", "-i", data, "-F", "comm,pid,time,ip,dso"], stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, text=True).stdout
    os.unlink(data)
    by_pid = collections.defaultdict(collections.Counter)
    for line in script.splitlines():
        s = SAMPLE.match(line)
        if not s or not s.group(1).startswith("python3"):
            continue
        if end - loop <= float(s.group(3)) <= end:
            lib = os.path.basename(s.group(4))
            # JIT-compiled code (oneDNN/fbgemm kernels) is named after the
            # process (perf-PID.map): one name for it in every run.
            by_pid[s.group(2)][JIT_NAME if PERF_MAP.match(lib) else lib] += 1
    if not by_pid:
        sys.stderr.write("no samples of the program in its loop: %s\n" % " ".join(cmd))
        return None
    # the program: the Python process with the most samples in the window
    libs = max(by_pid.values(), key=lambda c: sum(c.values()))
    if not any(BLAS.match(k) for k in libs):
        sys.stderr.write("no libblas samples in the loop (another BLAS?): %s\n" % dict(libs.most_common(5)))
        return None
    return {"loop": loop, "libs": libs}


def blas(libs):
    return sum(n for k, n in libs.items() if BLAS.match(k))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--steps", type=int, default=80)
    ap.add_argument("--freq", type=int, default=2999, help="perf samples per second and CPU")
    ap.add_argument("--msmemscope", default=os.path.join(ROOT, "build", "bin", "msmemscope"))
    ap.add_argument("--python", default="/usr/bin/python3")
    ap.add_argument("--only", help="comma-separated variant keys (bare is always run)")
    args = ap.parse_args()
    args.only = set(args.only.split(",")) if args.only else None
    if not shutil.which("perf"):
        sys.exit("perf not found (Debian: linux-perf)")
    vs = variants(args)
    workdir = tempfile.mkdtemp(prefix="msms_bench_loop_cpu_")
    rounds = []
    for rnd in range(args.rounds):
        got = {}
        for key, _, prefix in vs:
            r = record(prefix, args, workdir)
            if r is None:
                break
            got[key] = r
        if len(got) != len(vs):
            continue
        rounds.append(got)
        b = got["bare"]["libs"]
        line = "round %d: bare loop %.2f s, %d samples (libblas %d)" % (rnd + 1, got["bare"]["loop"],
                                                                        sum(b.values()), blas(b))
        for key, _, _ in vs[1:]:
            c = got[key]["libs"]
            ratio = (sum(c.values()) / blas(c)) / (sum(b.values()) / blas(b))
            line += "; %s loop %.2f s, %.3f×" % (key, got[key]["loop"], ratio)
        print(line, flush=True)
    shutil.rmtree(workdir, ignore_errors=True)
    if not rounds:
        sys.exit("no round completed")
    print()
    print("rounds: %d, steps: %d; the program's loop samples over its libblas samples, ÷ bare's in the same round"
          % (len(rounds), args.steps))
    print()
    print("| variant | loop CPU ÷ bare at equal BLAS work | its median's 90%% CI, against %.2f× | loop wall ÷ bare | "
          "added per library, share of bare's loop (median) |" % LOOP_TARGET)
    print("|---|---|---|---|---|")
    for key, label, _ in vs[1:]:
        ratios, walls = [], []
        added = collections.defaultdict(list)
        for got in rounds:
            b, c = got["bare"]["libs"], got[key]["libs"]
            nb, nc = sum(b.values()) / blas(b), sum(c.values()) / blas(c)
            ratios.append(nc / nb)
            walls.append(got[key]["loop"] / got["bare"]["loop"])
            for lib in set(b) | set(c):
                if not BLAS.match(lib):
                    added[lib].append((c[lib] / blas(c) - b[lib] / blas(b)) / nb)
        top = sorted(((statistics.median(v), k) for k, v in added.items()), reverse=True)[:6]
        parts = ", ".join("%s %+.1f%%" % (k, 100 * v) for v, k in top if abs(v) >= 0.001)
        fmt = lambda v: "%.3f× (%.3f–%.3f)" % (statistics.median(v), min(v), max(v))
        ci = "%s %s" % (fmt_ci(ratios), verdict(ratios, LOOP_TARGET))
        print("| %s | %s | %s | %s | %s |" % (label, fmt(ratios), ci, fmt(walls), parts))


if __name__ == "__main__":
    main()
