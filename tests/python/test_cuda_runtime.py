"""cuda collector: a runtime (like libcudart) that reaches the simulated driver
only through dlopen("libcuda.so.1") + dlsym(cuGetProcAddress[_v2]) +
cuGetProcAddress — the path cudaMalloc and kernel launches take."""
import re

import pytest

from cuda_helpers import rows, run_cuda

D0 = 0x700000000000


def ptr(v):
    return f"0x{v:016x}"


@pytest.mark.parametrize("gpa", ["v2", "v1"])
def test_runtime_calls_through_cuGetProcAddress(cli, test_bin, tmp_path, gpa):
    _, d = run_cuda(cli, tmp_path, test_bin / "cuda_runtime_prog", env={"FAKE_CUDART_GPA": gpa})
    a, b = D0, D0 + 4096
    assert rows(d, "0") == [
        ("MALLOC", "HAL", "N/A", "0", ptr(a),
         f"{{allocation_id:1,addr:{ptr(a)},size:4096,used:4096,alloc_type:alloc,process_used:4096,device_used:4096,driver:cuda}}"),
        # launched through the per-thread-stream variant (cuLaunchKernel_ptsz)
        ("KERNEL_LAUNCH", "KERNEL_LAUNCH", "gemm", "0", "N/A", "{streamId:64,taskId:1}"),
        ("KERNEL_LAUNCH", "KERNEL_LAUNCH", "relu", "0", "N/A", ""),
        ("MALLOC", "HAL", "N/A", "0", ptr(b),
         f"{{allocation_id:2,addr:{ptr(b)},size:2048,used:6144,alloc_type:async,process_used:6144,device_used:6144,driver:cuda}}"),
        ("FREE", "HAL", "N/A", "0", ptr(b),
         f"{{allocation_id:2,addr:{ptr(b)},size:2048,used:4096,process_used:4096,device_used:4096}}"),
        ("FREE", "HAL", "N/A", "0", ptr(a),
         f"{{allocation_id:1,addr:{ptr(a)},size:4096,used:0,process_used:0,device_used:0}}"),
    ]


def test_runtime_pinned_host_memory(cli, test_bin, tmp_path):
    p, d = run_cuda(cli, tmp_path, test_bin / "cuda_runtime_prog", device="cuda,cpu")
    m = re.search(r"h=(0x[0-9a-f]{16}) r=(0x[0-9a-f]{16})", p.stdout)
    assert m, p.stdout
    h, r = m.groups()
    got = [(x[0], x[4], x[5].split(",size:")[1].split(",")[0]) for x in rows(d, "cpu") if x[1] == "HOST_PINNED"]
    assert got == [("MALLOC", h, "1024"), ("MALLOC", r, "8192"), ("FREE", r, "8192"), ("FREE", h, "1024")]
    attrs = [x[5] for x in rows(d, "cpu") if x[1] == "HOST_PINNED" and x[0] == "MALLOC"]
    # upstream's order: ...,size,pinned,used,...,alloc_type, then ours
    assert ",pinned:true,used:" in attrs[0] and ",alloc_type:alloc," in attrs[0] and attrs[0].endswith(",driver:cuda}")
    assert ",pinned:true,used:" in attrs[1] and ",alloc_type:register," in attrs[1]
