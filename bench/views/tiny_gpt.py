"""The small GPT-style decoder shared by gpt_keep_loss.py and kv_infer.py,
and torch's own byte counts (what the views are compared against)."""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F

VOCAB, D, HEADS, LAYERS, CTX = 512, 64, 4, 2, 32


class Block(nn.Module):
    def __init__(self, d, heads):
        super().__init__()
        self.heads = heads
        self.ln1 = nn.LayerNorm(d)
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)
        self.ln2 = nn.LayerNorm(d)
        self.fc = nn.Linear(d, 4 * d)
        self.out = nn.Linear(4 * d, d)

    def split_heads(self, t):
        b, n, d = t.shape
        return t.view(b, n, self.heads, d // self.heads).transpose(1, 2)

    def attention(self, x, past=None):
        d = x.size(-1)
        q, k, v = self.qkv(x).split(d, dim=2)
        q, k, v = self.split_heads(q), self.split_heads(k), self.split_heads(v)
        if past is not None:
            k = torch.cat([past[0], k], dim=2)
            v = torch.cat([past[1], v], dim=2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
        if past is None:
            t = x.size(1)
            mask = torch.ones(t, t, dtype=torch.bool).tril()
            att = att.masked_fill(~mask, float("-inf"))
        att = F.softmax(att, dim=-1)
        b, _, t, _ = q.shape
        y = (att @ v).transpose(1, 2).contiguous().view(b, t, d)
        return self.proj(y), (k, v)

    def forward(self, x, past=None):
        a, kv = self.attention(self.ln1(x), past)
        x = x + a
        x = x + self.out(F.gelu(self.fc(self.ln2(x))))
        return x, kv


class GPT(nn.Module):
    def __init__(self, vocab=VOCAB, d=D, heads=HEADS, layers=LAYERS, ctx=CTX):
        super().__init__()
        self.tok = nn.Embedding(vocab, d)
        self.pos = nn.Embedding(ctx * 4, d)
        self.blocks = nn.ModuleList([Block(d, heads) for _ in range(layers)])
        self.ln = nn.LayerNorm(d)

    def forward(self, idx, pasts=None, start=0):
        t = idx.size(1)
        x = self.tok(idx) + self.pos(torch.arange(start, start + t))
        kvs = []
        for i, blk in enumerate(self.blocks):
            x, kv = blk(x, None if pasts is None else pasts[i])
            kvs.append(kv)
        return self.ln(x) @ self.tok.weight.t(), kvs


def tensor_bytes(t):
    return t.numel() * t.element_size()


def storage_key(t):
    s = t.storage()
    return s.data_ptr(), s.nbytes()


def param_bytes(model):
    return sum(tensor_bytes(p) for p in model.parameters())


def grad_bytes(model):
    return sum(tensor_bytes(p.grad) for p in model.parameters() if p.grad is not None)


def optimizer_state_bytes(opt):
    return sum(tensor_bytes(v) for st in opt.state.values() for v in st.values() if torch.is_tensor(v))


def live_tensor_bytes():
    """torch's own count of what is live: the distinct storages of every
    tensor the garbage collector can reach (tensors that only C++ holds, e.g.
    saved for backward without a Python object, are not seen)."""
    import gc
    seen = {}
    for o in gc.get_objects():
        try:
            if issubclass(type(o), torch.Tensor) and o.device.type == "cpu":  # type(): no __getattribute__ runs
                ptr, n = storage_key(o)
                if ptr:
                    seen[ptr] = n
        except Exception:
            pass
    return sum(seen.values())


def report(name, value):
    """One figure of torch's own count, read by run.py."""
    print("torch: %s = %d" % (name, value), flush=True)
