"""A small GPT-style CPU training loop (issue #30's workload): token and
position embeddings, 3 pre-norm transformer blocks (causal self-attention
written out, GELU MLP), a tied output head, AdamW, 20 steps on random tokens,
one thread. Prints the training loop's own wall time as `loop_s=<seconds>`
(and with --step-times each step's as `steps_ms=<ms>,<ms>,...` before it).

Usage: /usr/bin/python3 bench/torch/train_gpt.py [--steps N] [--layers L] [--step-times]
       [--torch-profiler TRACE_JSON]
"""
import argparse
import math
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


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

    def attention(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(x).split(d, dim=2)
        q = q.view(b, t, self.heads, d // self.heads).transpose(1, 2)
        k = k.view(b, t, self.heads, d // self.heads).transpose(1, 2)
        v = v.view(b, t, self.heads, d // self.heads).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
        mask = torch.ones(t, t, dtype=torch.bool).tril()
        att = att.masked_fill(~mask, float("-inf"))
        att = F.softmax(att, dim=-1)
        y = (att @ v).transpose(1, 2).contiguous().view(b, t, d)
        return self.proj(y)

    def forward(self, x):
        x = x + self.attention(self.ln1(x))
        x = x + self.out(F.gelu(self.fc(self.ln2(x))))
        return x


class GPT(nn.Module):
    def __init__(self, vocab, d, heads, layers, ctx):
        super().__init__()
        self.tok = nn.Embedding(vocab, d)
        self.pos = nn.Embedding(ctx, d)
        self.blocks = nn.ModuleList([Block(d, heads) for _ in range(layers)])
        self.ln = nn.LayerNorm(d)

    def forward(self, idx):
        t = idx.size(1)
        x = self.tok(idx) + self.pos(torch.arange(t))
        for blk in self.blocks:
            x = blk(x)
        return self.ln(x) @ self.tok.weight.t()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--layers", type=int, default=3)
    ap.add_argument("--torch-profiler", metavar="TRACE_JSON",
                    help="run the loop under torch.profiler(profile_memory=True, with_stack=True) "
                         "and export its chrome trace here")
    ap.add_argument("--step-times", action="store_true", help="print each step's wall time (steps_ms=...)")
    args = ap.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(0)
    vocab, d, heads, ctx, batch = 256, 64, 4, 32, 4
    model = GPT(vocab, d, heads, args.layers, ctx)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.1)
    data = torch.randint(0, vocab, (batch, ctx + 1))
    x, y = data[:, :-1], data[:, 1:]
    prof = None
    if args.torch_profiler:
        from torch.profiler import ProfilerActivity, profile
        prof = profile(activities=[ProfilerActivity.CPU], profile_memory=True, with_stack=True)
        prof.__enter__()
    step_ms = []
    t0 = time.perf_counter()
    for _ in range(args.steps):
        ts = time.perf_counter()
        logits = model(x)
        loss = F.cross_entropy(logits.reshape(-1, vocab), y.reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        step_ms.append((time.perf_counter() - ts) * 1e3)
    loop = time.perf_counter() - t0
    if prof is not None:
        prof.__exit__(None, None, None)
        prof.export_chrome_trace(args.torch_profiler)
    if args.step_times:
        print("steps_ms=" + ",".join("%.2f" % v for v in step_ms), flush=True)
    # end_wall: when the program is done (the host's work after it is the
    # CLI's exit time minus this).
    # end_mono: the same on CLOCK_MONOTONIC (perf record -k CLOCK_MONOTONIC).
    print("loop_s=%.4f loss=%.4f end_wall=%.6f end_mono=%.6f" % (loop, loss.item(), time.time(), time.monotonic()),
          flush=True)


if __name__ == "__main__":
    main()
