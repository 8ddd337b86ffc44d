"""Host heap blocks that exist when collection starts (issue #15 item 4).

Upstream writes a block allocated while collection was off (deferred mode,
start() after the model is built) as a MALLOC row with Attr shadow:true at
the moment collection starts (csrc/analysis/memory_state_manager.cpp
PromoteShadowStates). Ours: the agent remembers such blocks while collection
is off (framework/agent/live_blocks.h) and writes them at start; the host
pairs their FREE with them and counts them in `used`, so that upstream's dump
consistency rules (test_upstream_dump_check.py) hold, and the leak report
counts those still live at exit apart, not judged. (A PyTorch script that starts after its
model is built, under the CLI: test_upstream_dump_check.py
test_cli_deferred_start_after_the_model_is_built.)
"""
import re


from conftest import TEST_BIN, dump_files, process_dirs
from test_upstream_dump_check import check_dump, only_dump, shadows

# The leak report's line for the blocks from before the start still
# allocated at the end: not judged (upstream's analyses leave shadow events
# alone), in no leak total (test_deferred_not_judged.py).
NOT_JUDGED = re.compile(r"^  Not judged on device (\S+): (\d+) block\(s\), (\d+) bytes allocated before collection "
                        r"started were still allocated at stop\(\) \(no stack: allocated while collection was off\)$",
                        re.M)


def ptr_text(value):
    return "0x%016x" % int(value, 16)


def start_id(rows, nth=0):
    return [int(r["ID"]) for r in rows if r["Event"] == "SYSTEM" and r["Event Type"] == "START_TRACE"][nth]


def test_c_program_blocks_from_before_a_deferred_start(cli, tmp_path):
    out = tmp_path / "out"
    p = cli(["--device=cpu", "--events=alloc,free", "--analysis=leaks", "--call-stack=c", "--collect-mode=deferred",
             f"--output={out}", "--", TEST_BIN / "analyzers_deferred_start"], cwd=tmp_path, check_rc=0)
    addr = dict(l.split() for l in p.stdout.splitlines() if l.startswith(("kept ", "freed ")))
    kept, freed = ptr_text(addr["kept"]), ptr_text(addr["freed"])
    rows = check_dump(only_dump(out))  # upstream's rules: pairs and running `used`, HOST pool included
    born = {r["Ptr"]: r for r in shadows(rows, "MALLOC", "HOST")}
    assert born[kept]["attr"]["size"] == "12345" and born[freed]["attr"]["size"] == "23456", born
    # written when collection started: right after START_TRACE, before any collected row
    first = start_id(rows)
    ids = sorted(int(r["ID"]) for r in born.values())
    assert ids[0] == first + 1 and ids == list(range(first + 1, first + 1 + len(ids)))
    # the block freed while collecting: its FREE (with its stack) pairs with the shadow MALLOC
    [f] = [r for r in rows if r["Event"] == "FREE" and r["attr"]["allocation_id"] == born[freed]["attr"]["allocation_id"]]
    assert f["Ptr"] == freed and f["attr"].get("shadow") is None and f["Call Stack(C)"], f
    # the block never freed: a shadow FREE at the end, and the leak report
    # counts it among the blocks from before the start, not judged
    [end] = [r for r in shadows(rows, "FREE", "HOST") if r["Ptr"] == kept]
    assert end["attr"]["allocation_id"] == born[kept]["attr"]["allocation_id"]
    assert "leaks: msmemscope's details (not in upstream's report):" in p.stdout
    [(dev, n, size)] = NOT_JUDGED.findall(p.stdout)
    assert dev == "cpu" and int(size) >= 12345 and int(n) >= 1, p.stdout
    assert "allocated at: before collection started" not in p.stdout, p.stdout
    # allocated and freed before start: never written
    assert not any(r["attr"].get("size") in ("34567",) for r in rows)
    assert [r for r in rows if r["Event"] == "MALLOC" and r["attr"].get("size") == "4567"]


def test_shadow_mallocs_need_collection_off(cli, tmp_path):
    # immediate mode: collection is on from the start, nothing is remembered
    out = tmp_path / "out"
    p = cli(["--device=cpu", "--events=alloc,free", "--analysis=", f"--output={out}", "--",
             TEST_BIN / "analyzers_deferred_start"], cwd=tmp_path, check_rc=0)
    rows = check_dump(only_dump(out))
    assert shadows(rows, "MALLOC", "HOST") == [], p.stdout
    kept = ptr_text(dict(l.split() for l in p.stdout.splitlines() if l.startswith("kept "))["kept"])
    [m] = [r for r in rows if r["Event"] == "MALLOC" and r["Ptr"] == kept]
    assert m["attr"]["size"] == "12345"


def test_npu_device_blocks_from_before_a_deferred_start(cli, tmp_path):
    # the simulated Ascend runtime (tests/fixtures/ascend): aclrtMalloc -> halMemAlloc
    out = tmp_path / "out"
    p = cli(["--device=npu:0", "--events=alloc,free", "--analysis=leaks", "--collect-mode=deferred",
             f"--output={out}", "--", TEST_BIN / "npu_deferred_start"], cwd=tmp_path,
            env={"ASCEND_SIM_DEVICE_MEM": str(128 << 20)}, check_rc=0)
    addr = dict(l.split() for l in p.stdout.splitlines() if l.startswith(("kept ", "freed ")))
    kept, freed = ptr_text(addr["kept"]), ptr_text(addr["freed"])
    [d] = process_dirs(out)
    [dump] = dump_files(d, device="0")
    rows = check_dump(dump, pools_list=(("HAL",),))
    born = {r["Ptr"]: r for r in shadows(rows, "MALLOC", "HAL")}
    assert born[kept]["attr"]["size"] == str(3 << 20) and born[freed]["attr"]["size"] == str(5 << 20), born
    assert all(r["Device Id"] == "0" for r in born.values())
    assert all(int(r["ID"]) > start_id(rows) for r in born.values())
    [f] = [r for r in rows if r["Event"] == "FREE" and r["attr"]["allocation_id"] == born[freed]["attr"]["allocation_id"]]
    assert f["Ptr"] == freed and f["attr"].get("shadow") is None, f
    assert [r for r in shadows(rows, "FREE", "HAL") if r["Ptr"] == kept]
    # the leak report counts the device block from before the start apart, not judged
    assert NOT_JUDGED.findall(p.stdout) == [("0", "1", str(3 << 20))], p.stdout
    assert "Driver memory still allocated" not in p.stdout, p.stdout
