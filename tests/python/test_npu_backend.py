"""npu backend (Ascend) against the simulated driver/runtime (tests/fixtures/ascend).

The program is tests/programs/npu/train.c: two devices, five mstx "step start"
ranges, a ptaCaching pool per device, a PTA block leaked in step 3 on device 1,
an out-of-memory halMemAlloc in step 5 on device 1 (device capacity 128 MiB).
"""
import ctypes
import os
import re
import subprocess
import sys

import pytest

from conftest import BUILD, TEST_BIN, dump_files, process_dirs, read_dump

MiB = 1 << 20
SIM_LIB = BUILD / "tests" / "lib" / "ascend"
SIM_LIB_NOINNER = BUILD / "tests" / "lib" / "ascend_noinner"
PLUGINS = BUILD / "lib" / "msmemscope" / "plugins"
SIM_ENV = {"ASCEND_SIM_DEVICE_MEM": str(128 * MiB)}


def hexptr(v):
    return "0x%016x" % v


def run_train(cli, tmp_path, *opts, env=None, prog="npu_train", level="kernel"):
    """The programs launch kernels (no framework operators): run at kernel
    level, whose launches upstream's default level (op) does not record;
    test_level.py covers the levels themselves."""
    out = tmp_path / "out"
    e = dict(SIM_ENV)
    if env:
        e.update(env)
    lv = [f"--level={level}"] if level else []
    p = cli([*lv, *opts, f"--output={out}", "--", TEST_BIN / prog], cwd=tmp_path, env=e, check_rc=0)
    dirs = process_dirs(out)
    assert len(dirs) == 1, dirs
    return p, dirs[0]


def program_facts(stdout):
    """Addresses the program printed (its stdout passes through the CLI)."""
    f = {"pool": {}, "ws": {}, "tmp": {}}
    for m in re.finditer(r"^device (\d) pool 0x([0-9a-f]+) workspace 0x([0-9a-f]+)$", stdout, re.M):
        f["pool"][int(m[1])] = int(m[2], 16)
        f["ws"][int(m[1])] = int(m[3], 16)
    for m in re.finditer(r"^step (\d) device (\d) tmp 0x([0-9a-f]+)$", stdout, re.M):
        f["tmp"][(int(m[1]), int(m[2]))] = int(m[3], 16)
    m = re.search(r"^host block 0x([0-9a-f]+) pinned 0x([0-9a-f]+)$", stdout, re.M)
    f["host_block"], f["pinned"] = int(m[1], 16), int(m[2], 16)
    m = re.search(r"^step 3 device 1: leaking 0x([0-9a-f]+)$", stdout, re.M)
    f["leak"] = int(m[1], 16)
    return f


class Accounting:
    """Mirrors the host's numbering and running totals for the expected rows."""

    def __init__(self):
        self.next_id = 0
        self.live = {}  # (pool, ptr) -> (id, size)
        self.used = {}
        self.peak = {}
        self.driver = 0  # HAL bytes of this device = process_used = device_used

    def malloc(self, pool, ptr, size, extra):
        self.next_id += 1
        self.live[(pool, ptr)] = (self.next_id, size)
        self.used[pool] = self.used.get(pool, 0) + size
        self.peak[pool] = max(self.peak.get(pool, 0), self.used[pool])
        if pool == "HAL":
            self.driver += size
        a = {"allocation_id": str(self.next_id), "addr": hexptr(ptr), "size": str(size),
             "used": str(self.used[pool]), "process_used": str(self.driver), "device_used": str(self.driver)}
        a.update(extra)
        return ("MALLOC", pool, "N/A", "1", hexptr(ptr), a)

    def free(self, pool, ptr):
        aid, size = self.live.pop((pool, ptr))
        self.used[pool] -= size
        if pool == "HAL":
            self.driver -= size
        a = {"allocation_id": str(aid), "addr": hexptr(ptr), "size": str(size), "used": str(self.used[pool]),
             "process_used": str(self.driver), "device_used": str(self.driver)}
        return ("FREE", pool, "N/A", "1", hexptr(ptr), a)


