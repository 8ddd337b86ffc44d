#!/usr/bin/python3
"""PyTorch CUDA training loop under msmemscope (cuda collector) vs. PyTorch's
own torch.cuda.memory._record_memory_history on the same loop.

    bench_torch_cuda.py run [--msmemscope build/bin/msmemscope] [--steps 200]
        times three runs of the loop (plain, under `msmemscope --device=cuda
        --analysis=leaks,decompose`, with _record_memory_history) and prints
        the overhead of each against the plain run; the msmemscope run has a
        planted leak (one tensor kept per step), which the leaks analysis must
        report.
    bench_torch_cuda.py loop [--steps N] [--leak] [--history]
        the workload itself (what `run` starts).

Steps are marked with an NVTX range named "step start" (torch.cuda.nvtx),
which the cuda collector receives through NVTX injection and the leaks
analysis uses as step boundaries. When the msmemscope agent is loaded, the
caching allocator's blocks are flushed as PTA rows before each step ends
(plugins/collectors/cuda/python/msmemscope_torch_cuda.py).

Needs a CUDA GPU; without one it says so and exits 0 without figures.
"""
import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(ROOT / "plugins" / "collectors" / "cuda" / "python"))


def loop(steps, leak, history):
    import torch
    if not torch.cuda.is_available():
        print("no CUDA device: nothing measured")
        return 0
    tracer = None
    try:
        import msmemscope_torch_cuda as tc
        tracer = tc.CudaAllocatorTracer()
        if not tracer.start():
            tracer = None
    except OSError:
        tracer = None  # not under msmemscope
    if history:
        torch.cuda.memory._record_memory_history(max_entries=1_000_000)
    dev = torch.device("cuda:0")
    model = torch.nn.Sequential(torch.nn.Linear(1024, 4096), torch.nn.ReLU(), torch.nn.Linear(4096, 1024)).to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    kept = []
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(steps):
        torch.cuda.nvtx.range_push("step start")
        x = torch.randn(256, 1024, device=dev)
        loss = model(x).square().mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        if leak:
            kept.append(torch.empty(1 << 20, dtype=torch.uint8, device=dev))  # the planted leak
        if tracer:
            tracer.flush()
        torch.cuda.nvtx.range_pop()
    torch.cuda.synchronize()
    elapsed = time.perf_counter() - t0
    if tracer:
        tracer.stop()
    if history:
        torch.cuda.memory._snapshot()
        torch.cuda.memory._record_memory_history(enabled=None)
    print(f"loop_seconds {elapsed:.6f}")
    return 0


def timed(cmd, env=None):
    p = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if p.returncode != 0:
        raise SystemExit(f"failed: {' '.join(cmd)}\n{p.stdout}\n{p.stderr}")
    for line in p.stdout.splitlines():
        if line.startswith("loop_seconds "):
            return float(line.split()[1]), p.stdout
        if line.startswith("no CUDA device"):
            return None, p.stdout
    raise SystemExit(f"no timing in output of {' '.join(cmd)}:\n{p.stdout}")


def run(args):
    me = [sys.executable, str(Path(__file__).resolve()), "loop", "--steps", str(args.steps)]
    plain, out = timed(me)
    if plain is None:
        print(out.strip())
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        prof, out = timed([args.msmemscope, "--device=cuda", "--analysis=leaks,decompose", f"--output={tmp}",
                           "--", *me, "--leak"])
        leak_reported = "leak" in out.lower()
    hist, _ = timed(me + ["--history"])
    print(f"plain loop:                 {plain:.3f} s")
    print(f"msmemscope (leaks,decomp.): {prof:.3f} s  overhead {100 * (prof / plain - 1):.1f}%  "
          f"planted leak reported: {leak_reported}")
    print(f"_record_memory_history:     {hist:.3f} s  overhead {100 * (hist / plain - 1):.1f}%")
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run")
    r.add_argument("--msmemscope", default=str(ROOT / "build" / "bin" / "msmemscope"))
    r.add_argument("--steps", type=int, default=200)
    lp = sub.add_parser("loop")
    lp.add_argument("--steps", type=int, default=200)
    lp.add_argument("--leak", action="store_true")
    lp.add_argument("--history", action="store_true")
    a = ap.parse_args()
    if a.cmd == "loop":
        return loop(a.steps, a.leak, a.history)
    return run(a)


if __name__ == "__main__":
    sys.exit(main())
