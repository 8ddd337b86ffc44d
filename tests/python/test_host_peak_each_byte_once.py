"""The host heap's peak counts each byte once (README: "Each byte once"),
also when a framework block takes an older host block right after a new
host block was made: the heap held both until then. The console's and
summary.json's cpu/HOST peak, and the trace's `cpu HOST allocated`
counter, are the rows' `used` at that moment (before, the summary lost it:
its peak waited for the next event and was dropped when that event took a
host block, whichever it was)."""
import json
import re

from conftest import dump_files, process_dirs, read_dump, run_cli
from sinks_common import load_trace, only

PY = "/usr/bin/python3"
MB = 1 << 20

PROG = """\
import ctypes
libc = ctypes.CDLL("libc.so.6")
libc.malloc.restype = ctypes.c_void_p
libc.malloc.argtypes = [ctypes.c_size_t]
libc.free.argtypes = [ctypes.c_void_p]
agent = ctypes.CDLL(None)  # the agent the CLI preloads
agent.msms_agent_alloc.argtypes = [ctypes.c_uint16, ctypes.c_uint16, ctypes.c_int16, ctypes.c_uint64,
                                   ctypes.c_uint64, ctypes.c_uint64, ctypes.c_char_p]
agent.msms_agent_free.argtypes = [ctypes.c_uint16, ctypes.c_uint16, ctypes.c_int16, ctypes.c_uint64]
PTA, CPU, MB = 11, 1, 1 << 20
x = libc.malloc(64 * MB)                                  # a host block
y = libc.malloc(32 * MB)                                  # another: the heap holds both
agent.msms_agent_alloc(PTA, CPU, -1, x, 64 * MB, 0, None)  # a framework block takes the first
print(f"y 0x{y:016x}", flush=True)
agent.msms_agent_free(PTA, CPU, -1, x)
libc.free(y)
libc.free(x)
"""


def test_host_peak_holds_a_new_block_while_a_framework_block_takes_an_older_one(tmp_path):
    (tmp_path / "prog.py").write_text(PROG)
    p = run_cli(["--device=cpu", "--events=alloc,free", "--sinks=csv,trace", f"--output={tmp_path / 'out'}", "--",
                 PY, "prog.py"], cwd=tmp_path, env={"PYTHONPATH": ""}, timeout=300, check_rc=0)
    y = int(re.search(r"^y (0x[0-9a-f]+)$", p.stdout, re.M).group(1), 16)
    d = only(process_dirs(tmp_path / "out"))
    rows = read_dump(only(dump_files(d)))
    [made] = [r for r in rows if r["Event"] == "MALLOC" and r["Event Type"] == "HOST" and int(r["Ptr"], 16) == y]
    assert made["attr"]["size"] == str(32 * MB)
    held = int(made["attr"]["used"])  # x and y, and the interpreter's heap
    assert held > 96 * MB
    summary = json.loads((d / "summary.json").read_text())
    assert summary["pools"]["cpu/HOST"]["peak_bytes"] == held
    assert f"  cpu/HOST: peak {held / MB:.1f} MiB, " in p.stdout
    doc = load_trace(only(d.glob("trace_*.json")))
    assert max(e["args"]["bytes"] for e in doc["traceEvents"]
               if e["ph"] == "C" and e["name"] == "cpu HOST allocated") == held


TENSOR_BEFORE_START = """\
import sys
import msmemscope, torch
if len(sys.argv) > 1:  # the Python API alone: a first range, then the tensor between two ranges
    msmemscope.config(device="cpu", analysis="decompose", sinks="csv,trace", output="out")
    msmemscope.start()
    small = torch.ones(1000)
    msmemscope.stop()
big = torch.ones(8 * (1 << 20))  # 32 MiB, made while collection is off
msmemscope.start()
x = torch.ones(1000)
msmemscope.stop()
print("big", big.storage().nbytes(), flush=True)
"""


def fmt(n):
    """The console's figure for a byte count."""
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= size:
            return f"{n / size:.1f} {unit}"
    return f"{n} B"


def check_tensor_counted_once(p, d):
    summary = json.loads((d / "summary.json").read_text())
    host = summary["pools"]["cpu/HOST"]
    assert summary["pools"]["cpu/PTA"]["peak_bytes"] >= 32 * MB, summary["pools"]
    # the host heap grew by nothing like the tensor's storage: its bytes are PTA's
    assert host["peak_bytes"] - host["final_bytes"] < 4 * MB, summary["pools"]
    assert f"  cpu/HOST: peak {fmt(host['peak_bytes'])}, final {fmt(host['final_bytes'])}\n" in p.stdout, p.stdout
    (owner,) = re.findall(r"^  HOST +(\d+) +(\d+) +\d+$", p.stdout, re.M)
    assert int(owner[1]) == host["peak_bytes"], (owner, host)  # decompose's table says the same
    doc = load_trace(only(d.glob("trace_*.json")))
    assert max(e["args"]["bytes"] for e in doc["traceEvents"]
               if e["ph"] == "C" and e["name"] == "cpu HOST allocated") == host["peak_bytes"]


def test_a_tensor_made_before_start_is_not_host_memory_too_deferred(tmp_path):
    # --collect-mode=deferred: the agent writes a shadow row for each host
    # block allocated before start(), the tensor's storage among them, and
    # the PyTorch pool's own shadow row came only after the search for
    # existing tensors: the host heap's peak counted the storage twice.
    (tmp_path / "prog.py").write_text(TENSOR_BEFORE_START)
    p = run_cli(["--device=cpu", "--collect-mode=deferred", "--analysis=decompose", "--sinks=csv,trace",
                 f"--output={tmp_path / 'out'}", "--", PY, "prog.py"], cwd=tmp_path, env={"PYTHONPATH": ""},
                timeout=300, check_rc=0)
    assert "big 33554432" in p.stdout
    check_tensor_counted_once(p, only(process_dirs(tmp_path / "out")))


def test_a_tensor_made_between_two_ranges_is_not_host_memory_too(tmp_path):
    # The Python API alone, a tensor made between stop() and the next start().
    import os
    import subprocess
    from conftest import BUILD
    (tmp_path / "prog.py").write_text(TENSOR_BEFORE_START)
    env = dict(os.environ, PYTHONPATH=str(BUILD / "python"))
    env.pop("LD_PRELOAD", None)
    p = subprocess.run([PY, "prog.py", "api"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    assert "big 33554432" in p.stdout
    check_tensor_counted_once(p, only(process_dirs(tmp_path / "out")))
