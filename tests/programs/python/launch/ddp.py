"""Two-rank DDP training on gloo, started by torchrun below a shell script
(tests/python/test_python_any_launch.py)."""
import os
import torch
import torch.distributed as dist
dist.init_process_group("gloo")
rank = dist.get_rank()
torch.manual_seed(0)
model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(256, 256))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
for step in range(5):
    loss = model(torch.ones(32, 256)).sum()
    opt.zero_grad()
    loss.backward()
    opt.step()
# One write of the whole line: print("rank", rank, "done") under python -u
# writes each piece, and torchrun's --tee interleaved two ranks' pieces
# ("[default1]:rank [default0]:rank 0 done").
os.write(1, ("rank %d done\n" % rank).encode())
dist.destroy_process_group()
