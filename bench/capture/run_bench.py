#!/usr/bin/env python3
"""Capture-path benchmark (issue 3 §8).

Runs bench_capture_workload bare, under msmemscope without stacks, with C
stacks (depth 32), and under heaptrack, in the same run; prints the ns added
per malloc/free pair for each, the ratios, and the end-to-end wall time of
each whole command; then 1, 2 and 4 threads under msmemscope (no stacks) to
show the event rate scales. --smoke: tiny N, no targets checked (CI).

--walkers: instead, compares the C stack walkers (MSMEMSCOPE_UNWIND=fp, the
default: frame pointers with libunwind as fallback; libunwind; libgcc) with
--call-stack=c:32: the ns added per pair over the run without stacks, and the
frames each recovers when malloc is called by the program itself, through
libc (strndup) and through libstdc++ (operator new), read from the symbolized
stacks of the CSV.

Usage: bench/capture/run_bench.py [--build build] [--pairs N] [--repeat N]
       [--walkers] [--smoke]
heaptrack (Debian's package) is measured when it is on PATH; without it its
column is left out.
"""
import csv
import argparse
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path


WALKERS = ("fp", "libunwind", "libgcc")
VIAS = ("direct", "libc", "libstdc++")


def stack_depths(out):
    """Per MALLOC row of the one dump CSV under out: (frames, has the loop
    that made the call, how many of the 21 deep() frames)."""
    files = sorted(Path(out).glob("msmemscope_*/device_cpu/dump/memscope_dump_*.csv"))
    if len(files) != 1:
        sys.exit(f"expected one dump CSV under {out}, found {files}")
    rows = []
    csv.field_size_limit(1 << 30)
    with open(files[0], newline="") as f:
        r = csv.reader(f)
        next(r)
        for rec in r:
            if rec[1] != "MALLOC" or not rec[11]:
                continue
            fr = rec[11].split("\n")
            names = [x.split("+", 1)[0] for x in fr]
            rows.append((len(fr), "loop" in names, names.count("deep")))
    return rows


def run(cmd, cwd, env=None):
    e = dict(os.environ)
    e.pop("LD_PRELOAD", None)
    if env:
        e.update(env)
    t0 = time.perf_counter()
    p = subprocess.run([str(c) for c in cmd], cwd=cwd, env=e, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if p.returncode != 0:
        sys.exit(f"failed ({p.returncode}): {' '.join(map(str, cmd))}\n{p.stdout}\n{p.stderr}")
    m = re.search(r"loop_ns=(\d+) cpu_ns=(\d+)", p.stdout)
    if not m:
        sys.exit(f"no loop_ns in the output of {cmd}:\n{p.stdout}\n{p.stderr}")
    dropped = re.findall(r"dropped: (\d+)", p.stdout)
    if any(int(d) for d in dropped):
        sys.exit(f"events dropped: {p.stdout}")
    return int(m.group(1)), wall, int(m.group(2))


def machine():
    cpu = "?"
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"{cpu}, {os.cpu_count()} CPUs, Linux {platform.release()}"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default=str(Path(__file__).resolve().parents[2] / "build"))
    ap.add_argument("--pairs", type=int, default=2_000_000, help="pairs per thread")
    ap.add_argument("--repeat", type=int, default=3, help="best of N for each configuration")
    ap.add_argument("--smoke", action="store_true")
    ap.add_argument("--workdir", default=None)
    ap.add_argument("--walkers", action="store_true", help="compare the C stack walkers")
    a = ap.parse_args()
    if a.smoke:
        a.pairs, a.repeat = 20000, 1
    build = Path(a.build).resolve()
    prog = build / "bench" / "bin" / "bench_capture_workload"
    cli = build / "bin" / "msmemscope"
    for f in (prog, cli):
        if not f.exists():
            sys.exit(f"build first: {f} is missing")
    work = Path(a.workdir) if a.workdir else Path(tempfile.mkdtemp(prefix="msms_bench_"))
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    heaptrack = shutil.which("heaptrack")
    base = ["--device=cpu", "--events=alloc,free", "--analysis="]

    def configs(threads):
        out = {
            "bare": [prog, threads, a.pairs],
            "msmemscope": [cli] + base + [f"--output={work}/o"] + ["--", prog, threads, a.pairs],
            "msmemscope c:32": [cli] + base + ["--call-stack=c:32", f"--output={work}/o"] + ["--", prog, threads, a.pairs],
        }
        if heaptrack:
            out["heaptrack"] = [heaptrack, "-o", f"{work}/ht/heaptrack.out", prog, threads, a.pairs]
        return out

    def measure(cmd):
        best = None
        for _ in range(a.repeat):
            shutil.rmtree(work / "o", ignore_errors=True)
            shutil.rmtree(work / "ht", ignore_errors=True)
            (work / "ht").mkdir()
            r = run(cmd, work)
            if best is None or r[0] < best[0]:
                best = r
        return best

    print(f"machine: {machine()}")
    print(f"workload: {a.pairs} malloc/free pairs per thread, sizes 16..4096, 20 frames deep; best of {a.repeat}")
    if a.walkers:
        walkers(a, prog, cli, base, work, measure)
        if not a.workdir:
            shutil.rmtree(work, ignore_errors=True)
        return
    res = {name: measure(cmd) for name, cmd in configs(1).items()}
    bare, bare_cpu = res["bare"][0], res["bare"][2]
    added = {k: max(0.0, (v[0] - bare) / a.pairs) for k, v in res.items()}
    # The target's own CPU time: what the hooks cost, without the time the
    # target waited for a CPU while the profiler's other process ran.
    added_cpu = {k: max(0.0, (v[2] - bare_cpu) / a.pairs) for k, v in res.items()}
    print(f"\n{'1 thread':<18}{'loop ms':>9}{'ns added/pair':>15}{'vs heaptrack':>14}"
          f"{'cpu ns added/pair':>19}{'vs heaptrack':>14}{'wall s':>9}")
    for k, (loop, wall, cpu) in res.items():
        ratio = f"{added[k] / added['heaptrack']:.3f}" if heaptrack and k != "bare" and added["heaptrack"] else "-"
        rc = f"{added_cpu[k] / added_cpu['heaptrack']:.3f}" if heaptrack and k != "bare" and added_cpu["heaptrack"] else "-"
        print(f"{k:<18}{loop / 1e6:>9.1f}{added[k]:>15.1f}{ratio:>14}{added_cpu[k]:>19.1f}{rc:>14}{wall:>9.2f}")
    print(f"\n{'threads':<10}{'loop ms':>10}{'Mevents/s':>11}{'vs 1 thread':>13}")
    rate1 = None
    for t in (1, 2, 4):
        loop, _, _ = measure(configs(t)["msmemscope"])
        rate = 2 * a.pairs * t / (loop / 1e9) / 1e6
        rate1 = rate1 or rate
        print(f"{t:<10}{loop / 1e6:>10.1f}{rate:>11.2f}{rate / rate1:>13.2f}")
    if not a.workdir:
        shutil.rmtree(work, ignore_errors=True)


