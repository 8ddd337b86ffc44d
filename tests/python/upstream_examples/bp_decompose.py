"""Adapted from upstream's docs/zh/best_practices §4 (memory decomposition):
events alloc and free, analysis decompose; a function marked with the
decorator describe.describer(owner="model_init") builds a 4096x4096 linear
layer, called inside a `with describe.describer(owner="forward_pass")` block
that also makes the input and runs the forward pass. The device is the CPU."""
import torch
import msmemscope
import msmemscope.describe as describe

msmemscope.config(device="cpu", events="alloc,free", analysis="decompose", data_format="csv", output="./output")
msmemscope.start()

device = torch.device("cpu")


@describe.describer(owner="model_init")
def init_model():
    return torch.nn.Linear(4096, 4096).to(device)


with describe.describer(owner="forward_pass"):
    model = init_model()
    data = torch.randn(64, 4096).to(device)
    output = model(data)

msmemscope.stop()
print("Test finished.")
