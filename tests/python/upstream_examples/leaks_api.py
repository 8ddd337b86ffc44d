"""Adapted from upstream's example/leaks/python/test_leaks.py: a training
loop that keeps one 1000x1000 float tensor per epoch (a simulated leak),
marking each epoch's end with msmemscope.step(). Collection is configured
with events alloc, free and launch, CSV under ./output. The device is the
CPU."""
import torch
import msmemscope

from common_model import one_epoch, setup

kept = []  # the "leaked" tensors


def train():
    msmemscope.config(device="cpu", events="alloc,free,launch", data_format="csv", output="./output")
    model, criterion, optimizer, inputs, targets = setup("cpu")
    msmemscope.start()
    for epoch in range(6):
        loss = one_epoch(model, criterion, optimizer, inputs, targets)
        kept.append(torch.randn(1000, 1000).to("cpu"))  # never freed: the leak
        if epoch % 2 == 0:
            print(f"Epoch {epoch} : loss = {loss.item():.4f}")
        msmemscope.step()
    msmemscope.stop()


if __name__ == "__main__":
    train()
    print("Test finished.")
