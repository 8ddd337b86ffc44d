"""cuda collector: NVTX marks and ranges through NVTX's injection mechanism.

The program uses a small NVTX library (tests/fixtures/cuda/fake_nvtx.cpp)
that, like nvToolsExt, loads the library named by NVTX_INJECTION64_PATH and
calls its InitializeInjectionNvtx2; the cuda hook library sets that variable
to itself before main when it is unset."""
from cuda_helpers import rows, run_cuda

# Rows without a device carry the Device Id of the file they are in (here
# the only one, cpu) and no Attr, as upstream writes them.
EXPECTED = [
    ("MSTX", "Mark", "hello", "cpu", "N/A", ""),
    ("MSTX", "Range_start", "step start", "cpu", "N/A", ""),
    ("MSTX", "Range_start", "outer", "cpu", "N/A", ""),
    ("MSTX", "Range_start", "inner", "cpu", "N/A", ""),
    ("MSTX", "Range_end", "inner", "cpu", "N/A", ""),
    ("MSTX", "Range_end", "outer", "cpu", "N/A", ""),
    ("MSTX", "Range_end", "step start", "cpu", "N/A", ""),
    ("MSTX", "Mark", "ex mark", "cpu", "N/A", ""),
    ("MSTX", "Mark", "registered mark", "cpu", "N/A", ""),
    ("MSTX", "Mark", "wide mark", "cpu", "N/A", ""),
]


def only_mstx(procdir):
    """MSTX rows (no device) of the run: no CUDA device is used, so they are
    in the one file the run writes (cpu)."""
    files = sorted(procdir.glob("device_*/dump/memscope_dump_*.csv"))
    assert len(files) == 1, files
    device = files[0].parent.parent.name[len("device_"):]
    return [x for x in rows(procdir, device) if x[0] == "MSTX"]


def test_nvtx_marks_and_ranges(cli, test_bin, tmp_path):
    p, d = run_cuda(cli, tmp_path, test_bin / "cuda_nvtx_prog")
    # push levels 0 and 1, pops return 1 and 0, a pop too many returns -1
    assert "levels 0 1 1 0 -1 step_id_nonzero=1" in p.stdout
    assert only_mstx(d) == EXPECTED


def test_user_injection_path_is_kept(cli, test_bin, tmp_path):
    p, d = run_cuda(cli, tmp_path, test_bin / "cuda_nvtx_prog",
                    env={"NVTX_INJECTION64_PATH": str(tmp_path / "no_such_tool.so")})
    assert "levels -2 -2 -2 -2 -2 step_id_nonzero=0" in p.stdout
    assert only_mstx(d) == []


def test_nvtx_injection_can_be_turned_off(cli, test_bin, tmp_path):
    p, d = run_cuda(cli, tmp_path, test_bin / "cuda_nvtx_prog", env={"MSMEMSCOPE_CUDA_NVTX": "0"})
    assert "levels -2 -2 -2 -2 -2 step_id_nonzero=0" in p.stdout
    assert only_mstx(d) == []


def test_without_profiler_nvtx_is_a_no_op(test_bin):
    import os
    import subprocess
    env = dict(os.environ)
    env.pop("NVTX_INJECTION64_PATH", None)
    env.pop("LD_PRELOAD", None)
    p = subprocess.run([str(test_bin / "cuda_nvtx_prog")], capture_output=True, text=True, env=env)
    assert p.returncode == 0
    assert "levels -2 -2 -2 -2 -2 step_id_nonzero=0" in p.stdout
