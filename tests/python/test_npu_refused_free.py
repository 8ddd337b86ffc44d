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
from conftest import dump_files, read_dump
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


# Pinned host memory the runtime refuses to unregister (inside a
# registration, or one already unregistered: ACL_ERROR_INVALID_PARAM), and
# refusals while collection is off (between stop() and start()):
#   range 1   d = halMemAlloc 1 MiB; pinned = aclrtHostRegisterV2 16 KiB
#             refused: aclrtHostUnregister(pinned + 4 KiB)
#   off       refused: halMemFree(d + 64 KiB), aclrtHostUnregister(pinned + 4 KiB)
#   range 2   aclrtHostUnregister(pinned); refused: aclrtHostUnregister(pinned)
#             halMemFree(d)
OFF_PROG = """
import ctypes, os
import msmemscope

sim = {sim!r}
acl = ctypes.CDLL(os.path.join(sim, "libascendcl.so"))
fw = ctypes.CDLL(os.path.join(sim, "libascend_sim_framework.so"))
fw.fw_hal_alloc.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_ulonglong, ctypes.c_ulonglong]
fw.fw_host_register.argtypes = [ctypes.c_void_p, ctypes.c_uint64, ctypes.c_uint32]
for f in (fw.fw_hal_free, fw.fw_host_unregister):
    f.argtypes = [ctypes.c_void_p]
assert acl.aclInit(None) == 0
if {api!r}:
    msmemscope.config({config})
msmemscope.start()
d = ctypes.c_void_p()
assert fw.fw_hal_alloc(ctypes.byref(d), 1 << 20, 0 | (1 << 10) | (33 << 56)) == 0
print(f"d 0x{{d.value:016x}}", flush=True)
buf = ctypes.create_string_buffer(16384)
pinned = ctypes.addressof(buf)
assert fw.fw_host_register(pinned, 16384, 0x10000000) == 0  # ACL_HOST_REG_PINNED
print(f"pinned 0x{{pinned:016x}}", flush=True)
assert fw.fw_host_unregister(pinned + 4096) == 100000       # ACL_ERROR_INVALID_PARAM: inside it
msmemscope.stop()
assert fw.fw_hal_free(d.value + (64 << 10)) == 3             # collection off
assert fw.fw_host_unregister(pinned + 4096) == 100000
msmemscope.start()
assert fw.fw_host_unregister(pinned) == 0
assert fw.fw_host_unregister(pinned) == 100000               # already unregistered
assert fw.fw_hal_free(d) == 0
msmemscope.stop()
"""


def off_prog(api, output):
    return OFF_PROG.format(sim=str(SIM_LIB), api=api, config=output + ', device="npu:0,cpu"')


def test_refused_unregisters_keep_the_pinned_block_and_refusals_while_off_are_not_told(tmp_path):
    # Before: the simulated runtime never refused aclrtHostUnregister (the
    # hook's refusal path went untested), and the refusals between stop()
    # and start() were told ("so no FREE row is written") though no row
    # would have been written while collection was off.
    runs = run_both(tmp_path, off_prog, "", ["--device=npu:0,cpu"], NPU_ENV)
    for p, d in runs:
        names = labels(p.stdout)
        addr = {n: a for a, n in names.items()}
        rows = read_dump(dump_files(d, "cpu")[0])
        pinned = [(r["Event"], names.get(int(r["Ptr"], 16))) for r in rows if r["Event Type"] == "HOST_PINNED"]
        assert pinned == [("MALLOC", "pinned"), ("FREE", "pinned")], pinned
        mem = [(r[0], r[4]) for r in device_rows(p, d, "0") if r[1] == "HAL"]
        assert mem == [("MALLOC", "d"), ("FREE", "d")], mem
        tail = ": the driver gave nothing back, so no FREE row is written and the profile keeps the memory as held"
        told = [line for line in p.stderr.splitlines() if "failed with error" in line]
        assert told == [
            f"[msmemscope] warning: aclrtHostUnregister(0x{addr['pinned'] + 4096:016x}) failed with error 100000{tail}",
            f"[msmemscope] warning: aclrtHostUnregister(0x{addr['pinned']:016x}) failed with error 100000{tail}"], \
            p.stderr
