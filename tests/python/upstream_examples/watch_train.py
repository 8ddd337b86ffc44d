"""Adapted from upstream's example/watch/test_watch.py: five epochs of the
small model; in each, a 100x100 float tensor is watched with
msmemscope.watcher.watch(name="leaksStWatch") around the loss operator and
removed after it. Collection is configured with watch="start,end,full-content"
(upstream's placeholder operator names) unless the command line gives --watch
(upstream's CLI form runs this same script under
`msmemscope ... --watch=<mse_loss>,<mse_loss_backward>,full-content`).
The device is the CPU.

Argument "api": configure and start collection here (upstream's
test_watch.sh form); without it the script only watches (the CLI collects)."""
import sys

import torch
import msmemscope

from common_model import setup

API = len(sys.argv) > 1 and sys.argv[1] == "api"


def train():
    if API:
        msmemscope.config(device="cpu", data_format="csv", watch="start,end,full-content")
    model, criterion, optimizer, inputs, targets = setup("cpu")
    watched = torch.randn(100, 100, dtype=torch.float32).to("cpu")
    if API:
        msmemscope.start()
    for epoch in range(5):
        outputs = model(inputs)
        msmemscope.watcher.watch(watched, name="leaksStWatch")
        loss = criterion(outputs, targets)
        msmemscope.watcher.remove(watched)
        loss.requires_grad_(True)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    if API:
        msmemscope.stop()
    print("Test finished.")


if __name__ == "__main__":
    train()
