"""Adapted from upstream's example/decompose/test_decompose.py: analysis
"decompose", and the whole training loop inside describe.describer(owner=
"train"), so every block allocated there is labelled with that owner. The
device is the CPU."""
import msmemscope
import msmemscope.describe as describe

from common_model import one_epoch, setup


def train():
    msmemscope.config(device="cpu", analysis="decompose", data_format="csv", output="./output")
    model, criterion, optimizer, inputs, targets = setup("cpu")
    msmemscope.start()
    with describe.describer(owner="train"):
        for epoch in range(6):
            loss = one_epoch(model, criterion, optimizer, inputs, targets)
            if epoch % 2 == 0:
                print(f"Epoch {epoch} : loss = {loss.item():.4f}")
    msmemscope.stop()


if __name__ == "__main__":
    train()
    print("Test finished.")
