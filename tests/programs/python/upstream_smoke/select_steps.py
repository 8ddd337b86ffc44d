# Upstream's smoke script for the select_steps cases (test/smoke/testfile/
# scripts/select_steps/select_one_steps.py), told again for the CPU: five
# epochs, each an mstx "step start" range in which a small linear model is
# built, trained for one step on a random batch, and its memory printed.
import torch
import mstx

device = torch.device("cpu")


class Tiny(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(10, 10)

    def forward(self, x):
        return self.linear(x)


for epoch in range(5):
    rid = mstx.range_start("step start", None)
    model = Tiny().to(device)
    loss_fn = torch.nn.MSELoss()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x = torch.randn(32, 10).to(device)
    y = torch.randn(32, 10).to(device)
    loss = loss_fn(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
    print(f"epoch {epoch}: loss {loss.item():.4f}")
    mstx.range_end(rid)
print("done")