def expected_device1(f):
    """The rows of device_1's dump for --device=npu:1, in order."""
    acc = Accounting()
    pool, ws = f["pool"][1], f["ws"][1]
    na = ("1", "N/A")  # rows without a device: this file's Device Id, as upstream writes the current device
    rows = [("SYSTEM", "START_TRACE", "N/A", *na, {}), ("SYSTEM", "ACL_INIT", "N/A", *na, {})]
    rows.append(acc.malloc("HAL", pool, 64 * MiB, {"owner": "CANN@RUNTIME", "page_type": "huge", "alloc_type": "alloc"}))
    rows.append(acc.malloc("HAL", ws, 2 * MiB, {"owner": "CANN@HCCL", "page_type": "normal", "alloc_type": "create"}))
    task = 0
    leaked = None
    for step in range(1, 6):
        rows.append(("MSTX", "Range_start", "step start", *na, {}))
        a, b = pool, pool + 4 * MiB + (step - 1) * 8 * MiB
        rows.append(acc.malloc("PTA", a, 4 * MiB, {"total": str(64 * MiB)}))
        rows.append(acc.malloc("PTA", b, 8 * MiB, {"total": str(64 * MiB)}))
        for kernel in ("add_kernel", "matmul_kernel"):
            task += 1
            rows.append(("KERNEL_LAUNCH", "KERNEL_LAUNCH", kernel, "1", "N/A", {"streamId": "1", "taskId": str(task)}))
        tmp = f["tmp"][(step, 1)]
        rows.append(acc.malloc("HAL", tmp, 1 * MiB, {"owner": "CANN@APP", "page_type": "normal", "alloc_type": "alloc"}))
        rows.append(acc.free("HAL", tmp))
        if step == 5:
            flag = 1 | (1 << 10) | (33 << 56)
            # without --analysis=oom upstream writes the snapshot only
            # (hal_hooks.cpp HandleOOM), with the framework's numbers: the
            # PTA tensors live (not the HAL segment under them again) and
            # the caching allocator's reserved (the PTA rows' total)
            alloc = acc.used["PTA"]
            rows.append(("SNAPSHOT", "SNAPSHOT", "OOM_Snapshot", "1", "N/A", {
                "reserved": str(64 * MiB), "max_reserved": str(64 * MiB), "allocated": str(alloc),
                "max_allocated": str(acc.peak["PTA"]), "total": "0", "free": "0", "device_rate": "0.000000",
                "reserved_rate": f"{100 * alloc / (64 * MiB):f}"}))
        rows.append(acc.free("PTA", a))
        if step == 3:
            leaked = b
        else:
            rows.append(acc.free("PTA", b))
        rows.append(("MSTX", "Range_end", "step start", *na, {}))
    for kernel in ("add_kernel", "aicpu_op", "matmul_kernel"):
        task += 1
        rows.append(("KERNEL_LAUNCH", "KERNEL_LAUNCH", kernel, "1", "N/A", {"streamId": "1", "taskId": str(task)}))
    rows.append(("MSTX", "Mark", "training done", *na, {}))
    rows.append(acc.free("HAL", ws))
    rows.append(acc.free("HAL", pool))
    rows.append(("SYSTEM", "ACL_FINI", "N/A", *na, {}))
    assert leaked == f["leak"]
    # the block still live at the end: a FREE with shadow:true (COMPAT §8)
    aid, size = acc.live[("PTA", leaked)]
    rows.append(("FREE", "PTA", "N/A", "1", hexptr(leaked),
                 {"allocation_id": str(aid), "addr": hexptr(leaked), "size": str(size), "shadow": "true"}))
    return rows


def as_tuples(rows):
    return [(r["Event"], r["Event Type"], r["Name"], r["Device Id"], r["Ptr"], r["attr"]) for r in rows]


def test_device1_rows(cli, tmp_path):
    p, d = run_train(cli, tmp_path, "--device=npu:1", "--analysis=")
    f = program_facts(p.stdout)
    assert sorted(x.name for x in d.iterdir() if x.name.startswith("device_")) == ["device_1"]
    [dump] = dump_files(d, "1")
    rows = read_dump(dump)
    assert [r["ID"] for r in rows] == [str(i) for i in range(1, len(rows) + 1)]
    assert len({r["Process Id"] for r in rows}) == 1
    assert as_tuples(rows) == expected_device1(f)
    # the frees of device 0's blocks and of the host-memory driver block,
    # which the run leaves out, pass the hal hook unrecorded: nothing said
    assert "never recorded" not in p.stderr, p.stderr