def walkers(a, prog, cli, base, work, measure):
    def cmd(stacks, via, pairs):
        extra = ["--call-stack=c:32"] if stacks else []
        return [cli] + base + extra + [f"--output={work}/o", "--", prog, 1, pairs, via]

    # Cost: the bench loop (malloc/free called by the program, 20 frames deep).
    nostack = measure(cmd(False, "direct", a.pairs))
    print(f"\n{'walker (c:32)':<16}{'loop ms':>9}{'ns added/pair':>15}{'cpu ns added/pair':>19}   (over no stacks: {nostack[0] / 1e6:.1f} ms)")
    for w in WALKERS:
        os.environ["MSMEMSCOPE_UNWIND"] = w
        try:
            loop, _, cpu = measure(cmd(True, "direct", a.pairs))
        finally:
            del os.environ["MSMEMSCOPE_UNWIND"]
        print(f"{w:<16}{loop / 1e6:>9.1f}{(loop - nostack[0]) / a.pairs:>15.1f}{(cpu - nostack[2]) / a.pairs:>19.1f}")
    # Frames: a few thousand pairs per path, every MALLOC row's stack.
    pairs = min(a.pairs, 2000)
    print(f"\nframes recovered (c:32; {pairs} pairs; the full stack is 25 frames + the libc/libstdc++ ones):")
    print(f"{'walker':<12}{'called from':<12}{'frames min/median/max':>24}{'with loop()':>13}{'deep() of 21':>14}")
    for w in WALKERS:
        for via in VIAS:
            shutil.rmtree(work / "o", ignore_errors=True)
            run(cmd(True, via, pairs), work, {"MSMEMSCOPE_UNWIND": w})
            rows = stack_depths(work / "o")
            if not rows:
                sys.exit(f"no stacks in the CSV for {w} {via}")
            n = sorted(r[0] for r in rows)
            with_loop = sum(r[1] for r in rows) / len(rows)
            deep = sorted(r[2] for r in rows)[len(rows) // 2]
            print(f"{w:<12}{via:<12}{f'{n[0]}/{n[len(n) // 2]}/{n[-1]}':>24}{with_loop:>12.0%}{deep:>14}")


if __name__ == "__main__":
    main()
