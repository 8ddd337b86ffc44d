"""End-to-end tests of the analyzers: C programs under the CLI (host leaks,
OOM), offline --analyze on hand-made CSVs in upstream's format (rows out of
time order), --compare, and malformed input."""
import csv
import os
import re
from pathlib import Path

import pytest

from conftest import DUMP_HEADER, TEST_BIN, dump_files, process_dirs, read_dump

HEADER = ",".join(DUMP_HEADER)


def write_csv(path, rows):
    """rows: lists of 12 fields; written as upstream does (Attr quoted)."""
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(DUMP_HEADER)
        for r in rows:
            w.writerow(r)
    return path


def row(i, event, etype, name, ts, dev="0", ptr="N/A", attr="{}", pid="100"):
    return [str(i), event, etype, name, str(ts), pid, "200", dev, ptr, attr, "", ""]


def test_host_leaks_at_exit_grouped_by_site(cli, tmp_path):
    p = cli(["--device=cpu", "--call-stack=c", f"--output={tmp_path}/out", "--", TEST_BIN / "analyzers_host_leak"],
            cwd=tmp_path, check_rc=0)
    out = p.stdout
    raw = out.splitlines()
    # no framework-pool leak within a step: upstream's report (its ERROR /
    # SUMMARY block) has nothing to say; ours follows under its own header
    assert not any(l.startswith("======") for l in raw), out
    i = raw.index("leaks: msmemscope's details (not in upstream's report):")
    lines = [l.strip() for l in raw[i:]]
    big = [l for l in lines if l.startswith("10 block(s), 10000 bytes, allocated at: leak_big")]
    small = [l for l in lines if l.startswith("3 block(s), 150 bytes, allocated at: leak_small")]
    assert big and small, out
    # every block still live is counted (the 13 leaks and libc's own)
    m = [re.match(r"Host memory still allocated at exit on device cpu: (\d+) block\(s\)", l) for l in lines]
    n = [int(x.group(1)) for x in m if x]
    assert len(n) == 1 and n[0] >= 13, out


def test_oom_writes_recent_and_top_blocks_and_snapshots(cli, tmp_path):
    p = cli(["--device=cpu", "--analysis=oom:3", f"--output={tmp_path}/out", "--", TEST_BIN / "analyzers_oom"],
            cwd=tmp_path, check_rc=3)
    assert "oom: 1 out-of-memory failure(s), 1 detail dump(s) written (OOM_DETAIL rows)" in p.stdout
    rows = read_dump(dump_files(process_dirs(tmp_path / "out")[0])[0])
    kinds = [(r["Event"], r["Event Type"], r["Name"]) for r in rows if r["Event"] in ("OOM_DETAIL", "SNAPSHOT")]
    # upstream's row names (csrc/event_trace/event_report.cpp); the function is in Attr func
    # upstream's order (hal_hooks.cpp HandleOOM): the snapshot, then the trigger
    assert kinds[0] == ("SNAPSHOT", "SNAPSHOT", "OOM_Snapshot")
    assert kinds[1] == ("OOM_DETAIL", "OOM_TRIGGER", "OOM_Trigger")
    assert [k[1] for k in kinds[2:8]] == ["OOM_RECENT_ALLOC"] * 3 + ["OOM_TOP_ALLOC"] * 3
    assert kinds[8] == ("SNAPSHOT", "SNAPSHOT", "OOM_Snapshot_After")
    assert {k[2] for k in kinds[2:5]} == {"OOM_RecentAlloc"} and {k[2] for k in kinds[5:8]} == {"OOM_TopAlloc"}
    assert list(rows_named(rows, "OOM_Snapshot")[0]["attr"]) == [
        "reserved", "max_reserved", "allocated", "max_allocated", "total", "free", "device_rate", "reserved_rate",
        "limit"]  # ours after upstream's: which memory bound total and free are
    top = [r for r in rows if r["Event Type"] == "OOM_TOP_ALLOC"]
    assert [r["attr"]["size"] for r in top] == [str(8 << 20), str(7 << 20), str(6 << 20)]
    assert set(top[0]["attr"]) >= {"pool", "ptr", "size", "timestamp", "step", "kernel", "client"}
    trig = [r for r in rows if r["Event Type"] == "OOM_TRIGGER"][0]
    assert trig["attr"]["req_size"] == str(64 << 30) and trig["attr"]["func"] == "malloc"


