"""(c) Inference under torch.no_grad() with a key/value cache dict that
grows every token: generate_token() runs one token through the decoder
with the cached keys/values, and the caller stores each token's new
per-layer (k, v) under `cache[i]` and never drops any (the full tensors,
not only the new slice: the growing "cache" is the leak). No optimizer, so
steps come only from `--step-on=__main__:generate_token`.

torch's own figures: parameter bytes (no gradients, no optimizer state),
the bytes each token adds to the cache (distinct storages of the new
entry), and the cache at the end.
"""
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import tiny_gpt  # noqa: E402

TOKENS = 24


def generate_token(model, tok, pos, pasts):
    logits, kvs = model(tok, pasts, start=pos)
    return logits[:, -1].argmax(-1, keepdim=True), kvs


def main():
    torch.set_num_threads(1)
    torch.manual_seed(0)
    model = tiny_gpt.GPT().eval()
    cache = {}
    growth = []
    with torch.no_grad():
        prompt = torch.randint(0, tiny_gpt.VOCAB, (1, 8))
        _, pasts = model(prompt)
        tok = prompt[:, -1:]
        for i in range(TOKENS):
            tok, pasts = generate_token(model, tok, 8 + i, pasts)
            cache[i] = pasts                  # grows every token, never trimmed
            seen = {}
            for k, v in pasts:
                for t in (k, v):
                    key = tiny_gpt.storage_key(t)
                    seen[key[0]] = key[1]
            growth.append(sum(seen.values()))
    tiny_gpt.report("steps", TOKENS)
    tiny_gpt.report("parameter_bytes", tiny_gpt.param_bytes(model))
    tiny_gpt.report("gradient_bytes", 0)
    tiny_gpt.report("optimizer_state_bytes", 0)
    # what a per-step leak analysis can judge: the blocks of every call but the
    # first (warm-up) and the last (no later step end for them to outlive)
    tiny_gpt.report("kept_per_step_bytes", growth[-2])
    tiny_gpt.report("kept_total_bytes", sum(growth))
    tiny_gpt.report("kept_judged_bytes", sum(growth[1:-1]))
    tiny_gpt.report("live_tensor_bytes", tiny_gpt.live_tensor_bytes())
    print("kv_infer: %d tokens, cache holds %d entries" % (TOKENS, len(cache)))
    return model, cache


if __name__ == "__main__":
    state = main()  # what main() built stays alive until the exit, where the profilers' "at the end" is measured
