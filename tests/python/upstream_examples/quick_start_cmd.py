"""Adapted from upstream's example/example_cmd.py (docs/en/quick_start, the
"CLI" form): the same six epochs as quick_start_api.py with no msmemscope
call at all; the command line chooses what is collected. The device is the
CPU."""
from common_model import one_epoch, setup


def main():
    model, criterion, optimizer, inputs, targets = setup("cpu")
    for epoch in range(6):
        loss = one_epoch(model, criterion, optimizer, inputs, targets)
        if epoch % 2 == 0:
            print(f"Epoch {epoch} : loss = {loss.item():.4f}")
    print("Test finished.")


if __name__ == "__main__":
    main()
