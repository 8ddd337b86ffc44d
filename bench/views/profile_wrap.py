"""Runs one of the view scripts in-process under
torch.profiler.profile(activities=[CPU], profile_memory=True, with_stack=True)
(runpy, as `python3 script.py` would) and prints what the profiler says
about memory, as `profiler: <name> = <int>` lines for run.py:

- ops_self_alloc_bytes: the sum over key_averages() of the positive
  self_cpu_memory_usage (bytes an operator allocated and did not free
  itself, per operator name, summed over calls); ops_self_net_bytes: the
  same sum with the negative ones (frees) included;
- alloc_bytes / free_bytes / allocs: kineto's "[memory]" events (one per
  allocation and free the CPU allocator reported while profiling; torch
  1.13's exported chrome trace leaves them out);
- peak_bytes / final_bytes: the largest and the last running sum of those
  events (bytes live that were allocated under the profiler);
- alloc_<N>_count: how many allocations of exactly N bytes (N from
  --count-size, e.g. one DataLoader batch).

Usage: profile_wrap.py [--count-size N] SCRIPT [ARGS...]
"""
import argparse
import os
import runpy
import sys

from torch.autograd import DeviceType
from torch.profiler import ProfilerActivity, profile


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--count-size", type=int, action="append", default=[])
    ap.add_argument("script")
    ap.add_argument("args", nargs=argparse.REMAINDER)
    a = ap.parse_args()
    sys.argv = [a.script] + a.args
    sys.path.insert(0, os.path.dirname(os.path.abspath(a.script)))
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True, with_stack=True) as prof:
        kept = runpy.run_path(a.script, run_name="__main__")  # its objects stay alive, as at exit
    ka = prof.key_averages()
    pos = sum(e.self_cpu_memory_usage for e in ka if e.self_cpu_memory_usage > 0)
    net = sum(e.self_cpu_memory_usage for e in ka)
    # every allocation and free the CPU allocator reported while profiling
    # (kineto's "[memory]" events; torch 1.13's chrome trace leaves them out)
    mem = [e for e in prof.profiler.kineto_results.events()
           if e.name() == "[memory]" and e.device_type() == DeviceType.CPU]
    mem.sort(key=lambda e: e.start_us())
    allocs = [e.nbytes() for e in mem if e.nbytes() > 0]
    frees = [-e.nbytes() for e in mem if e.nbytes() < 0]
    out = {"ops_self_alloc_bytes": pos, "ops_self_net_bytes": net, "allocs": len(allocs),
           "alloc_bytes": sum(allocs), "free_bytes": sum(frees)}
    live = peak = 0
    for e in mem:
        live += e.nbytes()
        peak = max(peak, live)
    out["peak_bytes"], out["final_bytes"] = peak, live
    ops = [e for e in prof.profiler.kineto_results.events() if e.name() != "[memory]" and e.duration_us() >= 0]
    for n in a.count_size:
        out["alloc_%d_count" % n] = sum(1 for b in allocs if b == n)
        # the innermost operator running when each allocation of that size was made
        where = {}
        for m in mem:
            if m.nbytes() != n:
                continue
            t = m.start_us()
            inner = [o for o in ops if o.start_us() <= t <= o.start_us() + o.duration_us()
                     and o.start_thread_id() == m.start_thread_id()]
            name = min(inner, key=lambda o: o.duration_us()).name() if inner else "(no operator)"
            where[name] = where.get(name, 0) + 1
        print("profiler-size: %d B allocated by %s" % (n, ", ".join("%s x%d" % kv for kv in sorted(where.items()))))
    del kept
    for k, v in out.items():
        print("profiler: %s = %d" % (k, v), flush=True)
    top = sorted(ka, key=lambda e: -e.self_cpu_memory_usage)[:5]
    for e in top:
        print("profiler-top: %-40s self %12d B  total %12d B  calls %d"
              % (e.key, e.self_cpu_memory_usage, e.cpu_memory_usage, e.count))


if __name__ == "__main__":
    main()
