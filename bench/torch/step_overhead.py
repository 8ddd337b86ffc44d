#!/usr/bin/env python3
"""Where in the training loop msmemscope's cost is (issue #30 item 1): the
GPT-style loop of train_gpt.py with --step-times, bare and under the msmemscope
CLI (--device=cpu --call-stack=python --analysis=leaks,decompose, the default
CSV), interleaved over N rounds; with --stop-host also under the CLI with the
whole host stopped (SIGSTOP to the CLI and its pipeline worker, every process
of the run but the program) from the program's start until its loop ended,
so that what the host's running beside the program costs the loop shows.

Prints, per range of steps, the median step time of each variant (the median
over the rounds of each round's mean over the range), the added ms per step
and the ratio to bare; then the whole loop's ratio per round (paired with
that round's bare run) as median and range.

Usage: bench/torch/step_overhead.py [--rounds 8] [--steps 40] [--stop-host]
       [--msmemscope build/bin/msmemscope] [--python /usr/bin/python3] [-- extra msmemscope options]
"""
import argparse
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time

from rounds import interleaved

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
SCRIPT = os.path.join(HERE, "train_gpt.py")
MSMS_COMMON = ["--device=cpu", "--call-stack=python", "--analysis=leaks,decompose"]


def children(pid):
    """Direct children of pid (every thread's list)."""
    out = []
    try:
        for tid in os.listdir("/proc/%d/task" % pid):
            with open("/proc/%d/task/%s/children" % (pid, tid)) as f:
                out += [int(x) for x in f.read().split()]
    except OSError:
        pass
    return out


def cmdline(pid):
    try:
        with open("/proc/%d/cmdline" % pid, "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def parse(text):
    steps = loop = None
    for line in text.splitlines():
        if line.startswith("steps_ms="):
            steps = [float(v) for v in line.split("=", 1)[1].split(",")]
        elif line.startswith("loop_s="):
            loop = float(line.split()[0].split("=", 1)[1])
    return steps, loop


def run(cmd, stop_host, workdir):
    out = tempfile.NamedTemporaryFile(mode="w+", dir=workdir, delete=False)
    d = tempfile.mkdtemp(prefix="out_", dir=workdir)
    p = subprocess.Popen(cmd(d), cwd=d, stdout=out, stderr=subprocess.DEVNULL, start_new_session=True)
    stopped = []
    if stop_host:
        # The program and the pipeline worker are the CLI's children; stop
        # every process of the run but the program, once both exist.
        deadline = time.time() + 60
        prog, others = None, []
        while time.time() < deadline and p.poll() is None:
            kids = children(p.pid)
            prog = next((k for k in kids if SCRIPT in cmdline(k)), None)
            others = [k for k in kids if k != prog]
            if prog and others:
                break
        if prog and others:
            victims = [p.pid] + others
            for k in list(others):
                victims += children(k)
            for v in victims:
                try:
                    os.kill(v, signal.SIGSTOP)
                    stopped.append(v)
                except OSError:
                    pass
            # until the program printed its loop (or ended)
            while os.path.exists("/proc/%d" % prog):
                with open(out.name) as f:
                    if "loop_s=" in f.read():
                        break
                time.sleep(0.005)
        for v in stopped:
            try:
                os.kill(v, signal.SIGCONT)
            except OSError:
                pass
    p.wait()
    with open(out.name) as f:
        text = f.read()
    os.unlink(out.name)
    subprocess.run(["rm", "-rf", d])
    steps, loop = parse(text)
    if p.returncode != 0 or steps is None:
        sys.stderr.write("FAILED (%s): %s\n" % (p.returncode, " ".join(cmd(d))))
        return None
    if stop_host and not stopped:
        sys.stderr.write("could not stop the host (its processes were not found)\n")
        return None
    return steps, loop


def ranges(n):
    edges = [0, 1, 5, 10, 20, 40, 80, 160, 320]
    out = [(a, min(b, n)) for a, b in zip(edges, edges[1:]) if a < n]
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=8)
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--stop-host", action="store_true", help="also run with the host stopped during the program")
    ap.add_argument("--msmemscope", default=os.path.join(ROOT, "build", "bin", "msmemscope"))
    ap.add_argument("--python", default="/usr/bin/python3")
    ap.add_argument("extra", nargs="*", help="more msmemscope options (after --)")
    args = ap.parse_args()
    prog = [args.python, SCRIPT, "--steps", str(args.steps), "--step-times"]
    msms = lambda d: [args.msmemscope] + MSMS_COMMON + args.extra + ["--output-path=" + d, "--"] + prog
    vs = [("bare", lambda d: prog, False), ("msmemscope", msms, False)]
    if args.stop_host:
        vs.append(("host stopped", msms, True))
    workdir = tempfile.mkdtemp(prefix="msms_step_overhead_")
    res = interleaved([(k, (cmd, stop)) for k, cmd, stop in vs], args.rounds,
                      lambda how: run(how[0], how[1], workdir), lambda k, r: "%s loop %.3f s" % (k, r[1]))
    subprocess.run(["rm", "-rf", workdir])
    n = len(res["bare"])
    if n == 0:
        sys.exit("no complete round")
    print()
    print("%d rounds, %d steps; per step, ms: the median over the rounds of the range's mean" % (n, args.steps))
    print()
    head = "| steps | bare |" + "".join(" %s | added | ÷ bare |" % k for k, _, _ in vs[1:])
    print(head)
    print("|---|---:|" + "---:|---:|---:|" * (len(vs) - 1))
    for a, b in ranges(args.steps):
        med = {k: statistics.median(sum(s[a:b]) / (b - a) for s, _ in res[k]) for k, _, _ in vs}
        row = "| %d-%d | %.1f |" % (a + 1, b, med["bare"])
        for k, _, _ in vs[1:]:
            row += " %.1f | %+.1f | %.3f |" % (med[k], med[k] - med["bare"], med[k] / med["bare"])
        print(row)
    print()
    for k, _, _ in vs[1:]:
        rs = [res[k][i][1] / res["bare"][i][1] for i in range(n)]
        print("%s: loop ÷ bare %.3f (%.3f-%.3f), per round: %s" %
              (k, statistics.median(rs), min(rs), max(rs), " ".join("%.3f" % x for x in rs)))
    if args.stop_host:
        d = [res["msmemscope"][i][1] / res["bare"][i][1] - res["host stopped"][i][1] / res["bare"][i][1]
             for i in range(n)]
        print("host running minus host stopped, paired: median %+.3f; stopped lower in %d of %d rounds" %
              (statistics.median(d), sum(x > 0 for x in d), n))


if __name__ == "__main__":
    main()
