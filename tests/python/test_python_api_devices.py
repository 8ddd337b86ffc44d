"""Device memory in a Python API run without the CLI (plain python3 with
msmemscope.start()), upstream's main flow: a torch_npu script has loaded the
Ascend runtime before start(). The built-in device collectors' hooks (hal,
kernel_launch, cuda) go in by GOT patching, as third-party collectors' do;
before, they were skipped: such a run recorded no device memory at all and
its report said that no driver was found.

Each program runs twice, without the CLI and under the CLI with
--collect-mode=deferred (collection from the program's start()): the rows of
the device's dump and the leak report are the same. The simulated runtimes
(tests/fixtures/ascend, tests/fixtures/cuda) are loaded with ctypes
(RTLD_LOCAL, as Python extensions load theirs)."""
import re
import subprocess
import textwrap
from collections import defaultdict, deque

import pytest

from conftest import BUILD, CLI, clean_env, dump_files, process_dirs, read_dump

PY = "/usr/bin/python3"
SIM_LIB = BUILD / "tests" / "lib" / "ascend"
CUDA_LIB = BUILD / "tests" / "lib" / "cuda"
MiB = 1 << 20

NPU_PROG = """
import ctypes, os, sys
import msmemscope

def load():
    acl = ctypes.CDLL(os.path.join({sim!r}, "libascendcl.so"))
    acl.aclrtMalloc.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_size_t, ctypes.c_int]
    acl.aclrtFree.argtypes = [ctypes.c_void_p]
    acl.aclrtLaunchKernel.argtypes = [ctypes.c_void_p, ctypes.c_uint32, ctypes.c_void_p, ctypes.c_size_t,
                                      ctypes.c_void_p]
    assert acl.aclInit(None) == 0 and acl.aclrtSetDevice(0) == 0
    return acl

def malloc(acl, n, label):
    p = ctypes.c_void_p()
    assert acl.aclrtMalloc(ctypes.byref(p), n, 0) == 0
    print(f"{{label}} 0x{{p.value:016x}}", flush=True)
    return p

acl = load() if {before!r} else None
if acl is not None:
    acl.aclrtFree(malloc(acl, 4096, "pre"))     # allocated and freed before start()
    kept = malloc(acl, 8192, "kept") if {kept!r} else None  # allocated before start(), freed after
if {api!r}:
    msmemscope.config({config})
msmemscope.start()
if acl is None:
    acl = load()                                 # the runtime loaded after start(): the dlopen hook
stream, fn = ctypes.c_void_p(), ctypes.c_void_p()
assert acl.aclrtCreateStream(ctypes.byref(stream)) == 0
assert acl.aclrtBinaryGetFunction(None, b"add_kernel", ctypes.byref(fn)) == 0
a = malloc(acl, 1 << 20, "a")
assert acl.aclrtLaunchKernel(fn, 1, None, 0, stream) == 0
acl.aclrtFree(a)
leak = malloc(acl, 12345, "leak")
if {kept!r}:
    acl.aclrtFree(kept)
msmemscope.stop()
"""


def run_both(tmp_path, prog, config, cli_options, env):
    """(api, cli) runs of prog: each (CompletedProcess, process dir)."""
    out = []
    for api in (True, False):
        work = tmp_path / ("api" if api else "cli")
        work.mkdir()
        (work / "prog.py").write_text(textwrap.dedent(prog(api, f'output={str(work / "out")!r}' + config)))
        e = clean_env(**env)
        cmd = [PY, "prog.py"] if api else [str(CLI), "--collect-mode=deferred", *cli_options,
                                           f"--output={work / 'out'}", "--", PY, "prog.py"]
        p = subprocess.run(cmd, cwd=str(work), env=e, capture_output=True, text=True, timeout=600)
        assert p.returncode == 0, p.stdout + p.stderr
        [d] = process_dirs(work / "out")
        out.append((p, d))
    return out