def test_device0_and_pinned_host_memory(cli, tmp_path):
    p, d = run_train(cli, tmp_path, "--device=npu:0,cpu", "--analysis=")
    f = program_facts(p.stdout)
    assert sorted(x.name for x in d.iterdir() if x.name.startswith("device_")) == ["device_0", "device_cpu"]
    rows0 = read_dump(dump_files(d, "0")[0])
    hal0 = [(r["Event"], r["Ptr"], r["attr"]["size"], r["attr"].get("owner")) for r in rows0 if r["Event Type"] == "HAL"]
    expected = [("MALLOC", hexptr(f["pool"][0]), str(64 * MiB), "CANN@RUNTIME"),
                ("MALLOC", hexptr(f["ws"][0]), str(2 * MiB), "CANN@HCCL")]
    for step in range(1, 6):
        t = hexptr(f["tmp"][(step, 0)])
        expected += [("MALLOC", t, str(MiB), "CANN@APP"), ("FREE", t, str(MiB), None)]
    expected += [("FREE", hexptr(f["ws"][0]), str(2 * MiB), None), ("FREE", hexptr(f["pool"][0]), str(64 * MiB), None)]
    assert hal0 == expected
    assert not [r for r in rows0 if r["Event"] == "OOM_DETAIL"]  # the failure was on device 1
    assert {r["Device Id"] for r in rows0 if r["Event"] in ("MALLOC", "FREE", "KERNEL_LAUNCH")} == {"0"}
    assert [r["Name"] for r in rows0 if r["Event"] == "KERNEL_LAUNCH"] == ["add_kernel", "matmul_kernel"] * 5
    # The leaked block is on device 1: every PTA block of device 0 is freed.
    pta0 = [r for r in rows0 if r["Event Type"] == "PTA"]
    assert len(pta0) == 20 and pta0[-1]["attr"]["used"] == "0"

    rows_cpu = read_dump(dump_files(d, "cpu")[0])
    pinned = [(r["Event"], r["Event Type"], r["Device Id"], r["Ptr"], r["attr"]) for r in rows_cpu
              if r["Event Type"] == "HOST_PINNED"]
    reg, blk = hexptr(f["pinned"]), hexptr(f["host_block"])
    assert [(e, t, dev, ptr) for e, t, dev, ptr, _ in pinned] == [
        ("MALLOC", "HOST_PINNED", "cpu", reg), ("FREE", "HOST_PINNED", "cpu", reg),
        ("MALLOC", "HOST_PINNED", "cpu", blk), ("FREE", "HOST_PINNED", "cpu", blk)]
    assert pinned[0][4]["size"] == "16384" and pinned[0][4]["pinned"] == "true"
    assert pinned[2][4]["size"] == str(MiB) and pinned[2][4]["pinned"] == "true"
    assert pinned[1][4]["allocation_id"] == pinned[0][4]["allocation_id"]
    assert pinned[3][4]["allocation_id"] == pinned[2][4]["allocation_id"]
    assert "never recorded" not in p.stderr, p.stderr  # device 1's frees: left out, not said


def test_older_driver_without_inner_entry_points(cli, tmp_path):
    hal = ctypes.CDLL(str(SIM_LIB_NOINNER / "libascend_hal.so"))
    assert not hasattr(hal, "halMemAllocInner") and hasattr(hal, "halMemAlloc")
    assert hasattr(ctypes.CDLL(str(SIM_LIB / "libascend_hal.so")), "halMemAllocInner")
    env = {"LD_LIBRARY_PATH": f"{SIM_LIB_NOINNER}:{SIM_LIB}"}
    p, d = run_train(cli, tmp_path, "--device=npu:1", "--analysis=", env=env)
    f = program_facts(p.stdout)
    rows = read_dump(dump_files(d, "1")[0])
    assert as_tuples(rows) == expected_device1(f)


def test_launch_only(cli, tmp_path):
    _, d = run_train(cli, tmp_path, "--device=npu:1", "--events=launch", "--analysis=")
    rows = read_dump(dump_files(d, "1")[0])
    assert not [r for r in rows if r["Event"] in ("MALLOC", "FREE")]
    assert [r["Name"] for r in rows if r["Event"] == "KERNEL_LAUNCH"] == \
        ["add_kernel", "matmul_kernel"] * 5 + ["add_kernel", "aicpu_op", "matmul_kernel"]
    assert [r["Event Type"] for r in rows if r["Event"] == "MSTX"] == ["Range_start", "Range_end"] * 5 + ["Mark"]


