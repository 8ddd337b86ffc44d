"""Issue #28 item 4: upstream's own dump files, read as upstream reads them.

Inputs (tests/fixtures/upstream_dumps/, copied unchanged from upstream, see
its README): the two dumps of upstream's smoke case `step_compare`
(test/smoke/testfile/csvfile/, a 2025 build: PTA FREE sizes negative,
`size:-512`; Ptr in decimal; Device Id `host`; two processes in one file)
and example/compare's baseline.csv and leaks.csv (a later build). Upstream
reads the Attr size as a signed int64 (csrc/analysis/memory_compare.cpp
GetMemoryUsage: StrToInt64); so do we, and the record keeps the bytes.

step_compare, as upstream's smoke suite runs it (test/smoke/run_st.py):

    msmemscope --input=<...810.csv>,<...811.csv> --compare --log-level=info --level=1

in a fresh working folder; its check (src/test_suit/step_compare_test.py,
restated here in our words): under ./memscopeDumpResults (searched through
its subfolders) exactly one file whose name starts with memory_compare and
ends with .csv; its name is memory_compare_<1-20 digits>.csv; its first two
lines are upstream's two header lines, exactly; after them, exactly 12
lines. We also assert the 12 rows themselves: kernel level aligns the
KERNEL_LAUNCH rows of each device (base 6, compare 5, all named N/A) and
gives each the Attr size, as written, of the first PTA row (MALLOC or FREE)
at or after it, which is what upstream's own compare computes from these
files (worked out by hand from the rows; a FREE's size is negative).
"""
import csv
import re
import shutil
import sqlite3
from pathlib import Path

import pytest

from conftest import SOURCE, run_cli

FIXTURES = SOURCE / "tests" / "fixtures" / "upstream_dumps"
BASE = "memscope_dump_20250428113810.csv"
COMPARE = "memscope_dump_20250428113811.csv"
EX_BASE = "example_compare_baseline.csv"
EX_LEAKS = "example_compare_leaks.csv"

HEADER1 = ",,,Base,Compare\n"
HEADER2 = "Event,Name,Device Id,Allocated Memory(byte),Allocated Memory(byte),Diff Memory(byte)\n"

# The rows of `--compare --level=1` of the two step_compare dumps (see the
# module doc). Device 0: the compare run lacks the last launch; the fifth is
# followed by a PTA MALLOC of 512 bytes in the base run and of 18944 in the
# compare run. Device 1: the fourth launch is followed by a FREE of 18944
# bytes (written -18944) in both.
STEP_COMPARE_ROWS = [
    "KERNEL_LAUNCH,N/A,0,7168,7168,0",
    "KERNEL_LAUNCH,N/A,0,3584,3584,0",
    "KERNEL_LAUNCH,N/A,0,3584,3584,0",
    "KERNEL_LAUNCH,N/A,0,1024,1024,0",
    "KERNEL_LAUNCH,N/A,0,512,18944,18432",
    "KERNEL_LAUNCH,N/A,0,18944,N/A,-18944",
    "KERNEL_LAUNCH,N/A,1,7168,7168,0",
    "KERNEL_LAUNCH,N/A,1,3584,3584,0",
    "KERNEL_LAUNCH,N/A,1,3584,3584,0",
    "KERNEL_LAUNCH,N/A,1,-18944,-18944,0",
    "KERNEL_LAUNCH,N/A,1,512,512,0",
    "KERNEL_LAUNCH,N/A,1,512,N/A,-512",
]


def copy_fixtures(dest, *names):
    dest.mkdir(parents=True, exist_ok=True)
    for n in names:
        shutil.copyfile(FIXTURES / n, dest / n)
    return [dest / n for n in names]


def step_compare_check(work):
    """Upstream's step_compare check_dump, in our words; returns the data lines."""
    results = work / "memscopeDumpResults"
    assert results.is_dir(), sorted(str(p) for p in work.rglob("*"))
    found = [p for p in results.rglob("*") if p.is_file() and p.name.startswith("memory_compare")
             and p.name.endswith(".csv")]
    assert len(found) == 1, found
    assert re.match(r"memory_compare_\d{1,20}\.csv", found[0].name), found[0].name
    with open(found[0]) as f:
        assert f.readline() == HEADER1
        assert f.readline() == HEADER2
        rest = f.readlines()
    assert len(rest) == 12, rest
    return [line.rstrip("\n") for line in rest]


