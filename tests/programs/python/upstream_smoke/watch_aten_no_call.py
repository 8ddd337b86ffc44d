# upstream_smoke/watch_aten.py without any msmemscope or mstx call: a plain
# PyTorch loop of 5 epochs. Under `msmemscope --watch=<mse_loss>,<mse_loss_backward>`
# each epoch's mse_loss -> mse_loss_backward window is watched (issue #28 item 3).
import torch
import torch.nn as nn
import torch.optim as optim

model = nn.Linear(10, 10)
criterion = nn.MSELoss()
optimizer = optim.SGD(model.parameters(), lr=0.01)
inputs = torch.randn(32, 10)
targets = torch.randn(32, 10)
for epoch in range(5):
    loss = criterion(model(inputs), targets)
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()
print("epochs", epoch + 1)