def rows_named(rows, name):
    return [r for r in rows if r["Name"] == name]


def upstream_inefficient_csv(path):
    # Upstream order: a MALLOC row is written when its block is freed, so
    # rows are not in time order; IDs follow time.
    rows = [
        row(6, "FREE", "PTA", "N/A", 600, ptr="0x00000000000000a0", attr="{allocation_id:2,addr:0xa0,size:64}"),
        row(1, "MALLOC", "PTA", "N/A", 100, ptr="0x0000000000000010",
            attr="{allocation_id:1,addr:0x10,size:4096,owner:PTA@weight,total:8192,used:4096}"),
        row(2, "MALLOC", "PTA", "N/A", 200, ptr="0x00000000000000a0", attr="{allocation_id:2,addr:0xa0,size:64}"),
        row(3, "FREE", "PTA", "N/A", 300, ptr="0x00000000000000a0", attr="{allocation_id:2,addr:0xa0,size:64}"),
        row(4, "OP_LAUNCH", "ATEN_START", "aten::add", 400, dev="N/A"),
        row(5, "ACCESS", "READ", "aten::add", 450, ptr="0x0000000000000010",
            attr="{dtype:torch.float32,shape:[32, 32],size:4096,format:NCHW,type:READ,allocation_id:1}"),
        row(7, "OP_LAUNCH", "ATEN_END", "aten::add", 500, dev="N/A"),
    ]
    # block 0xa0 is allocated again (id 2 reused above only for the FREE of the first one)
    return write_csv(path, rows)


def test_offline_inefficient_writes_back_into_upstream_csv(cli, tmp_path):
    f = upstream_inefficient_csv(tmp_path / "memscope_dump_20250101000000.csv")
    p = cli(["--analyze=inefficient", f"--input={f}"], cwd=tmp_path, check_rc=0)
    assert f"msmemscope: wrote 1 result(s) back into {f}" in p.stdout
    rows = read_dump(f)
    assert [r["ID"] for r in rows] == ["6", "1", "2", "3", "4", "5", "7"]  # order kept
    marked = {r["ID"]: r["attr"].get("inefficient_type") for r in rows}
    assert marked["1"] == "early_allocation"
    assert rows[1]["attr"]["owner"] == "PTA@weight"  # other entries kept
    assert all(v is None for k, v in marked.items() if k != "1")


def test_offline_inefficient_options(cli, tmp_path):
    f = upstream_inefficient_csv(tmp_path / "memscope_dump_1.csv")
    p = cli(["--analyze=inefficient", f"--input={f}", "--plugin-option=inefficient.mem_size=8192"],
            cwd=tmp_path, check_rc=0)
    assert "wrote" not in p.stdout
    assert all("inefficient_type" not in r["attr"] for r in read_dump(f))


