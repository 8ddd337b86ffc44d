"""Shared-memory tensors (issue #27 item 5), a plain script to run under the CLI.

argv[1]:
  "keep" / "drop": a DataLoader with 2 worker processes over a TensorDataset
    of 8 batches of 48 x 1024 float32 (196,608 bytes each); a small model
    trained on each batch (SGD: each optimizer step ends a step). "keep"
    keeps every batch in a list (a leak), "drop" lets each go.
  "share": one tensor of 256 x 1024 float32 (1 MiB) moved to shared memory
    with share_memory_(), sent twice to a child process, which holds both.

Batches arrive in order: the worker making batch b waits until the main
process holds batch b - 1 (an Event per batch, set in the loop), so no
batch is received early and kept waiting for its turn.
"""
import multiprocessing
import sys

import torch

BATCH, WIDTH, BATCHES = 48, 1024, 8
mode = sys.argv[1] if len(sys.argv) > 1 else "drop"


class InOrder(torch.utils.data.Dataset):
    def __init__(self, data, events):
        self.data, self.events = data, events

    def __len__(self):
        return len(self.data)

    def __getitem__(self, i):
        b = i // BATCH
        if i % BATCH == 0 and b > 0:
            assert self.events[b - 1].wait(120), f"batch {b - 1} never arrived"
        return self.data[i]


def loader_run(keep):
    torch.manual_seed(0)
    ctx = multiprocessing.get_context("fork")
    events = [ctx.Event() for _ in range(BATCHES)]
    data = InOrder(torch.randn(BATCH * BATCHES, WIDTH), events)
    loader = torch.utils.data.DataLoader(data, batch_size=BATCH, num_workers=2,
                                         multiprocessing_context=ctx)
    model = torch.nn.Linear(WIDTH, 4)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    kept = []
    for b, x in enumerate(loader):  # LOADER_LINE
        events[b].set()
        loss = model(x).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        if keep:
            kept.append(x)
    print("batches", b + 1, "kept", len(kept), "bytes", x.numel() * x.element_size())


def receive_twice(q, done):
    a = q.get()  # RECEIVE_LINE
    b = q.get()
    print("received", a.numel() * a.element_size(), "same storage", a.data_ptr() == b.data_ptr())
    done.set()


def share_run():
    t = torch.ones(256, WIDTH)
    t.share_memory_()  # SHARE_LINE
    assert t.is_shared()
    print("shared", t.numel() * t.element_size())
    # another process receives it twice: one mapping there (torch's cache)
    ctx = multiprocessing.get_context("fork")
    q, done = ctx.SimpleQueue(), ctx.Event()
    child = ctx.Process(target=receive_twice, args=(q, done))
    child.start()
    q.put(t)
    q.put(t)
    assert done.wait(120), "the child never received the tensor"
    child.join()
    del t


if mode == "share":
    share_run()
else:
    loader_run(mode == "keep")