def labels(stdout):
    return {int(m[2], 16): m[1] for m in re.finditer(r"^(\w+) 0x([0-9a-f]{16})$", stdout, re.M)}


def labels_in_order(stdout):
    """The program's names per address, in the order it printed them: a
    driver gives a freed address again, so one address may have several."""
    names = defaultdict(deque)
    for m in re.finditer(r"^(\w+) 0x([0-9a-f]{16})$", stdout, re.M):
        names[int(m[2], 16)].append(m[1])
    return names


def device_rows(p, d, device):
    """The device's dump, addresses replaced by the program's names for them:
    each MALLOC takes the next name printed for its address, the rows after
    it (its FREE) keep that name."""
    upcoming, current = labels_in_order(p.stdout), {}

    def named(text):
        return re.sub(r"0x[0-9a-f]{16}", lambda m: current.get(int(m[0], 16), m[0]), text)

    [dump] = dump_files(d, device)
    rows = []
    for r in read_dump(dump):
        if r["Event Type"] == "HOST":
            continue
        if r["Event"] == "MALLOC" and r["Ptr"].startswith("0x") and upcoming[int(r["Ptr"], 16)]:
            current[int(r["Ptr"], 16)] = upcoming[int(r["Ptr"], 16)].popleft()
        rows.append((r["Event"], r["Event Type"], r["Name"], r["Device Id"], named(r["Ptr"]), named(r["Attr"])))
    return rows


def leak_report(p):
    """The report's leak lines, addresses by name."""
    names = labels(p.stdout)
    lines = p.stdout.splitlines()
    at = lines.index("leaks: msmemscope's details (not in upstream's report):")
    out = []
    for line in lines[at + 1:]:
        if line.startswith("  files"):
            break
        out.append(re.sub(r"0x[0-9a-f]+", lambda m: names.get(int(m[0], 16), m[0]), line))
    return out


def hal(event, name, size, used, extra=""):
    aid = {"a": 1, "leak": 2}[name]
    return (event, "HAL", "N/A", "0", name,
            f"{{allocation_id:{aid},addr:{name},size:{size},used:{used},{extra}process_used:{used},device_used:{used}}}")


NPU_ROWS = [
    ("SYSTEM", "START_TRACE", "N/A", "0", "N/A", ""),
    hal("MALLOC", "a", MiB, MiB, "owner:CANN@RUNTIME,page_type:huge,alloc_type:alloc,"),
    ("KERNEL_LAUNCH", "KERNEL_LAUNCH", "N/A", "0", "N/A", "{streamId:1,taskId:1}"),
    hal("FREE", "a", MiB, 0),
    hal("MALLOC", "leak", 12345, 12345, "owner:CANN@RUNTIME,page_type:huge,alloc_type:alloc,"),
    ("SYSTEM", "STOP_TRACE", "N/A", "0", "N/A", ""),
    ("FREE", "HAL", "N/A", "0", "leak", "{allocation_id:2,addr:leak,size:12345,shadow:true}"),
]
NPU_LEAKS = ["  Driver memory still allocated at stop() on device 0: 1 block(s), 0.011773 Mb(s):",
             "    HAL block of 0.011773 Mb(s) at leak in kernel_1 at step 0"]  # after the first launch
NPU_ENV = {"ASCEND_SIM_DEVICE_MEM": str(128 * MiB), "LD_LIBRARY_PATH": str(SIM_LIB)}