def test_offline_check_leaks_mark_rule(cli, tmp_path):
    rows = [
        row(1, "MSTX", "Mark", "leak_check", 100),
        row(3, "MSTX", "Mark", "leak_check", 200),
        row(12, "MALLOC", "HAL", "N/A", 150, ptr="0x0000000000001000", attr="{allocation_id:1,addr:0x1000,size:1048576}"),
        row(4, "MALLOC", "HAL", "N/A", 400, ptr="0x0000000000002000", attr="{allocation_id:2,addr:0x2000,size:512}"),
        row(5, "MSTX", "Mark", "leak_check", 500),
        row(6, "FREE", "HAL", "N/A", 600, ptr="0x0000000000002000", attr="{allocation_id:2,addr:0x2000,size:512}"),
        row(7, "MSTX", "Mark", "leak_check", 700),
    ]
    f = write_csv(tmp_path / "memscope_dump_2.csv", rows)
    p = cli(["--analyze=leaks", f"--input={f}", "--plugin-option=leaks.mstx_info=leak_check",
             "--plugin-option=leaks.start_index=0"], cwd=tmp_path, check_rc=0)
    lines = p.stdout.splitlines()
    i = lines.index("Leak Analysis Results for the Custom Range:")
    assert lines[i + 1:i + 3] == ["====== ERROR: Detected memory leaks on device 0 ======",
                                  "Direct Hal memory leak of 1.0 Mb(s) at 0x0000000000001000 in Index 12."]
    leaked = [r for r in read_dump(f) if r["ID"] == "12"][0]
    assert leaked["attr"]["leak"] == "hal"


def test_offline_leaks_step_rule_on_a_dump(cli, tmp_path):
    rows = []
    i = 0
    ts = 1000
    used = 0
    for step in range(1, 6):
        i += 1; ts += 10; used += 1048576
        rows.append(row(i, "MALLOC", "PTA", "N/A", ts, ptr=f"0x{0x100000 * step:016x}",
                        attr=f"{{allocation_id:{i},addr:0x{0x100000 * step:x},size:1048576,used:{used}}}"))
        i += 1; ts += 10
        rows.append(row(i, "SYSTEM", "STEP", str(step), ts, dev="N/A"))
    f = write_csv(tmp_path / "memscope_dump_3.csv", list(reversed(rows)))
    p = cli(["--analyze=leaks", f"--input={f}"], cwd=tmp_path, check_rc=0)
    lines = p.stdout.splitlines()
    assert "Direct Pytorch Caching memory pool leak of 1.000000 Mb(s) at 0x200000 in kernel_0 at step 2." in lines
    assert "Direct Pytorch Caching memory pool leak of 1.000000 Mb(s) at 0x400000 in kernel_0 at step 4." in lines
    assert "====== SUMMARY: 3 Mb(s) leaked in 3 allocation(s) ======" in p.stdout


@pytest.mark.parametrize("content,message", [
    ("ID,Event\n1,MALLOC\n", ":1: not a memscope_dump CSV: missing column(s) Event Type, Name"),
    (HEADER + "\n1,MALLOC,PTA,N/A,100,1,1,0,0x1\n", ":2: expected 12 fields, found 9"),
    (HEADER + "\nx,MALLOC,PTA,N/A,100,1,1,0,0x1,{},,\n", ":2: invalid ID 'x' (expected a number)"),
    (HEADER + "\n1,BOGUS,PTA,N/A,100,1,1,0,0x1,{},,\n", ":2: unknown Event 'BOGUS'"),
])
def test_offline_malformed_input_names_file_and_line(cli, tmp_path, content, message):
    f = tmp_path / "bad.csv"
    f.write_text(content)
    p = cli(["--analyze=leaks", f"--input={f}"], cwd=tmp_path, check_rc=2)
    assert f"msmemscope: error: --input: {f}{message}" in p.stderr


def test_offline_missing_input(cli, tmp_path):
    p = cli(["--analyze=leaks", f"--input={tmp_path}/nope.csv"], cwd=tmp_path, check_rc=2)
    assert f"msmemscope: error: --input: {tmp_path}/nope.csv: no such file or folder" in p.stderr


def test_analyze_needs_one_input(cli, tmp_path):
    p = cli(["--analyze=leaks"], cwd=tmp_path, check_rc=2)
    assert "--input: --analyze needs exactly one input" in p.stderr


def compare_rows(ops, pid="1"):
    rows, i, ts = [], 0, 100
    for name, size in ops:
        i += 1; ts += 10
        rows.append(row(i, "OP_LAUNCH", "ATEN_START", name, ts, dev="0"))
        i += 1; ts += 10
        rows.append(row(i, "OP_LAUNCH", "ATEN_END", name, ts, dev="0"))
        i += 1; ts += 10
        rows.append(row(i, "MALLOC", "PTA", "N/A", ts, ptr=f"0x{i:016x}", attr=f"{{allocation_id:{i},size:{size}}}"))
    return rows


