"""db and trace sinks: schema, Attr JSON against the CSV of the same run,
trace events and their limit, empty and crashed captures."""
import csv
import json
from pathlib import Path

import pytest

from conftest import read_dump, process_dirs
from sinks_common import (TS, DB_COLUMNS, drive, db_query, check_db, load_trace, only)

BASE = ["--device=cpu", "--events=alloc,free", "--analysis="]


def test_db_and_csv_of_one_run_hold_the_same_rows(cli, test_bin, tmp_path):
    p = cli(BASE + ["--data-format=db", "--sinks=csv", f"--output={tmp_path}", "--",
                    test_bin / "sinks_alloc_loop", "3000"], cwd=tmp_path, check_rc=0)
    proc = only(process_dirs(tmp_path))
    db = only((proc / "device_cpu" / "dump").glob("memscope_dump_*.db"))
    csvf = only((proc / "device_cpu" / "dump").glob("memscope_dump_*.csv"))
    assert db.stem == csvf.stem
    rows = check_db(db)
    dump = read_dump(csvf)
    assert len(rows) == len(dump) > 5000
    for r, d in zip(rows, dump):
        assert [str(x) for x in r[:9]] == [d[k] for k in ["ID", "Event", "Event Type", "Name", "Timestamp(ns)",
                                                         "Process Id", "Thread Id", "Device Id", "Ptr"]]
        attr = json.loads(r[9])
        # same keys in the same order; every value a JSON string, as
        # upstream's DB writer (FixJson in csrc/analysis/data_handler.cpp)
        assert list(attr) == list(d["attr"])
        for k, v in d["attr"].items():
            assert attr[k] == v, (k, attr[k], v)
        assert r[10] == d["Call Stack(Python)"] and r[11] == d["Call Stack(C)"]
    # our block table agrees with the MALLOC rows
    mallocs = [d for d in dump if d["Event"] == "MALLOC"]
    blocks = db_query(db, "SELECT allocation_id, size, malloc_id FROM msms_blocks ORDER BY allocation_id")
    assert [(int(m["attr"]["allocation_id"]), int(m["attr"]["size"]), int(m["ID"])) for m in mallocs] == blocks
    # the summary lists the files
    assert f"  files (in {proc}):\n" in p.stdout
    assert f"    {db.relative_to(proc)} (" in p.stdout and f"    {csvf.relative_to(proc)} (" in p.stdout


@pytest.mark.parametrize("how,code", [("kill", 137), ("segv", 139)])
def test_every_sink_after_a_crash(cli, test_bin, tmp_path, how, code):
    p = cli(BASE + ["--data-format=db", "--sinks=csv,trace,html", f"--output={tmp_path}", "--",
                    test_bin / "sinks_alloc_kill", how], cwd=tmp_path, check_rc=code)
    proc = only(process_dirs(tmp_path))
    rows = check_db(only((proc / "device_cpu" / "dump").glob("memscope_dump_*.db")))
    mallocs = [r for r in rows if r[1] == "MALLOC" and int(json.loads(r[9])["size"]) >= 1000]
    assert len(mallocs) == 200
    assert len(read_dump(only((proc / "device_cpu" / "dump").glob("memscope_dump_*.csv")))) == len(rows)
    doc = load_trace(only(proc.glob("trace_*.json")))
    assert any(e["ph"] == "C" for e in doc["traceEvents"])
    html = only(proc.glob("report_*.html")).read_text()
    assert html.rstrip().endswith("</html>")
    assert "ended without finishing" in p.stdout or "killed" in p.stdout or "signal" in p.stdout


@pytest.mark.parametrize("sink", ["csv", "db", "trace", "html"])
def test_empty_capture(tmp_path, sink):
    drive(sink, tmp_path, "empty")
    if sink == "db":
        assert check_db(tmp_path / "device_cpu" / "dump" / f"memscope_dump_{TS}.db") == []
    elif sink == "csv":
        text = (tmp_path / "device_cpu" / "dump" / f"memscope_dump_{TS}.csv").read_text()
        assert text.splitlines() == ["ID,Event,Event Type,Name,Timestamp(ns),Process Id,Thread Id,Device Id,Ptr,Attr,"
                                     "Call Stack(Python),Call Stack(C)"]
    elif sink == "trace":
        doc = load_trace(tmp_path / f"trace_{TS}.json")
        assert [e["ph"] for e in doc["traceEvents"]] == ["M"]
        assert doc["otherData"]["truncated"] is False
    else:
        html = (tmp_path / f"report_{TS}.html").read_text()
        data = html.split('<script type="application/json" id="msms-data">')[1].split("</script>")[0]
        d = json.loads(data)
        assert d["events"] == d["rows"] == 0 and d["devices"] == [] and d["findings"] == {}


