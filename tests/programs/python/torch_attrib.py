"""A CPU training loop for attribution tests: a model with a custom autograd
Function, a DataLoader with worker processes, SGD, 8 steps; optionally keeps
one 128 KiB tensor per step (a leak) from keep_one().

argv: output folder, "api" (config/start/step/stop) or "plain" (no msmemscope
call: run it under the CLI), "leak" or "noleak", workers (default 2).
"""
import multiprocessing
import os
import sys

import torch

out = sys.argv[1] if len(sys.argv) > 1 else "out"
mode = sys.argv[2] if len(sys.argv) > 2 else "api"
leak = (sys.argv[3] if len(sys.argv) > 3 else "leak") == "leak"
workers = int(sys.argv[4]) if len(sys.argv) > 4 else 2

if mode == "api":
    import msmemscope
    msmemscope.config(device="cpu", events=os.environ.get("ATTRIB_EVENTS", "alloc,free,launch"), call_stack="python:30",
                      analysis="leaks,decompose", output=out, sinks=os.environ.get("ATTRIB_SINKS", ""))


class Square(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * x

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return grad * 2.0 * x  # CUSTOM_BACKWARD_LINE


class Data(torch.utils.data.Dataset):
    # Batches arrive in order: the worker making batch b waits until the
    # main process holds batch b - 1, so the DataLoader never keeps an early
    # batch (a shared-memory block, #27 item 5) for a step beyond its own.
    def __init__(self, events):
        self.events = events

    def __len__(self):
        return 64

    def __getitem__(self, i):
        if i % 8 == 0 and i >= 8:
            assert self.events[i // 8 - 1].wait(120), "a batch never arrived"
        g = torch.Generator().manual_seed(i)
        return torch.randn(64, generator=g), torch.randn(8, generator=g)


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.a = torch.nn.Linear(64, 128)
        self.b = torch.nn.Linear(128, 8)

    def forward(self, x):
        return self.b(Square.apply(self.a(x)))


kept = []


def keep_one():
    kept.append(torch.ones(32 * 1024))  # KEEP_LINE: 128 KiB per step


def main():
    torch.manual_seed(0)
    model = Net()
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    events = [multiprocessing.get_context("fork").Event() for _ in range(8)]
    loader = torch.utils.data.DataLoader(Data(events), batch_size=8, num_workers=workers,
                                         multiprocessing_context="fork" if workers else None)
    if mode == "api":
        msmemscope.start()
    for b, (x, y) in enumerate(loader):
        events[b].set()
        loss = torch.nn.functional.mse_loss(model(x), y)
        opt.zero_grad()
        loss.backward()  # BACKWARD_LINE
        opt.step()  # STEP_LINE
        if leak:
            keep_one()
        if mode == "api":
            msmemscope.step()
    if mode == "api":
        msmemscope.stop()
    print("trained", len(kept))


if __name__ == "__main__":
    main()