def compare_rows(out):
    found = sorted(Path(out).rglob("memory_compare_*.csv"))
    assert len(found) == 1, found
    lines = found[0].read_text().splitlines()
    assert lines[0] + "\n" == HEADER1 and lines[1] + "\n" == HEADER2
    return lines[2:]


def test_step_compare_case_as_upstreams_smoke_suite_runs_it(tmp_path):
    files = tmp_path / "testfile" / "csvfile"
    copy_fixtures(files, BASE, COMPARE)
    work = tmp_path / "work" / "check_step_compare"
    work.mkdir(parents=True)
    p = run_cli([f"--input=../../testfile/csvfile/{BASE},../../testfile/csvfile/{COMPARE}", "--compare",
                 "--log-level=info", "--level=1"], work, check_rc=0)
    assert "invalid size" not in p.stderr
    assert step_compare_check(work) == STEP_COMPARE_ROWS
    # The log upstream's (disabled) check_log looks for.
    logs = list((work / "memscopeDumpResults").rglob("msmemscope_*.log"))
    assert len(logs) == 1, logs
    text = logs[0].read_text()
    assert "Start to compare memory data." in text
    assert "The memory comparison has been completed in a total time of" in text
    # The host rows (Device Id host) are left out, as upstream leaves them out.
    assert "device cpu has no operator or kernel rows in either run; left out" in p.stdout


def test_step_compare_kernel_level_spelled_kernel(tmp_path):
    a, b = copy_fixtures(tmp_path, BASE, COMPARE)
    run_cli(["--compare", f"--input={a},{b}", "--level=kernel", f"--output={tmp_path / 'out'}"], tmp_path,
            check_rc=0)
    assert compare_rows(tmp_path / "out") == STEP_COMPARE_ROWS


def test_step_compare_dumps_swapped(tmp_path):
    # Compare as base: the launch only the base run had is now only in compare.
    a, b = copy_fixtures(tmp_path, BASE, COMPARE)
    run_cli(["--compare", f"--input={b},{a}", "--level=1", f"--output={tmp_path / 'out'}"], tmp_path, check_rc=0)
    swapped = []
    for row in STEP_COMPARE_ROWS:
        ev, name, dev, x, y, _ = row.split(",")
        diff = (0 if x == "N/A" else int(x)) - (0 if y == "N/A" else int(y))
        swapped.append(f"{ev},{name},{dev},{y},{x},{diff}")
    assert compare_rows(tmp_path / "out") == swapped


def pta_live_bytes(path):
    """Per device, the bytes of PTA blocks still live at the end: a FREE ends the
    block at its (process, device, Ptr); its size may be written negative."""
    with open(path, newline="") as f:
        rows = sorted(csv.DictReader(f), key=lambda r: int(r["Timestamp(ns)"]))
    live = {}
    for r in rows:
        if r["Event Type"] != "PTA" or r["Event"] not in ("MALLOC", "FREE"):
            continue
        size = int(re.search(r"size:(-?\d+)", r["Attr"]).group(1))
        key = (r["Process Id"], r["Device Id"], r["Ptr"])
        if r["Event"] == "MALLOC":
            live[key] = size
        else:
            live.pop(key, None)
    out = {}
    for (_, dev, _), size in live.items():
        out[dev] = out.get(dev, 0) + size
    return out


def decompose_pta(stdout):
    """{device: live bytes of owner PTA} from decompose's report."""
    out, dev = {}, None
    for line in stdout.splitlines():
        m = re.match(r"decompose: memory by owner on device (\S+):", line)
        if m:
            dev = m.group(1)
            continue
        m = re.match(r"\s+PTA\s+(\d+)\s+(\d+)\s+(\d+)$", line)
        if m and dev is not None:
            out[dev] = int(m.group(1))
    return out


@pytest.mark.parametrize("name,rows", [(BASE, 330), (COMPARE, 328), (EX_BASE, 121), (EX_LEAKS, 130)])
@pytest.mark.parametrize("analysis", ["leaks", "decompose", "inefficient", "oom", "watch"])
def test_analyze_reads_upstreams_dumps(tmp_path, name, rows, analysis):
    (f,) = copy_fixtures(tmp_path, name)
    p = run_cli([f"--analyze={analysis}", f"--input={f}", f"--output={tmp_path / 'out'}"], tmp_path, check_rc=0)
    assert f"msmemscope: analysed {f} ({rows} rows) with {analysis}" in p.stdout, p.stdout + p.stderr
    assert "error" not in p.stderr, p.stderr
    if analysis == "decompose":
        expected = {d: v for d, v in pta_live_bytes(FIXTURES / name).items() if d not in ("N/A", "host")}
        assert decompose_pta(p.stdout) == expected, p.stdout


