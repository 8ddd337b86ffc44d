"""--level chooses what is collected, as upstream's levelType does
(csrc/event_trace/trace_manager/event_trace_manager.cpp: OP_LAUNCH needs the
op level, KERNEL_LAUNCH the kernel level, both need the launch event; the aten
collector, whose rows are the operators and their ACCESS rows, runs only at
op level). Upstream's default level is op (client_parser.cpp sets levelType
to the op bit). Issue #20 item 3.

Rows compared here: npu (simulated driver), cuda (simulated driver), PyTorch
CPU operators (API and CLI), and one program with both operators and kernels.
"""
import os
import subprocess
import textwrap

import pytest

from conftest import BUILD, TEST_BIN, dump_files, process_dirs, read_dump, run_cli

PY = "/usr/bin/python3"
NPU_KERNELS = ["add_kernel", "matmul_kernel"] * 5 + ["add_kernel", "aicpu_op", "matmul_kernel"]
CUDA_KERNELS = ["vecAdd", "reduce", "reduce", "vecAdd"]


def one_dir(out):
    dirs = process_dirs(out)
    assert len(dirs) == 1, dirs
    return dirs[0]


def all_rows(procdir):
    """Every device's rows (rows without a device go to the file of a
    device the run wrote, which depends on what was written)."""
    files = sorted(procdir.glob("device_*/dump/memscope_dump_*.csv"))
    assert files, procdir
    return [r for f in files for r in read_dump(f)]


def events(rows, *names):
    return [r for r in rows if r["Event"] in names]


def launch_names(rows):
    return [r["Name"] for r in rows if r["Event"] == "KERNEL_LAUNCH"]


def npu_rows(tmp_path, *opts, name="out"):
    out = tmp_path / name
    run_cli(["--device=npu:1", "--events=launch", "--analysis=", *opts, f"--output={out}", "--",
             TEST_BIN / "npu_train"], cwd=tmp_path, env={"ASCEND_SIM_DEVICE_MEM": str(128 << 20)}, check_rc=0)
    return all_rows(one_dir(out))


@pytest.mark.parametrize("opts,kernels", [
    ((), False),                      # upstream's default: op
    (("--level=op",), False),
    (("--level=1",), True),           # upstream's older numbers: 0 op, 1 kernel
    (("--level=kernel,op",), True),
])
def test_npu_kernel_launches_only_at_kernel_level(tmp_path, opts, kernels):
    rows = npu_rows(tmp_path, *opts)
    assert launch_names(rows) == (NPU_KERNELS if kernels else [])
    # what --level does not choose is collected at every level
    assert [r["Event Type"] for r in events(rows, "MSTX")] == ["Range_start", "Range_end"] * 5 + ["Mark"]
    assert [r["Event Type"] for r in events(rows, "SYSTEM") if r["Event Type"].startswith("ACL")] == \
        ["ACL_INIT", "ACL_FINI"]


def test_yaml_level_kernel_is_the_command_lines(tmp_path):
    (tmp_path / "p.yaml").write_text("level: kernel\n")
    assert launch_names(npu_rows(tmp_path, f"--config={tmp_path / 'p.yaml'}")) == NPU_KERNELS
    # the command line wins over the file
    assert launch_names(npu_rows(tmp_path, f"--config={tmp_path / 'p.yaml'}", "--level=op", name="o2")) == []


@pytest.mark.parametrize("level,kernels", [(None, False), ("kernel", True), ("kernel,op", True)])
def test_cuda_kernel_launches_only_at_kernel_level(tmp_path, level, kernels):
    out = tmp_path / "out"
    lv = [f"--level={level}"] if level else []
    run_cli(["--device=cuda", "--events=alloc,free,launch", "--analysis=", *lv, f"--output={out}", "--",
             TEST_BIN / "cuda_driver_prog", "launch"], cwd=tmp_path, check_rc=0)
    rows = all_rows(one_dir(out))
    assert launch_names(rows) == (CUDA_KERNELS if kernels else [])


# ------------------------------------------------------------------ PyTorch
API_SCRIPT = textwrap.dedent("""
    import sys
    import torch
    if sys.argv[3] == "dispatch":  # no C++ observer: the TorchDispatchMode of _torch.py
        sys.modules["msmemscope._torch_observer"] = None
    import msmemscope
    kw = dict(device="cpu", events="alloc,free,launch,access", analysis="", output=sys.argv[1])
    if sys.argv[2] != "default":
        kw["level"] = sys.argv[2]
    msmemscope.config(**kw)
    a = torch.ones(64, 64)
    msmemscope.start()
    b = torch.mm(a, a)
    c = b + a
    msmemscope.stop()
    print("sum", float(c.sum()))
""")


