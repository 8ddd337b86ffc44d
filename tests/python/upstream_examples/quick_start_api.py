"""Adapted from upstream's example/example_api.py (docs/en/quick_start, the
"Python APIs" form): the same configuration (alloc, free, access and launch
events; kernel and op level; C and Python stacks; leak, inefficient-memory and
decomposition analyses; CSV under ./output), collecting around six epochs of
a small model. The device is the CPU."""
import msmemscope

from common_model import one_epoch, setup


def train():
    model, criterion, optimizer, inputs, targets = setup("cpu")
    for epoch in range(6):
        loss = one_epoch(model, criterion, optimizer, inputs, targets)
        if epoch % 2 == 0:
            print(f"Epoch {epoch} : loss = {loss.item():.4f}")


if __name__ == "__main__":
    msmemscope.config(
        device="cpu",
        events="alloc,free,access,launch",
        level="kernel,op",
        call_stack="c,python",
        analysis="leaks,inefficient,decompose",
        output="./output",
        data_format="csv",
    )
    msmemscope.start()
    train()
    print("Test finished.")
    msmemscope.stop()