def test_the_negative_free_sizes_are_what_the_live_bytes_need():
    # The figures test_analyze_reads_upstreams_dumps compares with, worked out
    # once by hand: device 1 has four FREEs of blocks allocated before the
    # dump began (no MALLOC row), which change nothing.
    assert pta_live_bytes(FIXTURES / BASE) == {"0": 3649536, "1": 110080}


# Upstream's SQLite form of the same rows (csrc/analysis/data_handler.cpp,
# DbHandler::WriteDumpRecord): Attr through FixJson ({"k":"v",...}, every
# value a string), an MSTX name inside literal double quotes, Ptr 0x%016llx
# for MALLOC/FREE/ACCESS, N/A otherwise.
def upstream_json(attr):
    if not attr:
        return "{}"
    body = attr[1:-1] if attr.startswith("{") and attr.endswith("}") else attr
    parts = []
    for item in body.split(","):
        k, _, v = item.partition(":")
        parts.append(f'"{k}":"{v}"')
    return "{" + ",".join(parts) + "}"


def to_upstream_db(src, dest):
    with open(src, newline="") as f:
        r = csv.reader(f)
        header = next(r)
        rows = list(r)
    con = sqlite3.connect(dest)
    cols = ", ".join(f'"{h}"' for h in header)
    con.execute(f"CREATE TABLE memscope_dump ({cols})")
    for row in rows:
        d = dict(zip(header, row))
        if d["Event"] == "MSTX":
            d["Name"] = f'"{d["Name"]}"'
        if d["Event"] in ("MALLOC", "FREE", "ACCESS") and d["Ptr"] not in ("", "N/A"):
            d["Ptr"] = "0x%016x" % int(d["Ptr"], 0)
        d["Attr"] = upstream_json(d["Attr"])
        con.execute(f"INSERT INTO memscope_dump VALUES ({','.join('?' * len(header))})",
                    [int(d[h]) if h in ("ID", "Timestamp(ns)", "Process Id", "Thread Id") else d[h]
                     for h in header])
    con.commit()
    con.close()


def test_upstreams_db_form_compares_and_analyses_the_same(tmp_path):
    a, b = tmp_path / "memscope_dump_base.db", tmp_path / "memscope_dump_compare.db"
    to_upstream_db(FIXTURES / BASE, a)
    to_upstream_db(FIXTURES / COMPARE, b)
    assert sqlite3.connect(a).execute(
        "SELECT Name, Attr FROM memscope_dump WHERE Event='MSTX' AND \"Event Type\"='Range_start' LIMIT 1"
    ).fetchone()[0] == '"step start"'
    run_cli(["--compare", f"--input={a},{b}", "--level=1", f"--output={tmp_path / 'out'}"], tmp_path, check_rc=0)
    assert compare_rows(tmp_path / "out") == STEP_COMPARE_ROWS
    p = run_cli(["--analyze=decompose", f"--input={a}", f"--output={tmp_path / 'out2'}"], tmp_path, check_rc=0)
    assert decompose_pta(p.stdout) == {"0": 3649536, "1": 110080}, p.stdout


def test_upstreams_2026_csv_form_compares_the_same(tmp_path):
    # The same rows as a 2026 build writes them: Ptr 0x%016llx, Device Id cpu
    # for the host rows.
    for name in (BASE, COMPARE):
        with open(FIXTURES / name, newline="") as f:
            rows = list(csv.reader(f))
        for r in rows[1:]:
            if r[1] in ("MALLOC", "FREE") and r[8] != "N/A":
                r[8] = "0x%016x" % int(r[8])
            if r[7] == "host":
                r[7] = "cpu"
        with open(tmp_path / name, "w", newline="") as f:
            csv.writer(f, lineterminator="\n").writerows(rows)
    run_cli(["--compare", f"--input={tmp_path / BASE},{tmp_path / COMPARE}", "--level=1",
             f"--output={tmp_path / 'out'}"], tmp_path, check_rc=0)
    assert compare_rows(tmp_path / "out") == STEP_COMPARE_ROWS


