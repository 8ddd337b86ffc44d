"""Adapted from upstream's docs/zh/best_practices §5 (inefficient memory),
run under `msmemscope --events=alloc,free,access,launch --analysis=inefficient
--level=op`. Two patterns: early_tensor is allocated, then two temporaries
come and go, and only then is early_tensor first used (early allocation);
used_tensor is last used, then a temporary comes and goes, and only then is
used_tensor freed (late deallocation). The device is the CPU."""
import torch

device = torch.device("cpu")

# allocated early, first used much later
early_tensor = torch.randn(1024, 1024).to(device)

temp1 = torch.randn(512, 512).to(device)
temp2 = torch.randn(512, 512).to(device)
del temp1
del temp2

result = early_tensor + 1

# last used here, freed much later
used_tensor = torch.randn(2048, 2048).to(device)
_ = used_tensor * 2

temp3 = torch.randn(1024, 1024).to(device)
del temp3

del used_tensor
print("Test finished.")
