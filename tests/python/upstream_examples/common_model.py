"""The small training setup upstream's examples share (a 10x10 linear layer,
MSE loss, SGD; inputs 32x10), written for the CPU."""
import torch
import torch.nn as nn
import torch.optim as optim


class TinyLinear(nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = nn.Linear(10, 10)

    def forward(self, x):
        return self.linear(x)


def setup(device="cpu"):
    model = TinyLinear().to(device)
    criterion = nn.MSELoss()
    optimizer = optim.SGD(model.parameters(), lr=0.01)
    inputs = torch.randn(32, 10).to(device)
    targets = torch.randn(32, 10).to(device)
    return model, criterion, optimizer, inputs, targets


def one_epoch(model, criterion, optimizer, inputs, targets):
    outputs = model(inputs)
    loss = criterion(outputs, targets)
    loss.requires_grad_(True)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    return loss