def test_example_compare_level_op_is_upstreams_rule(tmp_path):
    # example/compare/README.md: `msmemscope --compare --input=baseline.csv,leaks.csv`
    # (its default level, op). With --level=op given, ours is upstream's rule:
    # each ATEN_END gets the size of the first PTA row after it.
    a, b = copy_fixtures(tmp_path, EX_BASE, EX_LEAKS)
    run_cli(["--compare", f"--input={a},{b}", "--level=op", f"--output={tmp_path / 'out'}"], tmp_path,
            check_rc=0)
    rows = compare_rows(tmp_path / "out")
    assert len(rows) == 44, rows
    # Each of the leaking run's two iterations makes a 4000256-byte tensor
    # (randn, then moved to the device by _to_copy) that the base run has not;
    # under upstream's rule the row after an op takes the next PTA row's size,
    # so the optimizer's ops before it show the difference too.
    differing = [r for r in rows if not r.endswith(",0") or ",N/A," in r]
    assert differing == [
        "OP_LAUNCH,torch._ops.aten._foreach_add_.List,0,1536,4000256,3998720",
        "OP_LAUNCH,torch._ops.profiler._record_function_exit._RecordFunction,0,1536,4000256,3998720",
        "OP_LAUNCH,torch._ops.aten.randn.default,0,N/A,4000256,4000256",
        "OP_LAUNCH,torch._ops.aten._to_copy.default,0,N/A,1536,1536",
        "OP_LAUNCH,torch._ops.aten._foreach_add_.List,0,0,4000256,4000256",
        "OP_LAUNCH,torch._ops.profiler._record_function_exit._RecordFunction,0,0,4000256,4000256",
        "OP_LAUNCH,torch._ops.aten.randn.default,0,N/A,4000256,4000256",
        "OP_LAUNCH,torch._ops.aten._to_copy.default,0,N/A,0,0",
    ], rows
    assert rows[0] == "OP_LAUNCH,torch._ops.aten.t.default,0,1536,1536,0"


def test_example_compare_as_its_readme_types_it(tmp_path):
    # Without --level: our default operator rule (bytes allocated between an
    # operator's start and end); the leaking run's extra randn shows.
    copy_fixtures(tmp_path, EX_BASE, EX_LEAKS)
    run_cli(["--compare", f"--input={EX_BASE},{EX_LEAKS}"], tmp_path, check_rc=0)
    rows = compare_rows(tmp_path / "memscopeDumpResults")
    assert len(rows) == 44, rows
    # what each op allocated between its start and its end: the extra tensor
    # is _to_copy's (randn made it on the host)
    assert [r for r in rows if not r.endswith(",0") or ",N/A," in r] == [
        "OP_LAUNCH,torch._ops.aten.randn.default,0,N/A,0,0",
        "OP_LAUNCH,torch._ops.aten._to_copy.default,0,N/A,4000256,4000256",
    ] * 2, rows


def bad_copy(tmp_path, edit):
    lines = (FIXTURES / BASE).read_text().splitlines(keepends=True)
    lines = edit(lines)
    path = tmp_path / "memscope_dump_bad.csv"
    path.write_text("".join(lines))
    return path


@pytest.mark.parametrize("edit,message", [
    # a size that is not an int64 (upstream's StrToInt64 fails on it too)
    (lambda ls: ls[:265] + [ls[265].replace("size:-512", "size:-51x2")] + ls[266:],
     ":266: invalid size '-51x2' in Attr (expected a number of bytes)"),
    (lambda ls: ls[:265] + [ls[265].replace("size:-512", "size:-9223372036854775809")] + ls[266:],
     ":266: invalid size '-9223372036854775809' in Attr (expected a number of bytes)"),
    # a row with a field too few (upstream: "The file ... on line 266 is invalid!")
    (lambda ls: ls[:265] + [ls[265].replace("2523740,2523740,", "2523740,", 1)] + ls[266:],
     ":266: expected 12 fields, found 11"),
    # another header (upstream: "The headers of ... file is illegal!")
    (lambda ls: [ls[0].replace("Attr", "Attrs")] + ls[1:],
     ":1: not a memscope_dump CSV: missing column(s) Attr in the header"),
])
def test_what_upstream_refuses_is_still_refused(tmp_path, edit, message):
    bad = bad_copy(tmp_path, edit)
    good = tmp_path / COMPARE
    shutil.copyfile(FIXTURES / COMPARE, good)
    p = run_cli(["--compare", f"--input={bad},{good}", "--level=1", f"--output={tmp_path / 'out'}"], tmp_path)
    assert p.returncode == 2, p.stdout + p.stderr
    assert f"msmemscope: error: --input: {bad}{message}" in p.stderr, p.stderr
    p = run_cli(["--analyze=leaks", f"--input={bad}", f"--output={tmp_path / 'out'}"], tmp_path)
    assert p.returncode == 2, p.stdout + p.stderr
    assert f"msmemscope: error: --input: {bad}{message}" in p.stderr, p.stderr


