#!/usr/bin/env python3
"""Sink throughput: records one capture of a malloc/free workload, then
replays it through each sink and prints rows per second and the host's peak
RSS (of the replaying msmemscope process).

    bench/sinks/bench_sinks.py --build build [--pairs 2000000] [--work DIR]

The workload is tests/programs/sinks/alloc_loop.c (N malloc/free pairs, a
window of live blocks) under `msmemscope --save-capture=true`; every run is
`msmemscope --replay=<capture> --analysis= --data-format=...`.
"end-to-end rows/s" includes reading the capture, ordering and the host
pipeline (so it is a lower bound for the sink); for trace and html, which run
beside the csv sink, "sink rows/s" = rows / (time - csv time) is the cost of
that sink alone. CPU s is user+sys of the replay (getrusage of the child),
which a shared machine's load changes far less than the wall time; the sink
rates are computed from it.
"""
import argparse
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

RUNS = [
    ("csv", ["--data-format=csv"]),
    ("db", ["--data-format=db"]),
    ("csv+trace", ["--data-format=csv", "--sinks=trace"]),
    # every counter written (the default budget of 2,000,000 trace events
    # downsamples this capture's 8 M counters): the trace sink's whole cost
    ("csv+trace-all", ["--data-format=csv", "--sinks=trace", "--plugin-option=trace.max_events=1000000000"]),
    ("csv+html", ["--data-format=csv", "--sinks=html"]),
]


def timed(cmd):
    """Runs cmd with its own rusage: (wall seconds, max RSS MiB, stdout, CPU seconds)."""
    t0 = time.perf_counter()
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    out = p.stdout.read().decode()
    _, status, ru = os.wait4(p.pid, 0)
    dt = time.perf_counter() - t0
    if os.waitstatus_to_exitcode(status) != 0:
        sys.exit(f"failed: {' '.join(map(str, cmd))}\n{out}")
    return dt, ru.ru_maxrss / 1024.0, out, ru.ru_utime + ru.ru_stime


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default="build", help="the CMake build tree")
    ap.add_argument("--pairs", type=int, default=2000000, help="malloc/free pairs in the workload")
    ap.add_argument("--work", default=None, help="scratch folder (default: <build>/bench/sinks/work)")
    args = ap.parse_args()
    build = Path(args.build).resolve()
    cli = build / "bin" / "msmemscope"
    prog = build / "tests" / "bin" / "sinks_alloc_loop"
    for need in (cli, prog):
        if not need.exists():
            sys.exit(f"missing {need}: build the project first")
    work = Path(args.work) if args.work else build / "bench" / "sinks" / "work"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)

    base = [str(cli), "--device=cpu", "--analysis="]
    dt, rss, _, _ = timed(base + ["--events=alloc,free", "--save-capture=true", "--data-format=csv",
                               f"--output={work / 'record'}", "--", str(prog), str(args.pairs)])
    capture = next((work / "record").glob("msmemscope_*/capture_*.msmcap"))
    print(f"capture: {capture} ({capture.stat().st_size / 2**20:.1f} MiB), recorded in {dt:.2f} s")

    results = []
    for name, opts in RUNS:
        out_dir = work / name.replace("+", "_and_")  # '+' is not allowed in --output (msMemScope's rule)
        dt, rss, out, cpu = timed(base + opts + [f"--replay={capture}", f"--output={out_dir}"])
        events = next(int(l.split()[1].rstrip(",")) for l in out.splitlines() if l.strip().startswith("events:"))
        size = sum(f.stat().st_size for f in out_dir.rglob("*") if f.is_file() and f.suffix in (".csv", ".db", ".json", ".html"))
        results.append((name, dt, rss, events, size, cpu))

    c0 = results[0][5]
    print(f"{'sink':<22}{'rows':>10}{'time s':>9}{'CPU s':>8}{'end-to-end rows/s':>19}{'sink rows/s (CPU)':>19}"
          f"{'host RSS MiB':>14}{'output MiB':>12}")
    for name, dt, rss, events, size, cpu in results:
        sink_rate = f"{events / (cpu - c0):,.0f}" if name.startswith("csv+") and cpu > c0 else "-"
        print(f"{name:<22}{events:>10}{dt:>9.2f}{cpu:>8.2f}{events / dt:>19,.0f}{sink_rate:>19}{rss:>14.1f}"
              f"{size / 2**20:>12.1f}")


if __name__ == "__main__":
    main()
