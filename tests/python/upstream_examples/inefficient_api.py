"""Adapted from upstream's example/inefficient/test_inefficient.py: analysis
"inefficient" (which turns on the alloc, free, access and launch events it
needs) around six epochs of the small model. The device is the CPU."""
import msmemscope

from common_model import one_epoch, setup


def train():
    msmemscope.config(device="cpu", analysis="inefficient", data_format="csv", output="./output")
    model, criterion, optimizer, inputs, targets = setup("cpu")
    msmemscope.start()
    for epoch in range(6):
        loss = one_epoch(model, criterion, optimizer, inputs, targets)
        if epoch % 2 == 0:
            print(f"Epoch {epoch} : loss = {loss.item():.4f}")
    msmemscope.stop()


if __name__ == "__main__":
    train()
    print("Test finished.")