def test_db_rich_stream(tmp_path):
    drive("db", tmp_path, "rich")
    npu = check_db(tmp_path / "device_0" / "dump" / f"memscope_dump_{TS}.db")
    cpu = check_db(tmp_path / "device_cpu" / "dump" / f"memscope_dump_{TS}.db")
    # rows without a device (steps, ops, marks) go into every device's file
    # with that file's Device Id (upstream writes the thread's current
    # device); a file opened later gets the earlier ones first
    assert {r[7] for r in npu} == {"0"} and {r[7] for r in cpu} == {"cpu"}
    shared = sorted(set(r[0] for r in npu) & set(r[0] for r in cpu))
    assert [r[0] for r in npu if r[0] in shared] == [r[0] for r in cpu if r[0] in shared] == shared
    assert [r[3] for r in cpu if r[1] == "SYSTEM"] == [r[3] for r in npu if r[1] == "SYSTEM"] == ["N/A", "1", "2", "3"]
    assert [r[0] for r in cpu] == sorted(r[0] for r in cpu)
    assert npu[0][1:3] == cpu[0][1:3] == ("SYSTEM", "START_TRACE")
    # the annotation reached the row's Attr
    act = [r for r in npu if r[1] == "MALLOC" and json.loads(r[9]).get("owner") == "PTA@ops@aten"][0]
    assert json.loads(act[9])["inefficient_type"] == "early_allocation"
    db = tmp_path / "device_0" / "dump" / f"memscope_dump_{TS}.db"
    leaks = [json.loads(c) for (c,) in db_query(db, "SELECT cols FROM msms_leaks ORDER BY seq")]
    assert [(l["allocation_id"], l["size"]) for l in leaks] == [(4, 2 << 20), (26, 3 << 20)]
    assert db_query(db, "SELECT count(*) FROM msms_findings WHERE \"table\"='inefficient'") == [(1,)]
    assert db_query(db, "SELECT owner, free_id IS NULL FROM msms_blocks WHERE pool='PTA' ORDER BY allocation_id LIMIT 3") == \
        [("PTA@weight", 1), ("PTA@ops@aten", 0), ("PTA@gradient", 1)]
    assert db_query(db, "SELECT text FROM msms_stacks WHERE kind='c' AND id=2") == [("model.py(10): __init__\ntrain.py(5): main",)]
    # the Python trace table of COMPAT §5 is in the first device's file
    assert db_query(db, "SELECT * FROM python_trace_4242 ORDER BY \"StartTime(ns)\"")[0][0] == "model.py(20): forward"
    assert db_query(db, "SELECT name FROM pragma_table_info('python_trace_4242') ORDER BY cid") == \
        [("FuncInfo",), ("StartTime(ns)",), ("EndTime(ns)",), ("Thread Id",), ("Process Id",)]


def test_trace_rich_stream(tmp_path):
    drive("trace", tmp_path, "rich")
    doc = load_trace(tmp_path / f"trace_{TS}.json")
    ev = doc["traceEvents"]
    spans = {(e["cat"], e["name"]): e for e in ev if e["ph"] == "X"}
    assert set(spans) == {("op", "aten::linear"), ("op", "aten::mm"), ("kernel", "MatMul_kernel"),
                          ("python", "model.py(20): forward"), ("record_function", "backward_pass"),
                          ("mstx", "step start")}
    # nesting: mm inside linear
    lin, mm = spans[("op", "aten::linear")], spans[("op", "aten::mm")]
    assert lin["ts"] < mm["ts"] and mm["ts"] + mm["dur"] < lin["ts"] + lin["dur"]
    instants = [(e["cat"], e["name"]) for e in ev if e["ph"] == "i"]
    assert ("kernel", "MatMul_kernel") in instants and ("mstx", "checkpoint saved") in instants
    assert [n for c, n in instants if c == "step"] == ["end of step 1", "end of step 2", "end of step 3"]
    assert ("system", "START_TRACE") in instants and ("memory", "Memory Snapshot") in instants
    tracks = {e["name"] for e in ev if e["ph"] == "C"}
    assert tracks == {"npu:0 HAL allocated", "npu:0 PTA allocated", "npu:0 in use", "cpu HOST allocated", "cpu in use"}
    pta = [e["args"]["bytes"] for e in ev if e["name"] == "npu:0 PTA allocated"]
    assert pta[0] == 4 << 20 and max(pta) == (4 << 20) + (2 << 20) + sum((i + 1) << 16 for i in range(20))
    # leaks: instants at their allocation, with the finding's columns
    leaks = [e for e in ev if e["ph"] == "i" and e["cat"] == "leak"]
    assert [l["name"] for l in leaks] == ["leak 2097152 B", "leak 3145728 B"]
    grad = [e for e in ev if e["name"] == "npu:0 PTA allocated" and e["args"]["bytes"] == (4 << 20) + (8 << 20) + (2 << 20)][0]
    assert leaks[0]["ts"] == grad["ts"] and leaks[0]["args"]["kernel"] == "MatMul_kernel"
    assert doc["otherData"]["truncated"] is False