@pytest.mark.parametrize("device", ["npu:0", None], ids=["npu0", "default"])
@pytest.mark.parametrize("before", [True, False], ids=["runtime_before_start", "runtime_after_start"])
def test_npu_rows_and_leaks_as_under_the_cli(tmp_path, device, before):
    def prog(api, output):
        config = output + ', level="kernel"' + (f", device={device!r}" if device else "")
        return NPU_PROG.format(sim=str(SIM_LIB), before=before, kept=False, api=api, config=config)

    opts = ["--level=kernel"] + ([f"--device={device}"] if device else [])
    (api, api_dir), (cli, cli_dir) = run_both(tmp_path, prog, "", opts, NPU_ENV)
    assert device_rows(api, api_dir, "0") == NPU_ROWS, api.stdout + api.stderr
    assert device_rows(cli, cli_dir, "0") == NPU_ROWS, cli.stdout + cli.stderr
    assert leak_report(api) == leak_report(cli) == NPU_LEAKS
    for p in (api, cli):
        assert "  0/HAL: peak 1.0 MiB, final 12.1 KiB" in p.stdout.splitlines(), p.stdout
    # a driver was there and was recorded: no word about a missing one
    assert "driver" not in api.stderr and "Warning" not in api.stderr, api.stderr


def never_recorded(pool, n, made="made before the hooks went in: without the CLI, before the first msmemscope.start()"):
    """The host's end-of-run warning about a pool's frees that paired with nothing."""
    return (f"[msmemscope] warning: {pool}: {n} free(s) of block(s) whose allocation was never recorded ({made}) were "
            "not written; the pool's figures and the leak analysis leave those blocks out")


def said_never_recorded(p):
    return [line for line in p.stderr.splitlines() if "whose allocation was never recorded" in line]


def test_npu_block_allocated_before_the_first_start_is_said_at_the_end(tmp_path):
    """Without the CLI the hooks go in at the first start(): a block the
    runtime allocated before it is unknown (the CLI's deferred collection
    writes it as a shadow MALLOC at start()), and its free writes no row;
    the pool's figures leave it out. The hal hook used to drop that free
    before the host saw it: nothing said it. It is passed on now, as the
    cuda hook's, and the run says it at the end, as for cuda."""
    def prog(api, output):
        return NPU_PROG.format(sim=str(SIM_LIB), before=True, kept=True, api=api,
                               config=output + ', level="kernel", device="npu:0"')

    (api, api_dir), (cli, cli_dir) = run_both(tmp_path, prog, "", ["--level=kernel", "--device=npu:0"], NPU_ENV)
    assert device_rows(api, api_dir, "0") == NPU_ROWS
    cli_rows = device_rows(cli, cli_dir, "0")
    # (with the Attr of a block recorded in a range: the decomposition's owner)
    assert cli_rows[1] == ("MALLOC", "HAL", "N/A", "0", "kept", "{allocation_id:1,addr:kept,size:8192,shadow:true,"
                                                                "owner:CANN@RUNTIME,page_type:huge,alloc_type:alloc}")
    assert ("FREE", "HAL", "N/A", "0", "kept",
            "{allocation_id:1,addr:kept,size:8192,used:12345,process_used:12345,device_used:12345}") in cli_rows
    assert leak_report(api) == leak_report(cli) == NPU_LEAKS
    assert said_never_recorded(api) == [never_recorded("0/HAL", 1)], api.stderr
    assert said_never_recorded(cli) == [], cli.stderr  # the CLI knew the block
    # the figures leave the block out: as in a run that never had it
    assert "  0/HAL: peak 1.0 MiB, final 12.1 KiB" in api.stdout.splitlines(), api.stdout


