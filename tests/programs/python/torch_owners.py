"""Owners of PyTorch memory (issue #27 item 2): a small GPT-style model
trained with AdamW and zero_grad(set_to_none=True) (a new gradient may land
at a freed one's address), or run for inference only under torch.no_grad()
(no optimizer at all).

argv: output folder, "api" (config/start/stop around the run) or "plain"
(no msmemscope call: run it under the CLI), "train" or "infer",
"before" or "after" (the model is built before or after start()).

At the end (before stop() in api mode) it prints torch's own sums, one line
  TORCH_SUMS {"weight": <bytes>, "gradient": <bytes>, "params": <count>,
              "weight_ptrs": [...], "gradient_ptrs": [...]}
with each storage counted once (ptrs: the storages' base addresses).
"""
import json
import os
import sys

import torch

out = sys.argv[1] if len(sys.argv) > 1 else "out"
mode = sys.argv[2] if len(sys.argv) > 2 else "api"
kind = sys.argv[3] if len(sys.argv) > 3 else "train"
when = sys.argv[4] if len(sys.argv) > 4 else "after"

if mode == "api":
    import msmemscope
    msmemscope.config(device="cpu", events=os.environ.get("OWNERS_EVENTS", "alloc,free,launch"), analysis="decompose", output=out, sinks="")

torch.manual_seed(0)
VOCAB, DIM, CTX = 256, 128, 32


class Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.ln1 = torch.nn.LayerNorm(DIM)
        self.qkv = torch.nn.Linear(DIM, 3 * DIM)
        self.proj = torch.nn.Linear(DIM, DIM)
        self.ln2 = torch.nn.LayerNorm(DIM)
        self.up = torch.nn.Linear(DIM, 4 * DIM)
        self.down = torch.nn.Linear(4 * DIM, DIM)

    def forward(self, x):
        b, t, c = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(c, dim=2)
        att = (q @ k.transpose(1, 2)) / (c ** 0.5)
        mask = torch.ones(t, t, dtype=torch.bool).tril()
        att = att.masked_fill(~mask, float("-inf")).softmax(dim=-1)
        x = x + self.proj(att @ v)
        return x + self.down(torch.relu(self.up(self.ln2(x))))


class GPT(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.tok = torch.nn.Embedding(VOCAB, DIM)
        self.pos = torch.nn.Parameter(torch.zeros(CTX, DIM))
        self.blocks = torch.nn.ModuleList([Block(), Block()])
        self.head = torch.nn.Linear(DIM, VOCAB, bias=False)

    def forward(self, idx):
        x = self.tok(idx) + self.pos[: idx.shape[1]]
        for blk in self.blocks:
            x = blk(x)
        return self.head(x)


def storages(tensors):
    seen = {}
    for t in tensors:
        if t is None:
            continue
        st = t.storage()
        seen[st.data_ptr()] = st.nbytes()
    return seen


if when == "before":
    model = GPT()
if mode == "api":
    msmemscope.start()
if when != "before":
    model = GPT()

data = torch.randint(0, VOCAB, (8, CTX + 1))
if kind == "train":
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    for _ in range(5):
        opt.zero_grad(set_to_none=True)
        logits = model(data[:, :-1])
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, VOCAB), data[:, 1:].reshape(-1))
        loss.backward()
        opt.step()
    # one more backward after the last step: these gradients were never seen
    # by an optimizer
    opt.zero_grad(set_to_none=True)
    model(data[:, :-1]).sum().backward()
else:
    cache = []
    with torch.no_grad():
        for _ in range(4):
            cache.append(model(data[:, :-1]).argmax(-1))

params = list(model.parameters())
weights, grads = storages(params), storages(p.grad for p in params)
print("TORCH_SUMS " + json.dumps({"weight": sum(weights.values()), "gradient": sum(grads.values()),
                                   "params": len(params), "weight_ptrs": sorted(weights),
                                   "gradient_ptrs": sorted(grads)}), flush=True)
if mode == "api":
    msmemscope.stop()