def test_leaks_mark_rule_on_upstreams_dump_says_what_its_check_leaks_says(tmp_path):
    # Upstream's offline check_leaks(input, mstx_info, 0) on this file: one mark
    # per device, so each device gets its "fewer than 3 data points" error.
    # Upstream names the host rows `host`, the file's spelling, and goes
    # through the devices in the order they first appear (0, host, 1).
    (f,) = copy_fixtures(tmp_path, BASE)
    mark = "[mstx]: mstxMarkA :------training start----- "
    p = run_cli(["--analyze=leaks", f"--input={f}", f"--plugin-option=leaks.mstx_info={mark}",
                 f"--output={tmp_path / 'out'}"], tmp_path, check_rc=0)
    lines = p.stdout.splitlines()
    assert lines[lines.index(f"msmemscope: analysed {f} (330 rows) with leaks") + 1:] == [
        line
        for dev in ("cpu", "0", "1")
        for line in (f"INFO: Starting to analyze data for device {dev}...",
                     f"ERROR: Device {dev} has fewer than 3 data points. Please re-collect the data points.")
    ], p.stdout


# Two processes in one file, each numbering its rows from 1 (as upstream's
# step_compare dumps): the mark rule finds a leak in each; the row of ID 2
# exists in both processes, so which row the result is about is not known
# and it is not written back; ID 3 is pid 100's alone.
TWO_PROCESSES = """\
ID,Event,Event Type,Name,Timestamp(ns),Process Id,Thread Id,Device Id,Ptr,Attr,Call Stack(Python),Call Stack(C)
1,MSTX,Mark,"m",10,100,100,0,N/A,,,
2,MALLOC,HAL,N/A,20,100,100,0,4096,"{addr:4096,size:1048576,owner:,MID:7}",,
3,MALLOC,HAL,N/A,25,100,100,0,12288,"{addr:12288,size:1048576,owner:,MID:7}",,
4,MSTX,Mark,"m",30,100,100,0,N/A,,,
5,MSTX,Mark,"m",40,100,100,0,N/A,,,
1,MSTX,Mark,"m",11,200,200,1,N/A,,,
2,MALLOC,HAL,N/A,21,200,200,1,8192,"{addr:8192,size:2097152,owner:,MID:7}",,
4,MSTX,Mark,"m",31,200,200,1,N/A,,,
5,MSTX,Mark,"m",41,200,200,1,N/A,,,
"""


def test_results_on_an_id_two_processes_share_are_not_written_back(tmp_path):
    f = tmp_path / "memscope_dump_two.csv"
    f.write_text(TWO_PROCESSES)
    p = run_cli(["--analyze=leaks", f"--input={f}", "--plugin-option=leaks.mstx_info=m",
                 f"--output={tmp_path / 'out'}"], tmp_path, check_rc=0)
    for line in ("Direct Hal memory leak of 1.0 Mb(s) at 0x0000000000001000 in Index 2.",
                 "Direct Hal memory leak of 1.0 Mb(s) at 0x0000000000003000 in Index 3.",
                 "Direct Hal memory leak of 2.0 Mb(s) at 0x0000000000002000 in Index 2."):
        assert line in p.stdout.splitlines(), p.stdout
    assert (f"msmemscope: warning: 2 result(s) not written back into {f}: the ID of their row is also the ID "
            "of another process's row in the file") in p.stderr, p.stderr
    assert f"msmemscope: wrote 1 result(s) back into {f}" in p.stdout
    expected = TWO_PROCESSES.replace("{addr:12288,size:1048576,owner:,MID:7}",
                                     "{addr:12288,size:1048576,owner:,MID:7,leak:hal}")
    assert f.read_text() == expected


