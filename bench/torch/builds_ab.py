#!/usr/bin/env python3
"""Two msmemscope builds on the training loop (issue #30 item 1): train_gpt.py
with --step-times bare, under build A's CLI and under build B's (issue #30's
options: --device=cpu --call-stack=python --analysis=leaks,decompose, the
default CSV), interleaved over N rounds.

On a shared VM a whole run is now and then ~1.7x slower, bare included (all
its steps, not a few): a change of a few per cent drowns in such runs. So
besides each run's mean step (after the first two), this prints each run's
fastest step, and for both the median over the rounds, the ratio to bare,
and B's ratio to A paired within each round; then the lower quartile of
each variant's fastest steps, which the slow runs leave alone as long as
they are fewer than three in four.

Usage: bench/torch/builds_ab.py A_CLI B_CLI [--rounds 16] [--steps 20]
       [--python /usr/bin/python3] [-- extra msmemscope options]
e.g.   bench/torch/builds_ab.py /tmp/base/build/bin/msmemscope build/bin/msmemscope
"""
import argparse
import os
import statistics
import subprocess
import sys
import tempfile

from rounds import interleaved, output_line

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPT = os.path.join(HERE, "train_gpt.py")
MSMS_COMMON = ["--device=cpu", "--call-stack=python", "--analysis=leaks,decompose"]


def steps_of(cmd, workdir):
    text = output_line(cmd, workdir, "steps_ms=")
    if text is None:
        return None
    steps = [float(v) for v in text.split(",")]
    return steps[2:] if len(steps) > 3 else steps


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("a", help="build A's CLI (bin/msmemscope)")
    ap.add_argument("b", help="build B's CLI")
    ap.add_argument("--rounds", type=int, default=16)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--python", default="/usr/bin/python3")
    ap.add_argument("extra", nargs="*", help="more msmemscope options (after --)")
    args = ap.parse_args()
    prog = [args.python, SCRIPT, "--steps", str(args.steps), "--step-times"]

    def under(cli):
        return lambda d: [cli] + MSMS_COMMON + args.extra + ["--output-path=" + d, "--"] + prog

    variants = [("bare", lambda d: prog), ("A", under(args.a)), ("B", under(args.b))]
    workdir = tempfile.mkdtemp(prefix="msms_builds_ab_")
    res = interleaved(variants, args.rounds, lambda cmd: steps_of(cmd, workdir),
                      lambda k, s: "%s %.1f/%.1f ms" % (k, min(s), statistics.mean(s)))
    subprocess.run(["rm", "-rf", workdir])
    n = len(res["bare"])
    if n == 0:
        sys.exit("no complete round")
    print()
    print("%d rounds, %d steps (the first two left out); A = %s, B = %s" % (n, args.steps, args.a, args.b))
    print()
    print("| per run | bare ms | A ms | A ÷ bare | B ms | B ÷ bare | B ÷ A paired | B lower in |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for name, f in (("fastest step", min), ("mean step", statistics.mean)):
        v = {k: [f(s) for s in res[k]] for k in res}
        med = {k: statistics.median(v[k]) for k in v}
        ra = statistics.median(v["A"][i] / v["bare"][i] for i in range(n))
        rb = statistics.median(v["B"][i] / v["bare"][i] for i in range(n))
        pab = [v["B"][i] / v["A"][i] for i in range(n)]
        print("| %s | %.2f | %.2f | %.3f | %.2f | %.3f | %.3f (%.3f-%.3f) | %d of %d |" %
              (name, med["bare"], med["A"], ra, med["B"], rb, statistics.median(pab), min(pab), max(pab),
               sum(x < 1 for x in pab), n))
    # Runs in the slow state push whole rounds up; the lower quartile of the
    # fastest steps, unpaired, reads the variants where that state left them.
    q = {k: sorted(min(s) for s in res[k])[(n - 1) // 4] for k in res}
    print("| fastest step, lower quartile | %.2f | %.2f | %.3f | %.2f | %.3f | %.3f | - |" %
          (q["bare"], q["A"], q["A"] / q["bare"], q["B"], q["B"] / q["bare"], q["B"] / q["A"]))


if __name__ == "__main__":
    main()