def counter_samples(doc):
    return [(e["name"], e["ts"], e["args"]["bytes"]) for e in doc["traceEvents"] if e["ph"] == "C"]


def test_trace_over_its_budget_downsamples_counters_never_the_structure(tmp_path):
    """Issue #19 item 4: an import phase of 40,000 counter changes, then 8
    steps: past max_events every operator span, step, mark and leak is
    there, the counters are reduced (the busy host heap track, not the
    training's pool) and otherData says so."""
    full = drive("trace", tmp_path / "full", "train", 20000, "max_events=1000000000")
    whole = load_trace(tmp_path / "full" / f"trace_{TS}.json")
    assert whole["otherData"]["downsampled"] == {} and whole["otherData"]["truncated"] is False
    assert "report: trace" not in full
    out = drive("trace", tmp_path, "train", 20000, "max_events=5000")
    doc = load_trace(tmp_path / f"trace_{TS}.json")
    ev = doc["traceEvents"]
    ops = [e for e in ev if e["ph"] == "X" and e["cat"] == "op"]
    assert len(ops) == 400 and {e["name"] for e in ops} == {"aten::addmm"}
    assert [e["name"] for e in ev if e["ph"] == "i" and e["cat"] == "step"] == [f"end of step {i}" for i in range(1, 9)]
    assert [e["name"] for e in ev if e["ph"] == "i" and e["cat"] == "mstx"] == [f"step {i} done" for i in range(1, 9)]
    assert [e["name"] for e in ev if e["ph"] == "i" and e["cat"] == "leak"] == ["leak 204800 B"]
    assert len([e for e in ev if e["ph"] == "X" and e["cat"] == "python"]) == 800
    # counters: fewer, within the budget, peak and last level of every track kept
    samples, kept = counter_samples(whole), counter_samples(doc)
    assert len(samples) == 81598 and len(kept) <= 5000 - (len(ev) - len(kept))
    meta = doc["otherData"]
    assert meta["truncated"] is False and meta["events"] == len(ev)
    assert meta["downsampled"]["memory_counters"]["samples"] == len(samples)
    assert meta["downsampled"]["memory_counters"]["written"] == len(kept)
    tracks = meta["downsampled"]["memory_counters"]["tracks"]
    assert tracks["cpu HOST allocated"]["bucket_ns"] > 1
    assert tracks["cpu HOST allocated"]["written"] < tracks["cpu HOST allocated"]["samples"] == 40000
    for track in {n for n, _, _ in samples}:
        a = [(t, v) for n, t, v in samples if n == track]
        b = [(t, v) for n, t, v in kept if n == track]
        assert max(v for _, v in b) == max(v for _, v in a) and b[-1] == a[-1], track
    # the busy import-phase track is reduced, the training steps' pool keeps every sample
    assert [s for s in kept if s[0] == "cpu PTA allocated"] == [s for s in samples if s[0] == "cpu PTA allocated"]
    n_pta = len([s for s in samples if s[0] == "cpu PTA allocated"])
    assert n_pta > 700 and tracks["cpu PTA allocated"] == {"samples": n_pta, "written": n_pta, "bucket_ns": 1}
    note = meta["downsampled_note"]
    assert note.startswith("the run is over the trace's budget (options max_events=5000, counter_points=131072): "
                           "memory counters "
                           f"downsampled to {len(kept)} of {len(samples)} samples ('cpu HOST allocated' in buckets of "
                           f"{tracks['cpu HOST allocated']['bucket_ns']} ns, ")
    assert "'cpu PTA allocated'" not in note
    assert "every operator, kernel and mstx span, step, mark and leak is in" in note and "--data-format=db" in note
    assert f"log: 1 trace: {note}" in out and f"report: trace: {note}" in out