def compare_rows_inside(ops, pid="1"):
    """Each op allocates its block between its start and its end."""
    rows, i, ts = [], 0, 100
    for name, size in ops:
        i += 1; ts += 10
        rows.append(row(i, "OP_LAUNCH", "ATEN_START", name, ts, dev="0"))
        i += 1; ts += 10
        rows.append(row(i, "MALLOC", "PTA", "N/A", ts, ptr=f"0x{i:016x}", attr=f"{{allocation_id:{i},size:{size}}}"))
        i += 1; ts += 10
        rows.append(row(i, "OP_LAUNCH", "ATEN_END", name, ts, dev="0"))
    return rows


@pytest.mark.parametrize("rule", ["ours", "upstream"])
def test_compare_aligns_ops_with_a_diff(cli, tmp_path, rule):
    # ours (the default): an op is credited with what it allocates between
    # its start and end; upstream's (selected by giving --level, as a
    # migrating user's `--compare --level=op` does): the first PTA row after
    # its end (csrc/analysis/memory_compare.cpp GetMemoryUsage)
    rows = compare_rows_inside if rule == "ours" else compare_rows
    a = write_csv(tmp_path / "a.csv", list(reversed(rows([("add", 10), ("mul", 20), ("relu", 30)]))))
    b = write_csv(tmp_path / "b.csv", rows([("add", 15), ("conv", 99), ("mul", 20), ("relu", 40)]))
    level = ["--level=op"] if rule == "upstream" else []
    p = cli(["--compare", f"--input={a},{b}", f"--output={tmp_path}/out"] + level, cwd=tmp_path, check_rc=0)
    files = list((tmp_path / "out" / "compare").glob("memory_compare_*.csv"))
    assert len(files) == 1, p.stdout + p.stderr
    lines = files[0].read_text().splitlines()
    assert lines == [
        ",,,Base,Compare",
        "Event,Name,Device Id,Allocated Memory(byte),Allocated Memory(byte),Diff Memory(byte)",
        "OP_LAUNCH,add,0,10,15,5",
        "OP_LAUNCH,conv,0,N/A,99,99",
        "OP_LAUNCH,mul,0,20,20,0",
        "OP_LAUNCH,relu,0,30,40,10",
    ]


def test_compare_level_op_is_upstreams_rule(cli, tmp_path):
    # Each op allocates 10 bytes inside it; after its end comes a FREE and
    # then the next op's MALLOC. Upstream takes the first row of the
    # framework pool after the op's end, whatever its event (here the FREE of
    # a 7-byte block) and on any thread; ours, what the op allocated itself.
    def rows(names):
        out, i, ts = [], 0, 100
        for n in names:
            for ev, typ, name, attr in (("OP_LAUNCH", "ATEN_START", n, ""),
                                        ("MALLOC", "PTA", "N/A", "{allocation_id:%d,size:10}"),
                                        ("OP_LAUNCH", "ATEN_END", n, ""),
                                        ("FREE", "PTA", "N/A", "{allocation_id:%d,size:7}")):
                i += 1
                ts += 10
                out.append(row(i, ev, typ, name, ts, dev="0", ptr=f"0x{i:016x}", attr=attr % i if attr else "{}"))
        return out
    a = write_csv(tmp_path / "a.csv", rows(["add", "mul"]))
    b = write_csv(tmp_path / "b.csv", rows(["add", "mul"]))
    for n, (level, want) in enumerate((([], "10"), (["--level=op"], "7"), (["--level=0"], "7"))):
        out = tmp_path / f"out{n}"
        cli(["--compare", f"--input={a},{b}", f"--output={out}"] + level, cwd=tmp_path, check_rc=0)
        lines = next((out / "compare").glob("memory_compare_*.csv")).read_text().splitlines()
        # upstream's Device Id column: the device's number
        assert lines[2:] == [f"OP_LAUNCH,add,0,{want},{want},0", f"OP_LAUNCH,mul,0,{want},{want},0"], (level, lines)


