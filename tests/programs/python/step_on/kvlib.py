"""A library's decoder (tests/python/test_step_on.py): its step() is named by
--step-on=kvlib:Decoder.step; step() calls itself once for the first token
(a nested call must not end a second step)."""
import torch


class Decoder:
    def __init__(self):
        self.model = torch.nn.Linear(32, 32)
        self.cache = []

    def step(self, i, x, nested=True):
        if nested and i == 0:
            self.step(i, x, nested=False)
        h = self.model(x)
        self.cache.append(h.detach().clone())
        return h


def generate_token(dec, i, x):
    return dec.step(i, x)