# Driver memory of every kind made before start() and freed after it, through
# a framework library's GOT slots (libascend_sim_framework.so: the hooks see
# its calls once start() has patched them, as torch_npu's): device blocks on
# devices 0 and 1, pinned host memory from halMemAlloc (memory space host,
# what aclrtMallocHost gets) and from aclrtHostRegisterV2, and a physical
# block of halMemCreate.
NPU_UNSEEN_PROG = """
import ctypes, os
import msmemscope

sim = {sim!r}
acl = ctypes.CDLL(os.path.join(sim, "libascendcl.so"))
fw = ctypes.CDLL(os.path.join(sim, "libascend_sim_framework.so"))
fw.fw_hal_alloc.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_ulonglong, ctypes.c_ulonglong]
fw.fw_hal_create.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_ulonglong, ctypes.c_uint32]
fw.fw_host_register.argtypes = [ctypes.c_void_p, ctypes.c_uint64, ctypes.c_uint32]
for f in (fw.fw_hal_free, fw.fw_hal_release, fw.fw_host_unregister):
    f.argtypes = [ctypes.c_void_p]
assert acl.aclInit(None) == 0

def alloc(label, n, dev=0, space=1):              # space 1: device memory, 2: host memory
    p = ctypes.c_void_p()
    assert fw.fw_hal_alloc(ctypes.byref(p), n, dev | (space << 10) | (33 << 56)) == 0
    print(f"{{label}} 0x{{p.value:016x}}", flush=True)
    return p

before = [alloc("d0a", 4096), alloc("d0b", 8192), alloc("d1", 16384, dev=1), alloc("hostblk", 4096, space=2)]
ws = ctypes.c_void_p()
assert fw.fw_hal_create(ctypes.byref(ws), 2 << 20, 0) == 0
print(f"ws 0x{{ws.value:016x}}", flush=True)
pinned = ctypes.create_string_buffer(16384)
assert fw.fw_host_register(pinned, 16384, 0x10000000) == 0  # ACL_HOST_REG_PINNED
print(f"pinned 0x{{ctypes.addressof(pinned):016x}}", flush=True)
if {api!r}:
    msmemscope.config({config})
msmemscope.start()
e = alloc("e", 3000)
assert fw.fw_hal_free(e) == 0
for p in before:
    assert fw.fw_hal_free(p) == 0
assert fw.fw_hal_release(ws) == 0
assert fw.fw_host_unregister(pinned) == 0
msmemscope.stop()
"""


def unseen_prog(device):
    def prog(api, output):
        return NPU_UNSEEN_PROG.format(sim=str(SIM_LIB), api=api, config=output + f", device={device!r}")
    return prog


def hal_rows(p, d, device):
    return [(r[0], r[4], r[5]) for r in device_rows(p, d, device) if r[1] == "HAL"]


@pytest.mark.parametrize("device, said", [
    ("npu", [never_recorded("0/HAL", 2), never_recorded("1/HAL", 1)]),
    ("npu:0,cpu", [never_recorded("0/HAL", 2)]),
], ids=["npu", "npu0_cpu"])
def test_npu_frees_of_blocks_made_before_start_said_once_per_pool(tmp_path, device, said):
    """Only device blocks the run collects are said, once per pool with
    their number: the hook asks the driver (drvMemGetAttribute) what an
    address it never saw is, as halMemFree also frees pinned host memory.
    Not said: a block of a device the run leaves out (npu:0: device 1),
    pinned host memory (halMemAlloc's host memory space, aclrtHostRegisterV2:
    cpu, whose frees the host counts but never warns about, as cuda's
    pinned memory), a halMemCreate handle (halMemRelease also ends handles
    the hook never sees: retained, imported). No row for any of them; under
    the CLI (deferred) the blocks are known and nothing is said."""
    opts = [f"--device={device}"]
    (api, api_dir), (cli, cli_dir) = run_both(tmp_path, unseen_prog(device), "", opts, NPU_ENV)
    assert said_never_recorded(api) == said, api.stderr
    rows = hal_rows(api, api_dir, "0")
    assert [r[:2] for r in rows] == [("MALLOC", "e"), ("FREE", "e")], rows
    if device == "npu":  # (with cpu, process_used and the ids count the host's blocks too)
        assert rows == [
            ("MALLOC", "e", "{allocation_id:1,addr:e,size:3000,used:3000,owner:CANN@APP,page_type:normal,"
                            "alloc_type:alloc,process_used:3000,device_used:3000}"),
            ("FREE", "e", "{allocation_id:1,addr:e,size:3000,used:0,process_used:0,device_used:0}")]
    assert "  0/HAL: peak 2.9 KiB, final 0 B" in api.stdout.splitlines(), api.stdout
    assert not (api_dir / "device_1").exists()  # device 1's free wrote nothing
    names = set(labels(api.stdout).values())
    assert names >= {"d0a", "d0b", "d1", "hostblk", "ws", "pinned", "e"}
    if "cpu" in device:  # no HOST_PINNED row: the pinned memory was never seen allocated
        [cpu_dump] = dump_files(api_dir, "cpu")
        assert not [r for r in read_dump(cpu_dump) if r["Event Type"] == "HOST_PINNED"]
    # under the CLI the hooks were there from the program's start: the
    # blocks are known (shadow MALLOCs at start()), their frees written
    assert said_never_recorded(cli) == [], cli.stderr
    freed = [r[1] for r in hal_rows(cli, cli_dir, "0") if r[0] == "FREE"]
    assert freed == ["e", "d0a", "d0b", "ws"], freed


