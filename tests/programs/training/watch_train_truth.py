"""A training loop whose watched tensor's bytes are known (tests/python/
test_watch_truth.py): Linear(8, 4) with weights 0.5 and bias 0.25 and a
learning rate of 0, so that in step s (1..3) aten::addmm's output is 16x4
floats of 4*s + 0.25; the loop then doubles it in place (aten::mul_) before
aten::mse_loss."""
import torch

torch.set_num_threads(1)
model = torch.nn.Linear(8, 4)
with torch.no_grad():
    model.weight.fill_(0.5)
    model.bias.fill_(0.25)
opt = torch.optim.SGD(model.parameters(), lr=0.0)
target = torch.zeros(16, 4)
for step in range(1, 4):
    out = model(torch.full((16, 8), float(step)))  # aten::addmm
    out.mul_(2)                                     # changes the watched tensor
    loss = torch.nn.functional.mse_loss(out, target)
    opt.zero_grad()
    loss.backward()
    opt.step()
print("done")
