"""Adapted from upstream's docs/zh/best_practices §2 (step comparison; the
example/compare README's baseline-against-leak case): a training script
collected twice under `msmemscope --events=alloc,free --level=kernel
--steps=N`; each optimizer step is a step. Step 5 also makes a temporary
buffer (4096 floats) that the other steps do not, so comparing step 2 with
step 5 shows that one extra allocation. The device is the CPU."""
import torch

from common_model import one_epoch, setup

model, criterion, optimizer, inputs, targets = setup("cpu")


def step5_buffer():
    extra = torch.ones(4096)  # the step-5-only buffer
    extra.add_(1)
    del extra


for step in range(1, 7):
    # (on both sides of the optimizer step, so it is in step 5 whether a
    # step's events are counted up to its optimizer step or from it)
    if step == 5:
        step5_buffer()
    one_epoch(model, criterion, optimizer, inputs, targets)
    if step == 5:
        step5_buffer()
print("Test finished.")