def test_npu_driver_that_cannot_say_what_memory_is_records_nothing(tmp_path):
    """A driver without an answer from drvMemGetAttribute: the hook cannot
    tell a device block from pinned host memory, and passes nothing on (as
    before): nothing said, no row."""
    (tmp_path / "api").mkdir()
    prog = unseen_prog("npu")(True, f'output={str(tmp_path / "api" / "out")!r}')
    (tmp_path / "api" / "prog.py").write_text(textwrap.dedent(prog))
    p = subprocess.run([PY, "prog.py"], cwd=str(tmp_path / "api"),
                       env=clean_env(ASCEND_SIM_NO_MEM_ATTR="1", **NPU_ENV), capture_output=True, text=True,
                       timeout=600)
    assert p.returncode == 0, p.stdout + p.stderr
    assert said_never_recorded(p) == [], p.stderr
    [d] = process_dirs(tmp_path / "api" / "out")
    assert [r[0] for r in hal_rows(p, d, "0")] == ["MALLOC", "FREE"]


def test_npu_free_of_a_block_the_hooks_never_saw_under_the_cli(tmp_path):
    """Under the CLI the hooks see every allocation made through the
    driver's entry points; a block allocated around them (here a ctypes
    call, which no preloaded library interposes) and freed through them is
    said at the end and writes no row, as with cuda."""
    (tmp_path / "prog.py").write_text(textwrap.dedent("""
        import ctypes, os
        sim = %r
        hal = ctypes.CDLL(os.path.join(sim, "libascend_hal.so"))
        fw = ctypes.CDLL(os.path.join(sim, "libascend_sim_framework.so"))
        fw.fw_hal_free.argtypes = [ctypes.c_void_p]
        p = ctypes.c_void_p()
        assert hal.halMemAlloc(ctypes.byref(p), ctypes.c_ulonglong(4096), ctypes.c_ulonglong(1 << 10)) == 0
        assert fw.fw_hal_free(p) == 0
        """ % str(SIM_LIB)))
    p = subprocess.run([str(CLI), "--device=npu", "--output=out", "--", PY, "prog.py"], cwd=str(tmp_path),
                       env=clean_env(**NPU_ENV), capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stdout + p.stderr
    assert said_never_recorded(p) == [never_recorded("0/HAL", 1, "made through an entry point the hooks do not cover")], \
        p.stderr
    [d] = process_dirs(tmp_path / "out")
    assert not dump_files(d, "0") or not [r for r in read_dump(dump_files(d, "0")[0]) if r["Event Type"] == "HAL"]


CUDA_PROG = """
import ctypes, os
import msmemscope

def init():
    rt = ctypes.CDLL(os.path.join({lib!r}, "libfakecudart.so"))
    rt.fakertFree.argtypes = [ctypes.c_void_p]
    assert rt.fakertInit() == 0 and rt.fakertSetDevice(0) == 0
    return rt

def malloc(rt, n, label):
    p = ctypes.c_void_p()
    assert rt.fakertMalloc(ctypes.byref(p), ctypes.c_size_t(n)) == 0
    print(f"{{label}} 0x{{p.value:016x}}", flush=True)
    return p

rt = init() if {before!r} else None
if {api!r}:
    msmemscope.config({config})
msmemscope.start()
if rt is None:
    rt = init()                                  # the runtime started after start()
cu = ctypes.CDLL("libcuda.so.1")                 # the driver API itself (ctypes: dlsym on its handle)
d = ctypes.c_uint64()
assert cu.cuMemAlloc_v2(ctypes.byref(d), ctypes.c_size_t(3000)) == 0
print(f"direct 0x{{d.value:016x}}", flush=True)
assert cu.cuMemFree_v2(d) == 0
a = malloc(rt, 1 << 20, "a")
rt.fakertFree(a)
leak = malloc(rt, 12345, "leak")
libc = ctypes.CDLL("libc.so.6")                  # the host heap through dlsym too (with device cpu)
libc.malloc.restype = ctypes.c_void_p
libc.free.argtypes = [ctypes.c_void_p]
h = libc.malloc(777777)
print(f"host 0x{{h:016x}}", flush=True)
libc.free(h)
msmemscope.stop()
"""
CUDA_ENV = {"LD_LIBRARY_PATH": str(CUDA_LIB)}


def cuda_rows(names, used_before=0):
    ids = {n: i + 1 for i, n in enumerate(names)}
    sizes = {"direct": 3000, "a": MiB, "leak": 12345}
    rows, used = [("SYSTEM", "START_TRACE", "N/A", "0", "N/A", "")], 0
    for n in names:
        used += sizes[n]
        rows.append(("MALLOC", "HAL", "N/A", "0", n, f"{{allocation_id:{ids[n]},addr:{n},size:{sizes[n]},used:{used},"
                     f"alloc_type:alloc,process_used:{used},device_used:{used},driver:cuda}}"))
        if n != "leak":
            used -= sizes[n]
            rows.append(("FREE", "HAL", "N/A", "0", n, f"{{allocation_id:{ids[n]},addr:{n},size:{sizes[n]},"
                         f"used:{used},process_used:{used},device_used:{used}}}"))
    rows += [("SYSTEM", "STOP_TRACE", "N/A", "0", "N/A", ""),
             ("FREE", "HAL", "N/A", "0", "leak", f"{{allocation_id:{ids['leak']},addr:leak,size:12345,shadow:true}}")]
    return rows


CUDA_LEAKS = ["  Driver memory still allocated at stop() on device 0: 1 block(s), 0.011773 Mb(s):",
              "    HAL block of 0.011773 Mb(s) at leak in kernel_0 at step 0"]


def host_rows(p, d):
    names = labels(p.stdout)
    [dump] = dump_files(d, "cpu")
    return [(r["Event"], r["attr"]["size"]) for r in read_dump(dump)
            if r["Event Type"] == "HOST" and names.get(int(r["Ptr"], 16)) == "host"]


def test_cuda_runtime_started_after_start_as_under_the_cli(tmp_path):
    def prog(api, output):
        return CUDA_PROG.format(lib=str(CUDA_LIB), before=False, api=api, config=output + ', device="cuda"')

    (api, api_dir), (cli, cli_dir) = run_both(tmp_path, prog, "", ["--device=cuda"], CUDA_ENV)
    assert device_rows(api, api_dir, "0") == device_rows(cli, cli_dir, "0") == cuda_rows(["direct", "a", "leak"])
    assert leak_report(api) == leak_report(cli) == CUDA_LEAKS
    assert "Warning" not in api.stderr, api.stderr


def test_cuda_and_cpu_both_dlsym_hooks_answer(tmp_path):
    """cuda's and host_heap's hooks both interpose dlsym: installed by GOT
    patching, the later one's trampoline goes on to the earlier one's, as
    preloaded ones do (before, the later one replaced the other and the
    driver's memory was not recorded at all)."""
    def prog(api, output):
        return CUDA_PROG.format(lib=str(CUDA_LIB), before=False, api=api, config=output + ', device="cuda,cpu"')

    (api, api_dir), (cli, cli_dir) = run_both(tmp_path, prog, "", ["--device=cuda,cpu"], CUDA_ENV)
    strip = [(e, t, n, dev, ptr, re.sub(r"allocation_id:\d+,|process_used:\d+,", "", a))
             for e, t, n, dev, ptr, a in cuda_rows(["direct", "a", "leak"])]
    for p, d in ((api, api_dir), (cli, cli_dir)):
        got = [(e, t, n, dev, ptr, re.sub(r"allocation_id:\d+,|process_used:\d+,", "", a))
               for e, t, n, dev, ptr, a in device_rows(p, d, "0")]
        assert got == strip, p.stdout + p.stderr
    # ctypes.CDLL("libc.so.6").malloc: host_heap's dlsym answered too, under
    # the CLI's preloaded pair as well (there cuda's trampoline went on to
    # libc's dlsym, found by its version, and skipped host_heap's, which has
    # none: the block was missing)
    assert host_rows(api, api_dir) == [("MALLOC", "777777"), ("FREE", "777777")], api.stdout + api.stderr
    assert host_rows(cli, cli_dir) == [("MALLOC", "777777"), ("FREE", "777777")], cli.stdout + cli.stderr


def test_cuda_block_allocated_before_the_first_start_is_said_at_the_end(tmp_path):
    """A driver block allocated before the first start() (the hooks go in
    then) and freed after it: its free pairs with nothing and is not
    written; the pool's figures leave it out. That was said only in the
    README; the run now says it."""
    (tmp_path / "prog.py").write_text(textwrap.dedent("""
        import ctypes, os, msmemscope
        rt = ctypes.CDLL(os.path.join(%r, "libfakecudart.so"))
        assert rt.fakertInit() == 0 and rt.fakertSetDevice(0) == 0
        before = ctypes.CDLL("libcuda.so.1")
        d = ctypes.c_uint64()
        assert before.cuMemAlloc_v2(ctypes.byref(d), ctypes.c_size_t(4096)) == 0  # before start()
        msmemscope.config(output="out", device="cuda")
        msmemscope.start()
        cu = ctypes.CDLL("libcuda.so.1")  # its functions looked up now: through the hooks
        e = ctypes.c_uint64()
        assert cu.cuMemAlloc_v2(ctypes.byref(e), ctypes.c_size_t(3000)) == 0
        assert cu.cuMemFree_v2(e) == 0
        assert cu.cuMemFree_v2(d) == 0  # its free: nothing to pair with
        msmemscope.stop()
        """ % str(CUDA_LIB)))
    p = subprocess.run([PY, "prog.py"], cwd=str(tmp_path), env=clean_env(**CUDA_ENV), capture_output=True, text=True,
                       timeout=600)
    assert p.returncode == 0, p.stdout + p.stderr
    [d] = process_dirs(tmp_path / "out")
    [dump] = dump_files(d, "0")
    assert [(r["Event"], r["attr"].get("size")) for r in read_dump(dump) if r["Event Type"] == "HAL"] == [
        ("MALLOC", "3000"), ("FREE", "3000")]
    assert ("[msmemscope] warning: 0/HAL: 1 free(s) of block(s) whose allocation was never recorded (made before the "
            "hooks went in: without the CLI, before the first msmemscope.start()) were not written; the pool's figures "
            "and the leak analysis leave those blocks out") in p.stderr.splitlines(), p.stderr


def test_cuda_runtime_started_before_start_is_said_at_start(tmp_path):
    """A CUDA runtime looks the driver's functions up once and calls them
    through those pointers: started before start(), its memory cannot be
    reached by GOT patching. start() says so, at the program's line; the
    driver API called directly is recorded."""
    def prog(api, output):
        return CUDA_PROG.format(lib=str(CUDA_LIB), before=True, api=api, config=output + ', device="cuda"')

    (api, api_dir), (cli, cli_dir) = run_both(tmp_path, prog, "", ["--device=cuda"], CUDA_ENV)
    line = textwrap.dedent(prog(True, "")).splitlines().index("msmemscope.start()") + 1
    warning = (f"prog.py:{line}: UserWarning: msmemscope: the CUDA driver (libcuda.so.1) was loaded before "
               "msmemscope.start(): device memory that a CUDA runtime (cudaMalloc, PyTorch) allocates through the "
               "driver functions it looked up before start() is not recorded without the CLI; to record it, start "
               "the collection before the first CUDA call, or run the program under the CLI (msmemscope "
               "--device=cuda -- python ...)")
    lines = api.stderr.splitlines()
    assert [line[line.index("prog.py:"):] for line in lines if "UserWarning" in line] == [warning], api.stderr
    assert device_rows(api, api_dir, "0") == [
        ("SYSTEM", "START_TRACE", "N/A", "0", "N/A", ""),
        ("MALLOC", "HAL", "N/A", "0", "direct", "{allocation_id:1,addr:direct,size:3000,used:3000,alloc_type:alloc,"
         "process_used:3000,device_used:3000,driver:cuda}"),
        ("FREE", "HAL", "N/A", "0", "direct", "{allocation_id:1,addr:direct,size:3000,used:0,process_used:0,"
         "device_used:0}"),
        ("SYSTEM", "STOP_TRACE", "N/A", "0", "N/A", "")]
    assert device_rows(cli, cli_dir, "0") == cuda_rows(["direct", "a", "leak"])
    assert "UserWarning" not in cli.stderr


NVTX_PROG = """
import ctypes, os
import msmemscope
nv = ctypes.CDLL(os.path.join({lib!r}, "libfakenvtx.so"))
nv.nvtxRangePushA.argtypes = [ctypes.c_char_p]
nv.nvtxMarkA.argtypes = [ctypes.c_char_p]
if {early!r}:
    nv.nvtxMarkA(b"early")                       # NVTX's first call: it looks for its tool now
if {api!r}:
    msmemscope.config({config})
msmemscope.start()
print("push", nv.nvtxRangePushA(b"outer"))
nv.nvtxMarkA(b"hello")
print("pop", nv.nvtxRangePop())
msmemscope.stop()
"""


def mstx_rows(d):
    [dump] = dump_files(d, "cpu")
    return [(r["Event Type"], r["Name"]) for r in read_dump(dump) if r["Event"] == "MSTX"]


def test_nvtx_first_used_after_start_is_recorded_as_under_the_cli(tmp_path):
    """NVTX finds its tool (NVTX_INJECTION64_PATH) at its first call: start()
    loads the cuda hook library, which sets it, so marks and ranges of an
    NVTX first used after start() are the CLI's rows."""
    def prog(api, output):
        return NVTX_PROG.format(lib=str(CUDA_LIB), early=False, api=api, config=output + ', device="cuda"')

    (api, api_dir), (cli, cli_dir) = run_both(tmp_path, prog, "", ["--device=cuda"], CUDA_ENV)
    want = [("Range_start", "outer"), ("Mark", "hello"), ("Range_end", "outer")]
    assert mstx_rows(api_dir) == mstx_rows(cli_dir) == want
    assert "push 0" in api.stdout and "pop 0" in api.stdout


def test_nvtx_first_used_before_start_is_not_recorded_without_the_cli(tmp_path):
    """An NVTX library whose first call came before start() has looked for
    its tool already and stays without one (README: what the Python API
    alone cannot have); under the CLI the same program's marks are all
    recorded (the variable is set before the program starts)."""
    def prog(api, output):
        return NVTX_PROG.format(lib=str(CUDA_LIB), early=True, api=api, config=output + ', device="cuda"')

    (api, api_dir), (cli, cli_dir) = run_both(tmp_path, prog, "", ["--device=cuda"], CUDA_ENV)
    assert mstx_rows(api_dir) == [] and "push -2" in api.stdout
    assert mstx_rows(cli_dir) == [("Range_start", "outer"), ("Mark", "hello"), ("Range_end", "outer")]