def test_without_profiler_mstx_is_silent(tmp_path):
    e = dict(os.environ, **SIM_ENV)
    e.pop("LD_PRELOAD", None)
    e.pop("MSTX_INJECTION_PATH", None)
    p = subprocess.run([str(TEST_BIN / "npu_train")], env=e, capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    assert re.findall(r"^step (\d) range (\d+)$", p.stdout, re.M) == [(str(s), "0") for s in range(1, 6)]
    assert "step 5 device 1: halMemAlloc(96 MiB) = 6" in p.stdout


def have_plugin(name):
    return (PLUGINS / f"libmsmemscope_plugin_{name}.so").exists()


@pytest.mark.skipif(not have_plugin("leaks"), reason="leaks analyzer (plugins/analyzers/leaks) not built")
def test_leak_in_step_3(cli, tmp_path):
    p, d = run_train(cli, tmp_path, "--device=npu:1", "--analysis=leaks")
    f = program_facts(p.stdout)
    leak = f["leak"]
    lines = p.stdout.splitlines()
    # upstream's report lines, at column 0 (csrc/analysis/stepinner_analyzer.cpp ReportLeak)
    i = lines.index("====== ERROR: Detected memory leaks on device 1 ======")
    direct = lines[i + 1]
    assert direct.startswith(f"Direct Pytorch Caching memory pool leak of 8.000000 Mb(s) at 0x{leak:x} in kernel_"), direct
    assert direct.endswith(" at step 3.")
    assert lines[i + 2] == "====== SUMMARY: 8 Mb(s) leaked in 1 allocation(s) ======"
    # the online step check names the block one whole step later
    assert f"leaks: [device 1][step 4]: ptr: 0x{leak:x} has lasted for 1 steps. Please check if there is leaks in PTA." \
        in p.stderr


@pytest.mark.skipif(not have_plugin("oom"), reason="oom analyzer (plugins/analyzers/oom) not built")
def test_oom_detail(cli, tmp_path):
    p, d = run_train(cli, tmp_path, "--device=npu:1", "--analysis=oom")
    f = program_facts(p.stdout)
    rows = read_dump(dump_files(d, "1")[0])
    flag = 1 | (1 << 10) | (33 << 56)
    [trig] = [r for r in rows if r["Event Type"] == "OOM_TRIGGER"]
    assert (trig["Name"], trig["Device Id"], trig["attr"]) == (
        "OOM_Trigger", "1", {"func": "halMemAlloc", "req_size": str(96 * MiB), "flag": str(flag), "ret": "6"})
    # upstream's order (hal_hooks.cpp HandleOOM): the snapshot just before the trigger
    i = rows.index(trig)
    assert (rows[i - 1]["Event"], rows[i - 1]["Name"], rows[i - 1]["Device Id"]) == ("SNAPSHOT", "OOM_Snapshot", "1")
    assert rows[i - 1]["attr"]["allocated"] == str(20 * MiB)  # the PTA tensors live: 4 + 8 + the 8 MiB leak
    pool, ws = f["pool"][1], f["ws"][1]
    live = {("HAL", pool, 64 * MiB), ("HAL", ws, 2 * MiB), ("PTA", f["leak"], 8 * MiB),
            ("PTA", pool, 4 * MiB), ("PTA", pool + 4 * MiB + 4 * 8 * MiB, 8 * MiB)}

    def blocks(kind):
        return [(r["attr"]["pool"], int(r["attr"]["ptr"], 16), int(r["attr"]["size"]))
                for r in rows if r["Event Type"] == kind]
    recent, top = blocks("OOM_RECENT_ALLOC"), blocks("OOM_TOP_ALLOC")
    assert set(recent) == live and len(recent) == 5
    assert set(top) == live and top[0] == ("HAL", pool, 64 * MiB)
    assert [s for _, _, s in top] == sorted((s for _, _, s in top), reverse=True)
    assert all(r["Device Id"] == "1" for r in rows if r["Event"] == "OOM_DETAIL")


def test_snapshot(cli, tmp_path):
    out = tmp_path / "out"
    p = cli(["--device=npu", "--analysis=", f"--output={out}", "--", TEST_BIN / "npu_snapshot"], cwd=tmp_path,
            env=SIM_ENV, check_rc=0)
    assert "snapshot rc 0 1" in p.stdout
    [d] = process_dirs(out)
    rows = read_dump(dump_files(d, "1")[0])
    snaps = [(r["Event"], r["Event Type"], r["Name"], r["Device Id"], r["attr"]) for r in rows if r["Event"] == "SNAPSHOT"]
    # upstream's keys, order and "%f" rates (csrc/analysis/dump.cpp); the
    # framework numbers the caller did not give are 0, as upstream writes them
    assert snaps == [("SNAPSHOT", "SNAPSHOT", "after alloc", "1",
                      {"reserved": "0", "max_reserved": "0", "allocated": "0", "max_allocated": "0",
                       "total": str(128 * MiB), "free": str(96 * MiB), "device_rate": "25.000000",
                       "reserved_rate": "0.000000"})]
    assert list(snaps[0][4]) == ["reserved", "max_reserved", "allocated", "max_allocated", "total", "free",
                                 "device_rate", "reserved_rate"]


def test_no_ascend_software_needed():
    """The collectors' hook libraries load in a process without any Ascend library."""
    agent_dir = BUILD / "lib" / "msmemscope" / "agent"
    code = ("import ctypes,sys\n"
            "for n in sys.argv[1:]: ctypes.CDLL(n)\n"
            "print('ok')\n")
    libs = [str(BUILD / "lib" / "msmemscope" / "libmsmemscope_agent.so")] + \
        [str(agent_dir / f"libmsms_{n}_hook.so") for n in ("hal", "kernel_launch", "mstx")]
    e = dict(os.environ)
    e.pop("LD_LIBRARY_PATH", None)
    p = subprocess.run([sys.executable, "-c", code, *libs], env=e, capture_output=True, text=True, timeout=60)
    assert p.stdout.strip() == "ok", p.stderr
