"""Imports kvlib (after the CLI's boot) and decodes N tokens: steps come from
--step-on=kvlib:Decoder.step or --step-on=kvlib.generate_token."""
import sys

import torch
from kvlib import Decoder, generate_token

dec = Decoder()
with torch.no_grad():
    for i in range(int(sys.argv[1])):
        generate_token(dec, i, torch.ones(4, 32))
print("tokens", len(dec.cache), flush=True)
