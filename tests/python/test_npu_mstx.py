"""mstx: the Python `mstx` module (bindings/mstx, over sdk/mstx's
libms_tools_ext.so) and the mstx collector's injection (MSTX_INJECTION_PATH)."""
import os
import subprocess
import sys

from conftest import BUILD, dump_files, process_dirs, read_dump

PYPATH = str(BUILD / "python")
MSTX_HOOK = BUILD / "lib" / "msmemscope" / "agent" / "libmsms_mstx_hook.so"

SCRIPT = """
import os, mstx
mstx.mark("hello")
rid = mstx.range_start("step start", None)
inner = mstx.range_start("forward", None)
mstx.range_end(inner)
mstx.range_end(rid)
print("ids", rid, inner)
print("lib", os.path.basename(mstx.library_path))
print("injection", os.environ.get("MSTX_INJECTION_PATH", ""))
"""


def python_env():
    e = {"PYTHONPATH": PYPATH, "PYTHONDONTWRITEBYTECODE": "1"}
    return e


def test_python_mstx_under_profiler(cli, tmp_path):
    script = tmp_path / "marks.py"
    script.write_text(SCRIPT)
    out = tmp_path / "out"
    p = cli(["--device=npu", "--analysis=", f"--output={out}", "--", "/usr/bin/python3", script], cwd=tmp_path,
            env=python_env(), check_rc=0)
    assert "ids 1 2" in p.stdout.splitlines()
    assert "lib libms_tools_ext.so" in p.stdout.splitlines()
    assert f"injection {MSTX_HOOK.resolve()}" in p.stdout.splitlines()
    [d] = process_dirs(out)
    [dump] = dump_files(d, "cpu")  # rows without a device only: one file (cpu), its Device Id, no Attr
    rows = [(r["Event"], r["Event Type"], r["Name"], r["Device Id"], r["Attr"]) for r in read_dump(dump)
            if r["Event"] == "MSTX"]
    assert rows == [("MSTX", "Mark", "hello", "cpu", ""),
                    ("MSTX", "Range_start", "step start", "cpu", ""),
                    ("MSTX", "Range_start", "forward", "cpu", ""),
                    ("MSTX", "Range_end", "forward", "cpu", ""),
                    ("MSTX", "Range_end", "step start", "cpu", "")]


def test_python_mstx_without_profiler(tmp_path):
    script = tmp_path / "marks.py"
    script.write_text(SCRIPT)
    e = dict(os.environ, **python_env())
    e.pop("LD_PRELOAD", None)
    e.pop("MSTX_INJECTION_PATH", None)
    p = subprocess.run(["/usr/bin/python3", str(script)], env=e, capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    assert p.stdout.splitlines()[:2] == ["ids 0 0", "lib libms_tools_ext.so"]


def test_python_mstx_rejects_none_message(tmp_path):
    e = dict(os.environ, **python_env())
    e.pop("LD_PRELOAD", None)
    code = "import mstx\ntry:\n    mstx.mark(None)\nexcept ValueError as ex:\n    print(ex)\n"
    p = subprocess.run(["/usr/bin/python3", "-c", code], env=e, capture_output=True, text=True, timeout=60)
    assert p.stdout.strip() == "mstx: message must not be None", p.stderr


def test_injection_by_path_only(tmp_path):
    """An mstx library that only honours MSTX_INJECTION_PATH (no preload) still
    finds the tool: the hook library is loaded by dlopen from the variable."""
    code = ("import ctypes, mstx\n"
            "print(mstx.range_start('x', None))\n"
            "tool = ctypes.c_uint64(0)\n"
            "mstx._lib.mstxGetToolId(ctypes.byref(tool))\n"
            "print(hex(tool.value))\n")
    e = dict(os.environ, **python_env())
    e.pop("LD_PRELOAD", None)
    e["MSTX_INJECTION_PATH"] = str(MSTX_HOOK)
    # the hook library needs the agent, found through its RUNPATH; without a
    # capture the agent records nothing, but ids and the tool id come back
    p = subprocess.run([sys.executable, "-c", code], env=e, capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    assert p.stdout.split() == ["1", "0x1003"]


def test_memory_pool_domains(cli, tmp_path):
    from conftest import TEST_BIN
    out = tmp_path / "out"
    p = cli(["--device=npu:0", "--analysis=", f"--output={out}", "--", TEST_BIN / "npu_mstx_pools"], cwd=tmp_path,
            check_rc=0)
    blocks = {}
    for line in p.stdout.splitlines():
        parts = line.split()
        if len(parts) == 3 and parts[1] == "block":
            blocks[parts[0]] = "0x%016x" % int(parts[2], 16)
    assert "tool 0x1003" in p.stdout.splitlines()
    [d] = process_dirs(out)
    rows = read_dump(dump_files(d, "0")[0])
    got = [(r["Event"], r["Event Type"], r["Name"], r["Device Id"], r["Ptr"], r["attr"]) for r in rows[1:]]
    expected = []
    for i, (domain, pool) in enumerate([("atb", "ATB"), ("mindsporeMemPool", "MINDSPORE"),
                                        ("ptaWorkspace", "PTA_WORKSPACE"), ("msleaks", "PTA")]):
        ptr, size, aid = blocks[domain], str(1024 * (i + 1)), str(i + 1)
        base = {"allocation_id": aid, "addr": ptr, "size": size}
        expected.append(("MALLOC", pool, "N/A", "0", ptr,
                         {**base, "used": size, "process_used": "0", "device_used": "0", "total": "65536"}))
        expected.append(("FREE", pool, "N/A", "0", ptr, {**base, "used": "0", "process_used": "0", "device_used": "0"}))
    # rows without a device: in device 0's file with its Device Id
    expected += [("MSTX", "Mark", "domain mark", "0", "N/A", {}),
                 ("MSTX", "Range_start", "domain range", "0", "N/A", {}),
                 ("MSTX", "Range_end", "domain range", "0", "N/A", {})]
    assert got == expected
    assert (rows[0]["Event"], rows[0]["Event Type"]) == ("SYSTEM", "START_TRACE")
