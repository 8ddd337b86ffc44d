"""(b) A CNN fed by a DataLoader with num_workers=2 and gradient
accumulation (2 batches per optimizer step), SGD with momentum; nothing is
kept across steps (no leak expected).

torch's own figures: parameter, gradient and optimizer-state (momentum)
bytes, and the bytes of one collated batch (images 16x3x32x32 float32 =
196,608 B, labels 16 int64), which the workers build in shared memory and
the main process maps.
"""
import os
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, Dataset

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import tiny_gpt  # noqa: E402  (only its byte-count helpers)

BATCH, ACCUM, BATCHES = 16, 2, 16


class Images(Dataset):
    def __len__(self):
        return BATCH * BATCHES

    def __getitem__(self, i):
        g = torch.Generator().manual_seed(i)
        return torch.randn(3, 32, 32, generator=g), i % 10


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.c1 = nn.Conv2d(3, 16, 3, padding=1)
        self.c2 = nn.Conv2d(16, 32, 3, padding=1)
        self.fc = nn.Linear(32 * 8 * 8, 10)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.c1(x)), 2)
        x = F.max_pool2d(F.relu(self.c2(x)), 2)
        return self.fc(x.flatten(1))


def main():
    torch.set_num_threads(1)
    torch.manual_seed(0)
    model = Net()
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    loader = DataLoader(Images(), batch_size=BATCH, num_workers=2)
    batch_bytes = 0
    steps = 0
    for i, (x, y) in enumerate(loader):
        batch_bytes = tiny_gpt.tensor_bytes(x) + tiny_gpt.tensor_bytes(y)
        loss = F.cross_entropy(model(x), y) / ACCUM
        loss.backward()
        if (i + 1) % ACCUM == 0:
            opt.step()
            steps += 1
            grads = tiny_gpt.grad_bytes(model)
            opt.zero_grad(set_to_none=False)   # gradients stay allocated (zeroed)
    tiny_gpt.report("steps", steps)
    tiny_gpt.report("parameter_bytes", tiny_gpt.param_bytes(model))
    tiny_gpt.report("gradient_bytes", grads)
    tiny_gpt.report("optimizer_state_bytes", tiny_gpt.optimizer_state_bytes(opt))
    tiny_gpt.report("batch_bytes", batch_bytes)
    tiny_gpt.report("kept_per_step_bytes", 0)
    tiny_gpt.report("live_tensor_bytes", tiny_gpt.live_tensor_bytes())
    print("cnn_loader: %d optimizer steps over %d batches" % (steps, BATCHES))
    return model, opt


if __name__ == "__main__":
    state = main()  # what main() built stays alive until the exit, where the profilers' "at the end" is measured
