"""Issue 29 item 6: --analyze and --compare stream their input, so their memory
follows what the input keeps live (blocks, operators, per-step figures), not
its number of rows: a 1 M-row dump is analysed, and two are compared, in
under 256 MiB (they took ~850 bytes a row: 850 MB, and twice that for
--compare). A run that needs more than its memory budget (--offline-memory),
or whose allocation fails (`ulimit -v`, a cgroup), ends with one
`msmemscope: error:` line and exit 70 instead of being killed without a word.
Peak memory is read from the kernel (wait4's ru_maxrss, which covers the
analysis worker the tool forks); nothing here is timed."""
import os
import re
import subprocess

import pytest

from conftest import CLI

HEADER = ("ID,Event,Event Type,Name,Timestamp(ns),Process Id,Thread Id,Device Id,Ptr,Attr,"
          "Call Stack(Python),Call Stack(C)")
MiB = 1 << 20


def write_dump(path, rows, live_every=0, ops_every=8, swap_every=0, extra_ts=0):
    """An upstream-format dump of `rows` rows: mostly PTA MALLOC/FREE pairs (a
    few blocks live at a time), an operator around every `ops_every`-th pair,
    a step every 1000 rows. live_every: every n-th block is never freed.
    swap_every: swap every n-th row with the next (rows out of time order, as
    upstream writes several threads)."""
    out, i, ts, used, step, pair = [], 0, 1000 + extra_ts, 0, 0, 0

    def row(text):
        out.append(text)

    while i < rows:
        if i // 1000 >= step:
            step += 1; i += 1; ts += 10
            row(f"{i},SYSTEM,STEP,{step},{ts},100,200,N/A,N/A,{{}},,")
        pair += 1
        op = ops_every and pair % ops_every == 0
        if op:
            i += 1; ts += 10
            row(f"{i},OP_LAUNCH,ATEN_START,aten::add,{ts},100,200,0,N/A,{{}},,")
        ptr = 0x10000000 + pair * 0x1000 if live_every and pair % live_every == 0 else 0x100000 + (pair % 64) * 0x1000
        i += 1; ts += 10; used += 1024
        row(f'{i},MALLOC,PTA,N/A,{ts},100,200,0,0x{ptr:x},'
            f'"{{allocation_id:{i},addr:0x{ptr:x},size:1024,total:67108864,used:{used}}}",,')
        if not (live_every and pair % live_every == 0):
            i += 1; ts += 10; used -= 1024
            row(f'{i},FREE,PTA,N/A,{ts},100,200,0,0x{ptr:x},'
                f'"{{allocation_id:{i - 1},addr:0x{ptr:x},size:-1024,total:67108864,used:{used}}}",,')
        if op:
            i += 1; ts += 10
            row(f"{i},OP_LAUNCH,ATEN_END,aten::add,{ts},100,200,0,N/A,{{}},,")
    if swap_every:
        for k in range(0, len(out) - 1, swap_every):
            out[k], out[k + 1] = out[k + 1], out[k]
    with open(path, "w") as f:
        f.write(HEADER + "\n")
        for k in range(0, len(out), 100000):
            f.write("\n".join(out[k:k + 100000]) + "\n")
    return path


TIME = "/usr/bin/time"


def measured(args, cwd, prefix=()):
    """(exit code, stdout, stderr, peak RSS in bytes of the tool and the workers it waited for).
    Linux carries a process's peak RSS across fork and exec, so the tool is
    started by /usr/bin/time (a small process: its child's figure is the
    tool's own); without it, wait4's figure is an upper bound (it includes
    this test process's size at the fork)."""
    e = dict(os.environ)
    e.pop("LD_PRELOAD", None)
    timed = os.access(TIME, os.X_OK)
    wrap = [TIME, "-f", "%M", "-o", str(cwd / "maxrss.txt")] if timed else []
    with open(cwd / "stdout.txt", "w") as so, open(cwd / "stderr.txt", "w") as se:
        p = subprocess.Popen(wrap + list(prefix) + [str(CLI)] + [str(a) for a in args], cwd=str(cwd), env=e,
                             stdout=so, stderr=se)
        _, status, ru = os.wait4(p.pid, 0)
        p.returncode = os.waitstatus_to_exitcode(status)
    peak = ru.ru_maxrss * 1024
    if timed:
        peak = int((cwd / "maxrss.txt").read_text().split()[-1]) * 1024
    return p.returncode, (cwd / "stdout.txt").read_text(), (cwd / "stderr.txt").read_text(), peak


