"""NPU frees the driver refuses give nothing back: no FREE row is written
for them, the hal hook keeps the block, and the user is told on stderr.

The program (simulated Ascend driver, tests/fixtures/ascend, which refuses
these calls: halMemFree of an address inside a block, halMemRelease of a
halMemAlloc block), through a framework library's GOT slots, device 0:
  d = halMemAlloc 1 MiB; ws = halMemCreate 2 MiB                 3 MiB
  refused: halMemFree(d + 64 KiB), halMemRelease(d)
  e = halMemAlloc 1 MiB                                          4 MiB (the peak)
  halMemFree(d)                                                  3 MiB
  leaked at stop(): ws and e, 3 MiB in 2 blocks
Run without the CLI and under it (--collect-mode=deferred).
"""
from test_python_api_devices import NPU_ENV, SIM_LIB, device_rows, labels, leak_report, run_both

MiB = 1 << 20

PROG = """
import ctypes, os
import msmemscope

sim = {sim!r}
acl = ctypes.CDLL(os.path.join(sim, "libascendcl.so"))
fw = ctypes.CDLL(os.path.join(sim, "libascend_sim_framework.so"))
fw.fw_hal_alloc.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_ulonglong, ctypes.c_ulonglong]
fw.fw_hal_create.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_ulonglong, ctypes.c_uint32]
for f in (fw.fw_hal_free, fw.fw_hal_release):
    f.argtypes = [ctypes.c_void_p]
assert acl.aclInit(None) == 0
if {api!r}:
    msmemscope.config({config})
msmemscope.start()
d = ctypes.c_void_p()
assert fw.fw_hal_alloc(ctypes.byref(d), 1 << 20, 0 | (1 << 10) | (33 << 56)) == 0
print(f"d 0x{{d.value:016x}}", flush=True)
ws = ctypes.c_void_p()
assert fw.fw_hal_create(ctypes.byref(ws), 2 << 20, 0) == 0
print(f"ws 0x{{ws.value:016x}}", flush=True)
assert fw.fw_hal_free(d.value + (64 << 10)) == 3   # DRV_ERROR_INVALID_VALUE: inside a block
assert fw.fw_hal_release(d) == 4                    # DRV_ERROR_INVALID_HANDLE: no handle
e = ctypes.c_void_p()
assert fw.fw_hal_alloc(ctypes.byref(e), 1 << 20, 0 | (1 << 10) | (33 << 56)) == 0
print(f"e 0x{{e.value:016x}}", flush=True)
assert fw.fw_hal_free(d) == 0
msmemscope.stop()
"""


def prog(api, output):
    return PROG.format(sim=str(SIM_LIB), api=api, config=output + ', device="npu:0"')


def test_refused_npu_frees_write_no_row_keep_the_block_and_are_told(tmp_path):
    # Before: halMemRelease(d) wrote d's FREE before the driver said no
    # (the device's bytes fell to 2 MiB while d was held: peak 3.0 MiB, not
    # 4.0), and halMemFree(d) later paired with nothing; neither refused
    # call was told.
    runs = run_both(tmp_path, prog, "", ["--device=npu:0"], NPU_ENV)
    for p, d in runs:
        names = {n: a for a, n in labels(p.stdout).items()}
        mem = [(r[0], r[4]) for r in device_rows(p, d, "0") if r[1] == "HAL"]
        assert mem[:4] == [("MALLOC", "d"), ("MALLOC", "ws"), ("MALLOC", "e"), ("FREE", "d")], mem
        assert leak_report(p)[0] == (
            "  Driver memory still allocated at stop() on device 0: 2 block(s), 3.000000 Mb(s):"), p.stdout
        assert "  0/HAL: peak 4.0 MiB, final 3.0 MiB" in p.stdout.splitlines(), p.stdout
        tail = ": the driver gave nothing back, so no FREE row is written and the profile keeps the memory as held"
        told = [line for line in p.stderr.splitlines() if "failed with error" in line]
        assert told == [f"[msmemscope] warning: halMemFree(0x{names['d'] + (64 << 10):016x}) failed with error 3{tail}",
                        f"[msmemscope] warning: halMemRelease(0x{names['d']:016x}) failed with error 4{tail}"], \
            p.stderr
        assert "never recorded" not in p.stderr, p.stderr
