#!/usr/bin/env python3
"""Scale benchmark (issue #18 item 7).

Runs bench_capture_workload (one thread, malloc/free pairs 20 frames deep)
at growing event counts (default 1M, 4M and 16M events = 0.5M, 2M and 8M
pairs) under msmemscope with the csv sink, the db sink and --aggregate (when
this build has it), and under heaptrack, all in the same run, one after the
other. For each it prints the whole command's wall time, the peak RSS of the
largest process of the command's tree (getrusage of the waited child), and
the size of what it wrote; then ratios to heaptrack and, per mode, the time
and memory per million events relative to the smallest size (1.00 = linear).

Each output is deleted right after it is measured (a 16M-event CSV with
stacks would be ~40 GB: --call-stack is off unless asked for). Runs each
configuration once: on a shared machine, note the load it prints.

--smoke: 20000 events, no heaptrack needed (CI).

Usage: bench/scale/run_scale.py [--build build] [--events 1000000,4000000,...]
       [--modes csv,db,aggregate,heaptrack] [--call-stack c:32] [--smoke]
Needs heaptrack (Debian's package) on PATH unless --smoke.
"""
import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

MODES = ("csv", "db", "aggregate", "heaptrack")


def tree_size(path):
    total = 0
    for root, _, files in os.walk(path):
        for f in files:
            try:
                total += os.lstat(os.path.join(root, f)).st_size
            except OSError:
                pass
    return total


def run(cmd, cwd):
    """(wall s, peak RSS MiB of the largest process waited for, CPU s of
    the whole tree (user + system), output)."""
    env = dict(os.environ)
    env.pop("LD_PRELOAD", None)
    t0 = time.perf_counter()
    p = subprocess.Popen([str(c) for c in cmd], cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    out = p.stdout.read()
    _, status, ru = os.wait4(p.pid, 0)
    wall = time.perf_counter() - t0
    rc = os.waitstatus_to_exitcode(status)
    if rc != 0:
        sys.exit(f"failed ({rc}): {' '.join(map(str, cmd))}\n{out.decode(errors='replace')[-3000:]}")
    return wall, ru.ru_maxrss / 1024.0, ru.ru_utime + ru.ru_stime, out.decode(errors="replace")


def load():
    try:
        return open("/proc/loadavg").read().split()[0]
    except OSError:
        return "?"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default=str(Path(__file__).resolve().parents[2] / "build"))
    ap.add_argument("--events", default="1000000,4000000,16000000", help="comma list of event counts")
    ap.add_argument("--modes", default=",".join(MODES), help=f"comma list of {', '.join(MODES)}")
    ap.add_argument("--call-stack", default="", help="e.g. c:32 (default: none)")
    ap.add_argument("--workdir", default=None)
    ap.add_argument("--smoke", action="store_true")
    a = ap.parse_args()
    if a.smoke:
        a.events = "20000"
    sizes = [int(x) for x in a.events.split(",") if x]
    modes = [m for m in a.modes.split(",") if m]
    for m in modes:
        if m not in MODES:
            sys.exit(f"unknown mode {m!r} (known: {', '.join(MODES)})")
    build = Path(a.build).resolve()
    prog = build / "bench" / "bin" / "bench_capture_workload"
    cli = build / "bin" / "msmemscope"
    for f in (prog, cli):
        if not f.exists():
            sys.exit(f"build first: {f} is missing")
    heaptrack = shutil.which("heaptrack")
    if "heaptrack" in modes and not heaptrack:
        if not a.smoke:
            sys.exit("heaptrack is not installed (apt-get install heaptrack), or leave it out with --modes")
        modes.remove("heaptrack")
    helptext = subprocess.run([str(cli), "--help"], capture_output=True, text=True).stdout
    has_aggregate = "--aggregate" in helptext
    work = Path(a.workdir) if a.workdir else Path(tempfile.mkdtemp(prefix="msms_scale_"))
    work.mkdir(parents=True, exist_ok=True)
    base = ["--device=cpu", "--events=alloc,free", "--analysis="]
    if a.call_stack:
        base.append(f"--call-stack={a.call_stack}")

    def command(mode, pairs, out):
        if mode == "heaptrack":
            return [heaptrack, "-o", out / "heaptrack.out", prog, 1, pairs]
        if mode == "aggregate":
            return [cli] + base + ["--aggregate", f"--output={out}", "--", prog, 1, pairs]
        return [cli] + base + [f"--data-format={mode}", f"--output={out}", "--", prog, 1, pairs]

    print(f"machine: {os.cpu_count()} CPUs; workload: 1 thread, malloc/free pairs 20 frames deep; "
          f"stacks: {a.call_stack or 'none'}; each configuration run once")
    res = {}
    for n in sizes:
        pairs = n // 2
        st = shutil.disk_usage(work)
        print(f"\n{n / 1e6:g}M events ({pairs} pairs): load {load()}, {st.free / 2**30:.1f} GiB free in {work}",
              flush=True)
        for mode in ["bare"] + modes:
            out = work / f"{mode}_{n}"
            shutil.rmtree(out, ignore_errors=True)
            out.mkdir()
            if mode == "aggregate" and not has_aggregate:
                res[(mode, n)] = None
                print(f"  {mode:<10} n/a (this build has no --aggregate)")
                continue
            cmd = [prog, 1, pairs] if mode == "bare" else command(mode, pairs, out)
            l0 = load()
            wall, rss, cpu, _ = run(cmd, work)
            size = tree_size(out)
            shutil.rmtree(out, ignore_errors=True)
            res[(mode, n)] = (wall, rss, size, cpu)
            print(f"  {mode:<10} {wall:8.2f} s  {cpu:8.2f} CPU s  {rss:8.1f} MiB peak RSS  "
                  f"{size / 2**20:9.1f} MiB written  (load {l0})", flush=True)

    print("\n| events | mode | wall s | vs heaptrack | CPU s | vs heaptrack | peak RSS MiB | vs heaptrack | "
          "written MiB | wall s per M events (vs smallest) | RSS per M events (vs smallest) |")
    print("|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for n in sizes:
        ht = res.get(("heaptrack", n))
        for mode in ["bare"] + modes:
            r = res.get((mode, n))
            if r is None:
                print(f"| {n / 1e6:g}M | {mode} | n/a | | | | | | | | |")
                continue
            wall, rss, size, cpu = r
            first = res.get((mode, sizes[0]))
            per = wall / n * 1e6
            per0 = first[0] / sizes[0] * 1e6
            rper = rss / n * 1e6
            rper0 = first[1] / sizes[0] * 1e6
            tr = f"{wall / ht[0]:.2f}" if ht and mode != "heaptrack" else "-"
            mr = f"{rss / ht[1]:.2f}" if ht and mode != "heaptrack" else "-"
            cr = f"{cpu / ht[3]:.2f}" if ht and mode != "heaptrack" and ht[3] else "-"
            print(f"| {n / 1e6:g}M | {mode} | {wall:.2f} | {tr} | {cpu:.2f} | {cr} | {rss:.1f} | {mr} | "
                  f"{size / 2**20:.1f} | "
                  f"{per:.3f} ({per / per0:.2f}) | {rper:.2f} ({rper / rper0:.2f}) |")
    if not a.workdir:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