def errors(err):
    return [l for l in err.splitlines() if l.startswith("msmemscope: error:")]


def test_analyze_streams_a_million_rows_in_under_256_mib(tmp_path):
    # Out of time order (every 5th row swapped with the next): sorted by
    # runs spilled to a temporary file, not in memory.
    f = write_dump(tmp_path / "memscope_dump_1.csv", 1_000_000, swap_every=5)
    rc, out, err, peak = measured(["--analyze=leaks,decompose,inefficient", f"--input={f}",
                                   f"--output={tmp_path / 'out'}"], tmp_path)
    assert rc == 0, err
    assert f"msmemscope: analysed {f} (1000000 rows) with leaks, decompose, inefficient" in out.splitlines(), out
    assert peak < 256 * MiB, f"peak RSS {peak / MiB:.0f} MiB"


def test_compare_streams_a_million_rows_per_run_in_under_256_mib(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir(); b.mkdir()
    write_dump(a / "memscope_dump_1.csv", 1_000_000)
    write_dump(b / "memscope_dump_1.csv", 1_000_000, swap_every=5)
    rc, out, err, peak = measured(["--compare", f"--input={a},{b}", f"--output={tmp_path / 'cmp'}"], tmp_path)
    assert rc == 0, err
    assert peak < 256 * MiB, f"peak RSS {peak / MiB:.0f} MiB"
    [csv] = (tmp_path / "cmp" / "compare").glob("memory_compare_*.csv")
    lines = csv.read_text().splitlines()
    # one operator every 8th pair, the same in both runs, each allocating one block
    ops = (a / "memscope_dump_1.csv").read_text().count(",ATEN_END,")
    assert ops > 50000
    assert len(lines) == 2 + ops, (len(lines), out)
    assert set(lines[2:]) == {"OP_LAUNCH,aten::add,0,1024,1024,0"}
    assert f"msmemscope: compare: {ops} row(s) written to " in out


def test_rows_out_of_time_order_give_the_same_result_as_sorted_rows(tmp_path):
    # The external sort (runs of at most 1/8 of the budget, here 2 MiB, so
    # several) delivers what an in-memory stable sort did.
    a, b, c = tmp_path / "a", tmp_path / "b", tmp_path / "c"
    for d in (a, b, c):
        d.mkdir()
    write_dump(a / "memscope_dump_1.csv", 60_000, ops_every=3)
    write_dump(b / "memscope_dump_1.csv", 60_000, ops_every=3, swap_every=3)
    write_dump(c / "memscope_dump_1.csv", 50_000, ops_every=4, extra_ts=5)
    results = []
    for base in (a, b):
        out_dir = tmp_path / f"cmp_{base.name}"
        rc, out, err, _ = measured(["--compare", f"--input={base},{c}", "--offline-memory=16",
                                    f"--output={out_dir}"], tmp_path)
        assert rc == 0, err
        [csv] = (out_dir / "compare").glob("memory_compare_*.csv")
        results.append(csv.read_text())
    assert results[0] == results[1]
    assert len(results[0].splitlines()) > 1000


def test_over_the_memory_budget_is_one_error_and_exit_70(tmp_path):
    # Every block kept: 300,000 live blocks need more than 16 MiB.
    f = write_dump(tmp_path / "memscope_dump_1.csv", 400_000, live_every=1, ops_every=0)
    rc, out, err, _ = measured(["--analyze=leaks", f"--input={f}", "--offline-memory=16",
                                f"--output={tmp_path / 'out'}"], tmp_path)
    assert rc == 70, (rc, err)
    [line] = errors(err)
    assert re.fullmatch(
        rf"msmemscope: error: --analyze: {re.escape(str(f))}: out of memory: \d+ MiB in use after \d+ row\(s\), "
        r"over the memory budget of 16 MiB \(--offline-memory; what the input keeps live: blocks, operators, "
        r"per-step figures\); nothing was written back", line), line


def test_a_budget_that_is_not_a_size_is_refused(tmp_path):
    rc, out, err, _ = measured(["--analyze=leaks", "--input=x.csv", "--offline-memory=8"], tmp_path)
    assert rc == 2
    assert errors(err) == ["msmemscope: error: --offline-memory: invalid value '8' "
                           "(allowed: MiB 16..4194304, e.g. --offline-memory=2048)"]


def test_a_dump_name_on_a_fifo_inside_an_input_folder_is_refused(tmp_path):
    # --input names a folder: a memscope_dump_*.csv in it that is a FIFO used
    # to be skipped without a word (and would block if opened).
    d = tmp_path / "run"
    d.mkdir()
    write_dump(d / "memscope_dump_1.csv", 100)
    os.mkfifo(d / "memscope_dump_2.csv")
    for args in (["--analyze=leaks", f"--input={d}"], ["--compare", f"--input={d},{d}"]):
        rc, out, err, _ = measured(args + [f"--output={tmp_path / 'o'}"], tmp_path)
        assert rc == 2, err
        assert errors(err) == [f"msmemscope: error: --input: {d}/memscope_dump_2.csv: not a regular file (a FIFO)"]


def test_a_failed_allocation_under_prlimit_is_one_error_and_exit_70(tmp_path):
    # `prlimit --as` (a bare number of bytes: 192 MiB) and 1 M blocks that all
    # stay live (the leak analysis needs ~220 MiB for them): the allocation
    # that fails is said in one line, not a crash or a silent kill.
    f = write_dump(tmp_path / "memscope_dump_1.csv", 1_000_000, live_every=1, ops_every=0)
    rc, out, err, _ = measured(["--analyze=leaks", f"--input={f}", f"--output={tmp_path / 'out'}"], tmp_path,
                               prefix=["prlimit", f"--as={192 * MiB}", "--"])
    assert rc == 70, (rc, err[-2000:])
    [line] = errors(err)
    assert re.fullmatch(rf"msmemscope: error: --analyze: {re.escape(str(f))}: out of memory \(an allocation failed "
                        r"after \d+ MiB in use; --offline-memory sets the budget\); nothing was written back", line), line


def test_the_leak_list_past_the_screen_goes_into_a_missing_output_folder(tmp_path):
    # --analyze's run folder is --output: made when missing (the full leak
    # list used to fail there with "cannot open the run folder" and exit 0),
    # and removed again when nothing was written into it.
    f = write_dump(tmp_path / "memscope_dump_1.csv", 6000, live_every=40, ops_every=0)
    out = tmp_path / "a" / "b"
    rc, stdout, err, _ = measured(["--analyze=leaks", f"--input={f}", f"--output={out}"], tmp_path)
    assert rc == 0, err
    assert errors(err) == []
    [more] = [l for l in stdout.splitlines() if l.startswith("... ")]
    m = re.fullmatch(rf"\.\.\. (\d+) more in {re.escape(str(out))}/(leaks_\d+\.txt)", more)
    assert m, more
    listed = (out / m.group(2)).read_text().splitlines()
    shown = [l for l in stdout.splitlines() if l.startswith("Direct ")]
    assert len(shown) == 20
    assert len([l for l in listed if l.startswith("Direct ")]) == 20 + int(m.group(1))
    # nothing to write: no folder left behind
    rc, stdout, err, _ = measured(["--analyze=inefficient", f"--input={f}", f"--output={tmp_path / 'c'}"], tmp_path)
    assert rc == 0, err
    assert not (tmp_path / "c").exists()
