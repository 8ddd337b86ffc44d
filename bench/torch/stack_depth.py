#!/usr/bin/python3
"""What a small operator costs under --call-stack=python as the Python stack
gets deeper (issue #30: the Python-stack reads are per event, and a real
model's stacks -- nested modules, a trainer's loop -- are deeper than the
GPT loop's): bare, build A's CLI and build B's, interleaved over N rounds,
for each depth. The program (--as-program) calls itself DEPTH frames deep,
then times 5,000 iterations of `y = x + 1; z = y * y` on a 10-element
tensor, seven times, and prints the fastest as microseconds per iteration.
Printed per depth: each variant's fastest run (the VM's slow runs are whole
runs) and what it adds to bare.

Usage: bench/torch/stack_depth.py A_CLI B_CLI [--depths 2,20,60] [--rounds 5]
       [--python /usr/bin/python3]
"""
import argparse
import os
import subprocess
import sys
import tempfile

from rounds import interleaved, output_line

MSMS_COMMON = ["--device=cpu", "--call-stack=python", "--analysis=leaks,decompose"]


def as_program(depth):
    import time
    import torch
    torch.set_num_threads(1)
    x = torch.ones(10)

    def work(n):
        for _ in range(n):
            y = x + 1
            z = y * y  # noqa: F841

    def nest(d, n):
        return work(n) if d == 0 else nest(d - 1, n)

    best = min(_timed(time, nest, depth) for _ in range(7))
    print("us_per_iter=%.3f" % (best / 5000 * 1e6))


def _timed(time, nest, depth):
    t = time.perf_counter()
    nest(depth, 5000)
    return time.perf_counter() - t


def us_per_iter(cmd, workdir):
    text = output_line(cmd, workdir, "us_per_iter=")
    return float(text) if text is not None else None


def main():
    if len(sys.argv) > 2 and sys.argv[1] == "--as-program":
        return as_program(int(sys.argv[2]))
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("a", help="build A's CLI (bin/msmemscope)")
    ap.add_argument("b", help="build B's CLI")
    ap.add_argument("--depths", default="2,20,60")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--python", default="/usr/bin/python3")
    args = ap.parse_args()
    me = os.path.abspath(__file__)
    workdir = tempfile.mkdtemp(prefix="msms_stack_depth_")
    rows = []
    for depth in [int(d) for d in args.depths.split(",")]:
        prog = [args.python, me, "--as-program", str(depth)]
        variants = [("bare", lambda d, prog=prog: prog)]
        for key, cli in (("A", args.a), ("B", args.b)):
            variants.append((key, lambda d, cli=cli, prog=prog: [cli] + MSMS_COMMON + ["--output-path=" + d, "--"] + prog))
        res = interleaved(variants, args.rounds, lambda cmd: us_per_iter(cmd, workdir),
                          lambda k, v, depth=depth: "depth %d %s %.2f us" % (depth, k, v))
        if not res["bare"]:
            sys.exit("no complete round at depth %d" % depth)
        best = {k: min(v) for k, v in res.items()}
        rows.append((depth, best))
    subprocess.run(["rm", "-rf", workdir])
    print()
    print("%d rounds; A = %s, B = %s; us per iteration (two operators), the fastest run" % (args.rounds, args.a, args.b))
    print()
    print("| depth | bare | A | A adds | B | B adds | B's added ÷ A's |")
    print("|---:|---:|---:|---:|---:|---:|---:|")
    for depth, b in rows:
        aa, ba = b["A"] - b["bare"], b["B"] - b["bare"]
        print("| %d | %.2f | %.2f | %.2f | %.2f | %.2f | %.2f |" % (depth, b["bare"], b["A"], aa, b["B"], ba, ba / aa))


if __name__ == "__main__":
    main()