def torch_api_rows(tmp_path, level, tracker="observer"):
    pytest.importorskip("torch")
    script = tmp_path / "ops.py"
    script.write_text(API_SCRIPT)
    out = tmp_path / f"out_{level.replace(',', '_')}"
    e = dict(os.environ, PYTHONPATH=str(BUILD / "python"), LD_PRELOAD="")
    e.pop("MSMEMSCOPE_SESSION", None)
    r = subprocess.run([PY, str(script), str(out), level, tracker], cwd=tmp_path, env=e, capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0, r.stderr
    assert "sum 266240.0" in r.stdout
    return read_dump(dump_files(one_dir(out), "cpu")[0])


OPS = ["torch._ops.aten.mm.default", "torch._ops.aten.add.Tensor"]


@pytest.mark.parametrize("tracker", ["observer", "dispatch"])
@pytest.mark.parametrize("level,ops", [("default", True), ("kernel", False)])
def test_torch_operators_and_their_accesses_only_at_op_level(tmp_path, level, ops, tracker):
    rows = torch_api_rows(tmp_path, level, tracker)
    starts = [r["Name"] for r in rows if r["Event"] == "OP_LAUNCH" and r["Event Type"] == "ATEN_START"]
    ends = [r["Name"] for r in rows if r["Event"] == "OP_LAUNCH" and r["Event Type"] == "ATEN_END"]
    access = [(r["Event Type"], r["Name"]) for r in events(rows, "ACCESS")]
    if ops:
        assert set(OPS) <= set(starts) and sorted(starts) == sorted(ends), (starts, ends)
        assert ("READ", OPS[0]) in access and ("WRITE", OPS[1]) in access
    else:
        assert starts == [] and ends == [] and access == []
    # tensor storage (the framework pool) is memory, collected at every level
    # (b and c; a, made before start(), is a shadow row)
    assert len([r for r in rows if r["Event"] == "MALLOC" and r["Event Type"] == "PTA"
                and "shadow" not in r["attr"]]) == 2
    assert not events(rows, "KERNEL_LAUNCH")  # nothing on a CPU launches kernels


# A Python target with both operators (torch on the CPU) and kernel launches
# (the simulated CUDA driver), under the CLI.
BOTH_SCRIPT = textwrap.dedent("""
    import ctypes, sys
    import torch
    cu = ctypes.CDLL({libcuda!r}, mode=ctypes.RTLD_GLOBAL)
    ctx, mod, fn = ctypes.c_void_p(), ctypes.c_void_p(), ctypes.c_void_p()
    assert cu.cuInit(0) == 0
    assert cu.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), 0) == 0
    assert cu.cuCtxSetCurrent(ctx) == 0
    assert cu.cuModuleLoadData(ctypes.byref(mod), b"vecAdd") == 0
    assert cu.cuModuleGetFunction(ctypes.byref(fn), mod, b"vecAdd") == 0
    a = torch.ones(8, 8)
    b = torch.mm(a, a)
    assert cu.cuLaunchKernel(fn, 1, 1, 1, 1, 1, 1, 0, ctypes.c_void_p(0x20), None, None) == 0
    print("done", float(b.sum()))
""")


@pytest.mark.parametrize("level,want_ops,want_kernels", [
    ("op", True, False), ("kernel", False, True), ("kernel,op", True, True)])
def test_operators_and_kernels_of_one_target_follow_the_level(tmp_path, level, want_ops, want_kernels):
    pytest.importorskip("torch")
    script = tmp_path / "both.py"
    script.write_text(BOTH_SCRIPT.format(libcuda=str(BUILD / "tests" / "lib" / "cuda" / "libcuda.so.1")))
    out = tmp_path / "out"
    # launch only: no heap rows of `import torch` to write
    p = run_cli(["--device=cuda,cpu", "--events=launch", "--analysis=", f"--level={level}", f"--output={out}",
                 "--", PY, str(script)], cwd=tmp_path, env={"PYTHONPATH": "", "LD_PRELOAD": ""}, check_rc=0)
    assert "done 512.0" in p.stdout
    d = one_dir(out)
    rows = all_rows(d)
    ops = [r["Name"] for r in rows if r["Event"] == "OP_LAUNCH" and r["Event Type"] == "ATEN_START"]
    assert ("torch._ops.aten.mm.default" in ops) == want_ops, ops
    if not want_ops:
        assert not events(rows, "OP_LAUNCH")
    assert [(r["Name"], r["Device Id"]) for r in events(rows, "KERNEL_LAUNCH")] == \
        ([("vecAdd", "0")] if want_kernels else [])
