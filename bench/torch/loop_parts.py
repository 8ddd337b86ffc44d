#!/usr/bin/env python3
"""What each part of msmemscope costs the training loop (issue #30 item 2,
the program's side): train_gpt.py bare, under the CLI as issue #30 runs it
(--device=cpu --call-stack=python --analysis=leaks,decompose, the default
CSV), and under the CLI with one part switched off, interleaved over N
rounds. Prints each variant's loop ÷ bare (median and range) and, paired
within each round, its loop ÷ the default run's: the part's share.

Parts switched off (experiments, not options a user has):
  no-op-rows    --events=alloc,free: no ATEN_START/END rows (the operator
                observer still runs: operator depth, the ops@aten owner)
  no-observer   the PyTorch operator observer removed once the package has
                enabled it (no operator rows, no operator depth, and no
                RecordFunction callback in PyTorch)
  no-tagging    the package's per-step owner tags (gradients after
                backward(), parameters, gradients and optimizer state after
                optimizer.step()) not made
  no-py-stacks  no --call-stack=python (operator rows and allocations
                without the Python stack)
  db-instead-of-csv  --format=db: what the CSV sink (its ~12 MB of text a
                step, written directly to the disk) costs the loop beside it

The two package switches run the program through this file (--as-program
PARTS SCRIPT ARGS...), which changes msmemscope's Python package in the
program before the script runs; the default run goes through it too (with
no part off), so that both carry the same wrapper.

Usage: bench/torch/loop_parts.py [--rounds 12] [--steps 20] [--parts no-op-rows,...]
       [--msmemscope build/bin/msmemscope] [--python /usr/bin/python3]
"""
import argparse
import os
import statistics
import subprocess
import sys
import tempfile

from rounds import interleaved, output_line

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
SCRIPT = os.path.join(HERE, "train_gpt.py")
MSMS_ARGS = ["--device=cpu", "--analysis=leaks,decompose"]
PY_STACKS = ["--call-stack=python"]
PARTS = {
    # part: (extra CLI options, whether the call stacks stay, package switch)
    "no-op-rows": (["--events=alloc,free"], True, ""),
    "no-observer": ([], True, "observer"),
    "no-tagging": ([], True, "tagging"),
    "no-py-stacks": ([], False, ""),
    "db-instead-of-csv": (["--format=db"], True, ""),
}


def as_program(argv):
    """In the profiled program: switch off the named package parts, then run
    the script as __main__."""
    import runpy
    off, script, rest = argv[0], argv[1], argv[2:]
    off = set(filter(None, off.split(",")))
    if off:
        from msmemscope import _torch as t  # torch's import has enabled the collector by now
        if "observer" in off:
            t._start_op_tracking = lambda: None  # not again at a later start()
            if t._observer is not None:
                t._observer.disable()
                t._observer = None
            if t._mode is not None:
                t._mode.__exit__(None, None, None)
                t._mode = None
        if "tagging" in off:
            t._tag_known = lambda *a, **k: None
            t._tag_optimizer = lambda *a, **k: None
    sys.argv = [script] + rest
    runpy.run_path(script, run_name="__main__")


def loop_time(cmd, workdir):
    text = output_line(cmd, workdir, "loop_s=")
    return float(text.split()[0]) if text is not None else None


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "--as-program":
        return as_program(sys.argv[2:])
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=12)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--parts", default=",".join(PARTS), help="comma-separated: " + ", ".join(PARTS))
    ap.add_argument("--msmemscope", default=os.path.join(ROOT, "build", "bin", "msmemscope"))
    ap.add_argument("--python", default="/usr/bin/python3")
    args = ap.parse_args()
    parts = [p for p in args.parts.split(",") if p]
    for p in parts:
        if p not in PARTS:
            sys.exit("unknown part %r (known: %s)" % (p, ", ".join(PARTS)))
    script = [SCRIPT, "--steps", str(args.steps)]

    def under_cli(extra, stacks, off):
        prog = [args.python, os.path.abspath(__file__), "--as-program", off] + script
        return lambda d: ([args.msmemscope] + MSMS_ARGS + (PY_STACKS if stacks else []) + extra +
                          ["--output-path=" + d, "--"] + prog)

    variants = [("bare", lambda d: [args.python] + script), ("default", under_cli([], True, ""))]
    variants += [(p, under_cli(*PARTS[p])) for p in parts]
    workdir = tempfile.mkdtemp(prefix="msms_loop_parts_")
    res = interleaved(variants, args.rounds, lambda cmd: loop_time(cmd, workdir),
                      lambda k, t: "%s %.3f s" % (k, t))
    subprocess.run(["rm", "-rf", workdir])
    n = len(res["bare"])
    if n == 0:
        sys.exit("no complete round")
    print()
    print("%d rounds, %d steps; bare loop %.3f s (median)" % (n, args.steps, statistics.median(res["bare"])))
    print()
    print("| variant | loop ÷ bare | paired ÷ default | lower than default in |")
    print("|---|---|---|---|")
    for k, _ in variants[1:]:
        rb = [res[k][i] / res["bare"][i] for i in range(n)]
        line = "| %s | %.3f (%.3f-%.3f) |" % (k, statistics.median(rb), min(rb), max(rb))
        if k == "default":
            line += " - | - |"
        else:
            rd = [res[k][i] / res["default"][i] for i in range(n)]
            line += " %.3f (%.3f-%.3f) | %d of %d |" % (statistics.median(rd), min(rd), max(rd),
                                                       sum(x < 1 for x in rd), n)
        print(line)


if __name__ == "__main__":
    main()
