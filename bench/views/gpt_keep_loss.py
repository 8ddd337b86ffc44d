"""(a) A small GPT-style decoder trained with AdamW that keeps every step's
loss alive: `losses.append(loss)` after `backward(retain_graph=True)`, so
each kept loss holds its whole autograd graph and the tensors the graph
saved for backward (the classic "I kept the loss for logging" leak).

torch's own figures: parameter, gradient and optimizer-state bytes (sums of
numel * element_size), and the bytes each step's kept graph holds: the
distinct storages its backward nodes saved (counted with
torch.autograd.graph.saved_tensors_hooks, leaving out parameters and the
input batch), plus the loss itself.
"""
import os
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import tiny_gpt  # noqa: E402

STEPS = 8
BATCH = 4


def train_step(model, opt, x, y, losses, persistent, step_graph):
    saved = {}

    def pack(t):
        key = tiny_gpt.storage_key(t)
        if key[0] not in persistent:
            saved[key[0]] = key[1]
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        logits, _ = model(x)
        loss = F.cross_entropy(logits.reshape(-1, tiny_gpt.VOCAB), y.reshape(-1))
    opt.zero_grad(set_to_none=True)
    loss.backward(retain_graph=True)
    opt.step()
    losses.append(loss)                       # keeps the graph (and what it saved) alive
    step_graph.append(sum(saved.values()) + tiny_gpt.storage_key(loss)[1])


def main():
    torch.set_num_threads(1)
    torch.manual_seed(0)
    model = tiny_gpt.GPT()
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.1)
    data = torch.randint(0, tiny_gpt.VOCAB, (BATCH, tiny_gpt.CTX + 1))
    x, y = data[:, :-1], data[:, 1:]
    persistent = {tiny_gpt.storage_key(p)[0] for p in model.parameters()}
    persistent.add(tiny_gpt.storage_key(data)[0])
    losses, step_graph = [], []
    for _ in range(STEPS):
        train_step(model, opt, x, y, losses, persistent, step_graph)
    tiny_gpt.report("steps", STEPS)
    tiny_gpt.report("parameter_bytes", tiny_gpt.param_bytes(model))
    tiny_gpt.report("gradient_bytes", tiny_gpt.grad_bytes(model))
    tiny_gpt.report("optimizer_state_bytes", tiny_gpt.optimizer_state_bytes(opt))
    # what a per-step leak analysis can judge: the blocks of every call but the
    # first (warm-up) and the last (no later step end for them to outlive)
    tiny_gpt.report("kept_per_step_bytes", step_graph[-2])
    tiny_gpt.report("kept_total_bytes", sum(step_graph))
    tiny_gpt.report("kept_judged_bytes", sum(step_graph[1:-1]))
    tiny_gpt.report("live_tensor_bytes", tiny_gpt.live_tensor_bytes())
    print("gpt_keep_loss: %d steps, last loss %.4f, %d losses kept" % (STEPS, losses[-1].item(), len(losses)))
    return model, opt, losses


if __name__ == "__main__":
    state = main()  # what main() built stays alive until the exit, where the profilers' "at the end" is measured