def test_trace_counters_stay_within_counter_points(tmp_path):
    """The counters are held in memory until the end, so their number is
    bounded (option counter_points) however large max_events is: the
    structure is all there, the counters are reduced, and the note says which
    budget was reached."""
    drive("trace", tmp_path, "train", 20000, "max_events=1000000000", "counter_points=2000")
    doc = load_trace(tmp_path / f"trace_{TS}.json")
    ev = doc["traceEvents"]
    assert len([e for e in ev if e["ph"] == "X" and e["cat"] == "op"]) == 400
    assert len([e for e in ev if e["ph"] == "X" and e["cat"] == "python"]) == 800
    kept = counter_samples(doc)
    meta = doc["otherData"]
    assert 0 < len(kept) <= 2000 and meta["downsampled"]["memory_counters"]["written"] == len(kept)
    assert meta["downsampled"]["memory_counters"]["samples"] == 81598
    assert meta["downsampled_note"].startswith(
        "the run is over the trace's budget (options max_events=1000000000, counter_points=2000): memory counters "
        f"downsampled to {len(kept)} of 81598 samples")


def test_trace_budget_drops_python_calls_before_operators(tmp_path):
    drive("trace", tmp_path, "train", 20000, "max_events=1000")
    doc = load_trace(tmp_path / f"trace_{TS}.json")
    ev = doc["traceEvents"]
    assert len([e for e in ev if e["ph"] == "X" and e["cat"] == "op"]) == 400
    py = len([e for e in ev if e["ph"] == "X" and e["cat"] == "python"])
    meta = doc["otherData"]
    assert meta["truncated"] is True
    assert meta["downsampled"]["python_calls"] == {"spans": 800, "written": py} and 0 < py < 800
    assert f"{800 - py} Python call spans past the budget not written" in meta["downsampled_note"]
    # a quarter of the budget stays for the counters
    assert 0 < meta["downsampled"]["memory_counters"]["written"] <= 250


def test_csv_and_db_of_the_rich_stream_agree(tmp_path):
    drive("csv", tmp_path / "csv", "rich")
    drive("db", tmp_path / "db", "rich")
    for dev in ("0", "cpu"):
        dump = read_dump(tmp_path / "csv" / f"device_{dev}" / "dump" / f"memscope_dump_{TS}.csv")
        rows = check_db(tmp_path / "db" / f"device_{dev}" / "dump" / f"memscope_dump_{TS}.db")
        assert len(dump) == len(rows)
        for d, r in zip(dump, rows):
            attr = json.loads(r[9])
            assert {k: str(v) if not isinstance(v, list) else v for k, v in attr.items()} == \
                {k: v for k, v in d["attr"].items()}, d["ID"]
    snap = [d for d in read_dump(tmp_path / "csv" / "device_0" / "dump" / f"memscope_dump_{TS}.csv")
            if d["Event"] == "SNAPSHOT"][0]
    assert snap["Attr"] == '{allocated:123,note:say "hi"}'


def _upstream_read(db):
    """The queries of upstream's InefficientAnalyzer._read_db_file and
    _write_back_db (python/msmemscope/analyzer/inefficient.py), in order."""
    import sqlite3
    con = sqlite3.connect(str(db))
    try:
        is_table = con.execute("SELECT name FROM sqlite_master WHERE type='table' AND name='memscope_dump'").fetchone()
        names = [c[1] for c in con.execute("PRAGMA table_info(memscope_dump)")]
        cur = con.execute("SELECT * FROM memscope_dump")
        rows = cur.fetchall()
        columns = [d[0] for d in cur.description]
        con.execute("PRAGMA journal_mode=WAL;")
        first = rows[1]
        con.execute("SELECT Attr FROM memscope_dump WHERE ID = ? AND `Process Id` = ?", (first[0], first[5]))
        con.execute("UPDATE memscope_dump SET Attr = ? WHERE ID = ? AND `Process Id` = ?",
                    ('{"inefficient_type":"early_allocation"}', first[0], first[5]))
        con.commit()
        after = con.execute("SELECT Attr FROM memscope_dump WHERE ID = ?", (first[0],)).fetchone()[0]
    finally:
        con.close()
    return bool(is_table), names, columns, rows, after