def test_compare_kernel_level(cli, tmp_path):
    def rows(names):
        out, ts = [], 0
        for i, n in enumerate(names):
            ts += 10
            out.append(row(2 * i + 1, "KERNEL_LAUNCH", "KERNEL_LAUNCH", n, ts))
            out.append(row(2 * i + 2, "MALLOC", "PTA", "N/A", ts + 1, ptr="0x1", attr="{size:8}"))
        return out
    a = write_csv(tmp_path / "a.csv", rows(["k1", "k2"]))
    b = write_csv(tmp_path / "b.csv", rows(["k1", "k3"]))
    cli(["--compare", f"--input={a},{b}", "--level=kernel", f"--output={tmp_path}/out"], cwd=tmp_path, check_rc=0)
    lines = next((tmp_path / "out" / "compare").glob("memory_compare_*.csv")).read_text().splitlines()
    assert lines[2:] == ["KERNEL_LAUNCH,k1,0,8,8,0", "KERNEL_LAUNCH,k2,0,8,N/A,-8", "KERNEL_LAUNCH,k3,0,N/A,8,8"]


def test_compare_malformed_input(cli, tmp_path):
    a = write_csv(tmp_path / "a.csv", compare_rows([("add", 1)]))
    b = tmp_path / "b.csv"
    b.write_text("not,a,dump\n")
    p = cli(["--compare", f"--input={a},{b}", f"--output={tmp_path}/out"], cwd=tmp_path, check_rc=2)
    assert f"msmemscope: error: --input: {b}:1: not a memscope_dump CSV" in p.stderr


def test_watch_finds_the_op_that_overwrote_the_tensor(cli, tmp_path):
    pytest.importorskip("torch", reason="python3-torch is needed for the watch end-to-end test")
    from conftest import BUILD, SOURCE
    lib = BUILD / "lib" / "msmemscope" / "agent" / "libmsms_watch.so"
    assert lib.exists(), lib
    p = cli(["--device=cpu", "--analysis=", "--events=launch", "--watch=aten::mul.Tensor,aten::sum.default",
             f"--output={tmp_path}/out", "--", "/usr/bin/python3", SOURCE / "tests/programs/analyzers/watch_torch.py",
             SOURCE / "plugins/analyzers/watch/python", lib], cwd=tmp_path, check_rc=0)
    assert "watch: tensor aten::mul.Tensor_0 (made by aten::mul.Tensor_1) was changed by aten::fill_.Scalar_1" in p.stdout, p.stdout + p.stderr
    files = list((process_dirs(tmp_path / "out")[0] / "device_cpu" / "watch_dump").glob("watch_dump_data_check_sum_*.csv"))
    assert len(files) == 1
    lines = files[0].read_text().splitlines()
    assert lines[0] == "Tensor info,Check data sum"
    # the helper's 7 checkpoints (mul after; add, fill_, sum before and after), each once
    assert len(lines) == 8, lines
    names = [l.split(",")[0].split(".", 1)[1] for l in lines[1:]]
    assert names[0] == "aten.mul.Tensor_1-aten.mul.Tensor_0_after.bin"
    assert "aten.fill_.Scalar_1-aten.mul.Tensor_0_before.bin" in names
    assert names[-1] == "aten.sum.default_1-aten.mul.Tensor_0_after.bin"
    import struct
    import sys
    sys.path.insert(0, str(SOURCE / "plugins/analyzers/watch/python"))
    import msmemscope_watch
    h = dict(l.split(",") for l in lines[1:])
    after_fill = [v for k, v in h.items() if k.endswith("aten.fill_.Scalar_1-aten.mul.Tensor_0_after.bin")][0]
    assert after_fill == "%016x" % msmemscope_watch.crc64_py(struct.pack("16f", *([7.0] * 16)))
