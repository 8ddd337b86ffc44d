"""Python-side overhead of msmemscope against its peers, side by side:

  trace: a call-heavy script (recursive fib + small method calls), plain vs
         cProfile vs msmemscope events="traceback";
  stacks: the same script with a host allocation every 100 calls, plain vs
         cProfile vs msmemscope events="alloc,free" call_stack="python"
         (CPython 3.11: stacks read from the interpreter's frames) and
         msmemscope+shadow, the same with MSMEMSCOPE_PY_STACKS=shadow (a
         profile function's shadow stacks, as before 2026-12-04);
  torch: a CPU training loop (MLP, Adam), plain vs
         torch.profiler.profile(profile_memory=True) vs msmemscope
         events="launch" (operators + CPU tensor storage as PTA rows: what
         the peer records), and for information msmemscope+heap,
         events="alloc,free,launch", which adds every host-heap
         malloc/free of the process (no peer records those), and
         msmemscope+pystack, the same with call_stack="python:20" (every
         allocation with its Python stack).

Each measurement runs in its own fresh process (the profilers install hooks
that cannot be taken back). Usage: PYTHONPATH=<build>/python /usr/bin/python3
bench/python/bench_python.py [--repeat N] [--workload trace|stacks|torch]
(default: every workload)
"""
import argparse
import os
import subprocess
import sys
import tempfile
import time

HERE = os.path.abspath(__file__)


def fib(n):
    return n if n < 2 else fib(n - 1) + fib(n - 2)


class P:
    def __init__(self, v):
        self.v = v

    def get(self):
        return self.v


def trace_work():
    s = fib(22)
    for i in range(60000):
        s += P(i).get()
    return s


def stacks_work():
    s = fib(25)
    keep = []
    for i in range(300000):
        s += P(i).get()
        if i % 100 == 0:
            keep.append(bytearray(1000 + i % 7))
    return s


def torch_setup():
    import torch
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 10))
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    x, y = torch.randn(32, 64), torch.randn(32, 10)

    def work():
        for _ in range(100):
            opt.zero_grad()
            torch.nn.functional.mse_loss(model(x), y).backward()
            opt.step()
    work()  # warm up (lazy state, allocator)
    return work


def child(workload, tool, out):
    work = {"trace": trace_work, "stacks": stacks_work}.get(workload) or torch_setup()
    if tool.startswith("msmemscope"):
        import msmemscope
        if workload == "trace":
            events = "traceback"
        elif workload == "stacks":
            events = "alloc,free"
        else:
            events = "alloc,free,launch" if tool in ("msmemscope+heap", "msmemscope+pystack") else "launch"
        extra = {"call_stack": "python:20"} if tool in ("msmemscope+pystack", "msmemscope+shadow") or \
            workload == "stacks" else {}
        msmemscope.config(device="cpu", events=events, analysis="", output=out, **extra)
        msmemscope.start()
        t = time.perf_counter()
        work()
        dt = time.perf_counter() - t
        msmemscope.stop()
    elif tool == "cProfile":
        import cProfile
        pr = cProfile.Profile()
        pr.enable()
        t = time.perf_counter()
        work()
        dt = time.perf_counter() - t
        pr.disable()
    elif tool == "torch.profiler":
        import torch
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], profile_memory=True) as prof:
            t = time.perf_counter()
            work()
            dt = time.perf_counter() - t
        prof.key_averages()  # what a user of the profiler pays for too
    else:
        t = time.perf_counter()
        work()
        dt = time.perf_counter() - t
    print(f"RESULT {dt:.6f}", flush=True)


def measure(workload, tool, repeat):
    best = None
    for _ in range(repeat):
        with tempfile.TemporaryDirectory() as out:
            env = dict(os.environ)
            if tool == "msmemscope+shadow":
                env["MSMEMSCOPE_PY_STACKS"] = "shadow"
            p = subprocess.run([sys.executable, HERE, "--child", workload, tool, out], capture_output=True,
                               text=True, timeout=600, env=env)
            line = [l for l in p.stdout.splitlines() if l.startswith("RESULT ")]
            if p.returncode != 0 or not line:
                raise SystemExit(f"{workload}/{tool} failed:\n{p.stdout}\n{p.stderr}")
            dt = float(line[0].split()[1])
            best = dt if best is None else min(best, dt)
    return best


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--child", nargs=3)
    ap.add_argument("--workload", choices=("trace", "stacks", "torch"), help="only this workload")
    a = ap.parse_args()
    if a.child:
        child(*a.child)
        return
    print(f"{'workload':10} {'tool':16} {'time (s)':>10} {'overhead':>10}")
    for workload, tools in (("trace", ("plain", "cProfile", "msmemscope")),
                            ("stacks", ("plain", "cProfile", "msmemscope", "msmemscope+shadow")),
                            ("torch", ("plain", "torch.profiler", "msmemscope", "msmemscope+heap",
                                       "msmemscope+pystack"))):
        if a.workload and workload != a.workload:
            continue
        base = None
        for tool in tools:
            dt = measure(workload, tool, a.repeat)
            if base is None:
                base = dt
            print(f"{workload:10} {tool:16} {dt:10.4f} {dt / base:9.2f}x", flush=True)


if __name__ == "__main__":
    main()