def test_db_layouts_view_and_table_hold_the_same_rows_for_upstream_readers(cli, test_bin, tmp_path):
    """The default layout (memscope_dump a view, each stack stored once) and
    db.layout=table give a reader the same 12 columns and values; only the
    table layout passes upstream's check for a *table* named memscope_dump."""
    cap = tmp_path / "cap"
    cli(BASE + ["--call-stack=c:8", "--save-capture=true", f"--output={cap}", "--",
                test_bin / "sinks_alloc_loop", "3000"], cwd=tmp_path, check_rc=0)
    capture = only(only(process_dirs(cap)).glob("*.msmcap"))
    got = {}
    for layout in ("view", "table"):
        out = tmp_path / layout
        cli([f"--replay={capture}", "--analysis=", "--data-format=db", f"--plugin-option=db.layout={layout}",
             f"--output={out}"], cwd=tmp_path, check_rc=0)
        db = only((only(process_dirs(out)) / "device_cpu" / "dump").glob("memscope_dump_*.db"))
        check_db(db)
        stacks = db_query(db, "SELECT count(*), count(DISTINCT text) FROM msms_stacks")[0]
        with_stack = db_query(db, "SELECT count(*) FROM memscope_dump WHERE \"Call Stack(C)\" != ''")[0][0]
        got[layout] = _upstream_read(db) + (stacks, with_stack, db.stat().st_size)
    view, table = got["view"], got["table"]
    assert table[0] is True and view[0] is False  # upstream's type='table' check
    assert view[1] == table[1] == [n for n, _ in DB_COLUMNS]
    assert view[2] == table[2] == [n for n, _ in DB_COLUMNS]
    assert len(view[3]) > 5000 and view[3] == table[3]
    assert view[4] == table[4] == '{"inefficient_type":"early_allocation"}'
    n, distinct = view[5]
    assert n == distinct and 0 < n < 10 and view[6] > 3000  # thousands of rows with a stack, a handful stored
    assert view[7] * 4 < table[7]


def _sink_placement(tmp_path, name, args, env=None, cpus=None):
    """The log's line saying where the sinks ran (framework/host/pipeline.cpp)."""
    import os
    import subprocess
    from conftest import CLI
    e = dict(os.environ)
    e.pop("MSMEMSCOPE_SINK_THREADS", None)
    e.update(env or {})
    cmd = (["taskset", "-c", cpus] if cpus else []) + [str(CLI), "--device=cpu", f"--output={tmp_path / name}"] + args + [
        "--", "/usr/bin/python3", "-c", "pass"]
    p = subprocess.run(cmd, cwd=tmp_path, env=e, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stdout + p.stderr
    log = only((only(process_dirs(tmp_path / name)) / "msmemscope_logs").glob("*.log")).read_text()
    return [l.split("[info] ", 1)[-1] for l in log.splitlines() if "[info] sinks: " in l]


def test_a_lone_sink_gets_a_thread_only_where_it_pays(tmp_path):
    # one CPU for the host (taskset): a lone sink beside analyses stays on the pipeline's thread
    assert _sink_placement(tmp_path, "a", ["--analysis=leaks"], cpus="0") == [
        "sinks: csv on the pipeline's thread (a lone sink, fewer than 3 CPUs for the host)"]
    assert _sink_placement(tmp_path, "b", ["--analysis=leaks"], env={"MSMEMSCOPE_SINK_THREADS": "1"}, cpus="0") == [
        "sinks: csv on a thread of its own"]
    assert _sink_placement(tmp_path, "c", ["--analysis=leaks", "--sinks=csv,html"], cpus="0") == [
        "sinks: csv, html each on a thread of its own"]
    assert _sink_placement(tmp_path, "d", ["--analysis="]) == ["sinks: csv on the pipeline's thread (a lone sink, no analyses)"]
    assert _sink_placement(tmp_path, "e", ["--analysis=leaks", "--sinks=csv,html"],
                           env={"MSMEMSCOPE_SINK_THREADS": "0"}) == [
        "sinks: csv, html on the pipeline's thread (MSMEMSCOPE_SINK_THREADS=0 or an address-space limit)"]
