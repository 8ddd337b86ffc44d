"""hal collector: threads that free and allocate driver memory at once
(halMemAlloc/halMemFree); the simulated Ascend driver's blocks are mappings
of their own, and the kernel hands an unmapped range out again at once, as
the real driver reuses a freed address.

As for CUDA (test_cuda_address_reuse.py): a MALLOC row of an address the
driver gave again must not come before the FREE row of the block that had
it; the hal hooks hold one lock across each driver call and its row.

tests/programs/npu/hal_reuse.c: THREADS threads hold 2 blocks of 64 KiB
each on device 0 (the peak, all held at the first barrier), then ROUNDS
rounds started together by a barrier, each freeing its blocks and
allocating new ones of the same size, and free everything at the end.
"""
import pytest

from conftest import TEST_BIN, dump_files, process_dirs, read_dump, run_cli
from test_cuda_address_reuse import check_pairs, console_head, device_rows, no_leaks, program_figures, stderr_lines
from test_npu_backend import SIM_ENV

THREADS = 4
ROUNDS = 500
PEAK = THREADS * 2 * (64 << 10)  # 512 KiB


@pytest.fixture(scope="module")
def reuse_run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("npu_reuse")
    out = tmp / "out"
    p = run_cli(["--device=npu:0", "--events=alloc,free", "--analysis=leaks", f"--output={out}", "--",
             str(TEST_BIN / "npu_hal_reuse"), str(THREADS), str(ROUNDS)], cwd=tmp, env=SIM_ENV, check_rc=0)
    [d] = process_dirs(out)
    return p, d


def test_every_free_pairs_with_the_malloc_of_its_own_block(reuse_run):
    p, d = reuse_run
    [csv] = dump_files(d, "0")
    check_pairs(device_rows(read_dump(csv)), program_figures(p, PEAK), min_lives=20)


def test_peak_and_final_are_what_the_program_held_and_nothing_leaks(reuse_run):
    # Without the lock (DriverOrder a no-op in the hal hooks), 400 to 480
    # FREE rows a run came after the MALLOC of the next block at their
    # address ("[msmemscope] warning: 0/HAL: 422 free(s) of block(s) whose
    # allocation was never recorded ..." on stderr).
    p, d = reuse_run
    allocations = program_figures(p, PEAK)
    got, want = console_head(p, d, [f"allocations={allocations} peak={PEAK} final=0"], 2 * allocations + 2)
    assert got == want + ["  0/HAL: peak 512.0 KiB, final 0 B"], p.stdout
    assert stderr_lines(p) == [], p.stderr
    assert no_leaks(d)[0], no_leaks(d)
