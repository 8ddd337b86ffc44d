# Upstream's smoke scripts test_decompose_cmd.py and test_inefficient_cmd.py
# (test/smoke/testfile/scripts), told again for the CPU: torchrun starts two
# ranks under the CLI; each trains a small convolutional model with DDP
# (gloo instead of hccl, no torch_npu amp) on its half of 100 random samples,
# one mstx "step start" range per sample between two mstx marks. A tensor
# made before training and never used again stands idle, as upstream's
# temporary_idleness case.
import os

import torch
from torch.utils.data import DataLoader, Dataset

import mstx


class Samples(Dataset):
    def __init__(self, n, in_shape, out_shape):
        self.x = [torch.rand(in_shape) for _ in range(n)]
        self.y = [torch.rand(out_shape).reshape(1, -1) for _ in range(n)]

    def __getitem__(self, i):
        return self.x[i], self.y[i]

    def __len__(self):
        return len(self.x)


class Small(torch.nn.Module):
    def __init__(self, cin=3, cout=12):
        super().__init__()
        self.conv1 = torch.nn.Conv2d(cin, cin, 3, padding=1)
        self.relu1 = torch.nn.ReLU()
        self.conv2 = torch.nn.Conv2d(cin, cout, 3, padding=1)

    def forward(self, x):
        x = self.conv2(self.relu1(self.conv1(x)))
        return x.reshape(x.shape[0], -1)


def main():
    rank = int(os.environ["LOCAL_RANK"])
    torch.distributed.init_process_group(backend="gloo", rank=rank)
    data = Samples(100, (3, 24, 24), (12, 24, 24))
    sampler = torch.utils.data.distributed.DistributedSampler(data)
    model = torch.nn.parallel.DistributedDataParallel(Small())
    loader = DataLoader(dataset=data, batch_size=1, sampler=sampler)
    loss_fn = torch.nn.MSELoss()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    idle = torch.randn(1000, 1000)  # noqa: F841 (made early, never used)
    mstx.mark("[mstx]: mstxMarkA :------training start----- ", None)
    rid = None
    for x, y in loader:
        if rid is not None:
            mstx.range_end(rid)
        rid = mstx.range_start("step start", None)
        loss = loss_fn(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
    mstx.mark("[mstx]: mstxMarkA :------training end-----", None)
    torch.distributed.destroy_process_group()


if __name__ == "__main__":
    main()