# Call stacks as upstream writes them: the C stack is backtrace_symbols()'s
# lines inside double quotes it adds itself, the Python stack of a thread
# without Python is "NA" (csrc/utility/call_stack.cpp, cpython.cpp). In CSV
# the quotes are the field's; in its SQLite file they are part of the value.
def stack_rows(size):
    c = '"./app(alloc_weights+0x1a) [0x401a1a]\n./app(main+0x42) [0x401042]\n"'
    return [
        ["1", "MALLOC", "HAL", "N/A", "10", "7", "7", "0", "4096", "{addr:4096,size:%d,owner:,MID:7}" % size,
         '"NA"', c],
        ["2", "MALLOC", "HAL", "N/A", "20", "7", "7", "0", "8192", "{addr:8192,size:512,owner:,MID:7}", '"NA"', ""],
    ]


def write_upstream_csv(path, rows):
    # upstream's CSV writer: fields as they are, the quoted ones carrying their quotes
    header = "ID,Event,Event Type,Name,Timestamp(ns),Process Id,Thread Id,Device Id,Ptr,Attr,Call Stack(Python),Call Stack(C)"
    lines = [header] + [",".join(r[:9] + ['"%s"' % r[9]] + r[10:]) for r in rows]
    path.write_text("\n".join(lines) + "\n")


def write_upstream_db(path, rows):
    con = sqlite3.connect(path)
    con.execute('CREATE TABLE memscope_dump ("ID" INTEGER, "Event" TEXT, "Event Type" TEXT, "Name" TEXT, '
                '"Timestamp(ns)" INTEGER, "Process Id" INTEGER, "Thread Id" INTEGER, "Device Id" TEXT, '
                '"Ptr" TEXT, "Attr" TEXT, "Call Stack(Python)" TEXT, "Call Stack(C)" TEXT)')
    for r in rows:
        r = list(r)
        r[8] = "0x%016x" % int(r[8])
        r[9] = upstream_json(r[9])
        con.execute("INSERT INTO memscope_dump VALUES (?,?,?,?,?,?,?,?,?,?,?,?)", r)
    con.commit()
    con.close()


@pytest.mark.parametrize("form", ["csv", "db"])
def test_upstreams_call_stacks_name_the_sites(tmp_path, form):
    # No operator or kernel rows: compared by allocation site, the first C
    # frame; a row whose only stack is upstream's "NA" has none.
    a, b = tmp_path / f"memscope_dump_a.{form}", tmp_path / f"memscope_dump_b.{form}"
    write = write_upstream_csv if form == "csv" else write_upstream_db
    write(a, stack_rows(1024))
    write(b, stack_rows(4096))
    run_cli(["--compare", f"--input={a},{b}", f"--output={tmp_path / 'out'}"], tmp_path, check_rc=0)
    assert sorted(compare_rows(tmp_path / "out")) == [
        "MALLOC,(no stack) HAL,0,512,512,0",
        "MALLOC,./app(alloc_weights+0x1a) [0x401a1a],0,1024,4096,3072",
    ]


def test_python_api_reads_upstreams_dump_as_upstreams_python_does(tmp_path):
    # msmemscope.analyzer.check_leaks / check_inefficient (upstream's offline
    # API) on the step_compare dump: check_leaks prints what upstream's prints
    # on it (run once against upstream's python/msmemscope/analyzer/leaks.py),
    # devices in the order they first appear, `host` as the file spells it.
    import os
    import subprocess
    import sys
    from conftest import BUILD
    (f,) = copy_fixtures(tmp_path, BASE)
    mark = "[mstx]: mstxMarkA :------training start----- "
    script = ("import sys\nfrom msmemscope.analyzer import check_leaks, check_inefficient\n"
              "check_leaks(sys.argv[1], sys.argv[2], 0)\nprint('--')\ncheck_inefficient(sys.argv[1])\n")
    env = dict(os.environ, PYTHONPATH=str(BUILD / "python"))
    env.pop("LD_PRELOAD", None)
    p = subprocess.run(["/usr/bin/python3", "-c", script, str(f), mark], cwd=tmp_path, env=env,
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stdout + p.stderr
    leaks_part, ineff_part = p.stdout.split("--\n")
    assert leaks_part.splitlines() == [
        line
        for dev in ("0", "host", "1")
        for line in (f"INFO: Starting to analyze data for device {dev}...",
                     f"ERROR: Device {dev} has fewer than 3 data points. Please re-collect the data points.")
    ], p.stdout
    assert "INFO: CSV file read successfully" in ineff_part.splitlines(), p.stdout + p.stderr
    assert "ERROR" not in ineff_part, p.stdout + p.stderr
