"""Upstream's dump consistency rules on our dumps (issue #15.4/#15.7).

msMemScope's smoke tests check every memscope_dump file they produce with
two rules (test/smoke/src/utils/dump_csv_check.py: check_used_consistency,
check_allocation_pairs). They are re-implemented here, in our own words, and
run on the dumps of a C program under the CLI, a PyTorch loop through the
Python API, and a deferred start (start() after the model is built):

  used:  per device, the MALLOC (+size) and FREE (-size) rows of a pool,
         in time order, add up to the row's Attr `used` wherever it has one
         (rows without a size count 0; PTA and PTA_WORKSPACE are one pool);
  pairs: per allocation_id there are as many MALLOC as FREE rows.

Shadow rows (Attr shadow:true, COMPAT §8) are what makes both hold when
collection saw only part of a block's life; they carry no total/used.
"""
import csv
import os
import re
import subprocess
import sys
import textwrap
from collections import Counter, defaultdict

import pytest

from conftest import BUILD, DUMP_HEADER, TEST_BIN, dump_files, process_dirs

PY = "/usr/bin/python3"
# A value runs until the next ",key:" (upstream's reading of Attr).
_PAIR = re.compile(r"(\w+):(.*?)(?=,\s*\w+:|$)")


def upstream_attr(text):
    text = (text or "").strip()
    if text.startswith("{") and text.endswith("}"):
        text = text[1:-1]
    out = {}
    for k, v in _PAIR.findall(text):
        v = v.strip()
        try:
            out[k] = int(v, 16) if v.lower().startswith("0x") else int(v)
        except ValueError:
            out[k] = v or None
    return out


def typed(value):
    v = value.strip()
    try:
        return int(v, 16) if v.lower().startswith("0x") else int(v)
    except ValueError:
        return v or None


def read_rows(path):
    """The dump's rows as dicts, Attr read once with upstream's reading:
    'attr' (text values) and, on MALLOC/FREE rows, 'up' (numbers as numbers).
    Faster than conftest.read_dump on the large dumps of a deferred start
    under the CLI (every host block of the interpreter is a shadow row)."""
    rows = []
    with open(path, newline="") as f:
        r = csv.reader(f)
        header = next(r)
        assert header == DUMP_HEADER, header
        for rec in r:
            d = dict(zip(header, rec))
            text = d["Attr"].strip()
            if text.startswith("{") and text.endswith("}"):
                text = text[1:-1]
            d["attr"] = {k: v.strip() for k, v in _PAIR.findall(text)}
            if rec[1] in ("MALLOC", "FREE"):
                d["up"] = {k: typed(v) for k, v in d["attr"].items()}
            rows.append(d)
    return rows


def up_attr(r):
    return r["up"] if "up" in r else upstream_attr(r["Attr"])


def memory_rows(rows, pools):
    return [r for r in rows if r["Event"] in ("MALLOC", "FREE") and r["Event Type"] in pools]


def used_mismatches(rows, pools):
    """Rows whose `used` differs from the running total of their device."""
    bad = []
    total = defaultdict(int)
    for r in sorted(memory_rows(rows, pools), key=lambda r: (r["Device Id"], int(r["Timestamp(ns)"]), int(r["ID"]))):
        a = up_attr(r)
        size = a.get("size") if isinstance(a.get("size"), int) else 0
        total[r["Device Id"]] += size if r["Event"] == "MALLOC" else -size
        if isinstance(a.get("used"), int) and a["used"] != total[r["Device Id"]]:
            bad.append((r["ID"], r["Event"], a["used"], total[r["Device Id"]]))
    return bad


def unpaired(rows, pools):
    """allocation_id -> (MALLOC count, FREE count) where they differ."""
    count = defaultdict(Counter)
    for r in memory_rows(rows, pools):
        aid = up_attr(r).get("allocation_id")
        if aid is not None:
            count[aid][r["Event"]] += 1
    return {aid: (c["MALLOC"], c["FREE"]) for aid, c in count.items() if c["MALLOC"] != c["FREE"]}


def check_dump(path, pools_list=(("PTA", "PTA_WORKSPACE"), ("HOST",))):
    rows = read_rows(path)
    for pools in pools_list:
        assert used_mismatches(rows, pools) == [], (path, pools)
        assert unpaired(rows, pools) == {}, (path, pools)
    for r in rows:
        if r["attr"].get("shadow") == "true":
            assert r["Event"] in ("MALLOC", "FREE") and "used" not in r["attr"] and "total" not in r["attr"], r
            assert r["Call Stack(C)"] == r["Call Stack(Python)"] == "", r
    return rows


def only_dump(out):
    [d] = process_dirs(out)
    files = dump_files(d)
    assert len(files) == 1, files
    return files[0]


def shadows(rows, event, pool):
    return [r for r in rows if r["Event"] == event and r["Event Type"] == pool and r["attr"].get("shadow") == "true"]


# ---------------------------------------------------------------- the rules themselves
def test_the_rules_catch_what_upstream_catches():
    def row(i, ev, attr, ts=None, pool="PTA"):
        return {"ID": str(i), "Event": ev, "Event Type": pool, "Timestamp(ns)": str(ts or i), "Device Id": "0",
                "Attr": attr}
    good = [row(1, "MALLOC", "{allocation_id:1,addr:0x10,size:8,total:8,used:8}"),
            row(2, "MALLOC", "{allocation_id:2,addr:0x20,size:4,shadow:true}"),
            row(3, "FREE", "{allocation_id:1,addr:0x10,size:8,total:4,used:4}"),
            row(4, "FREE", "{allocation_id:2,addr:0x20,size:4,shadow:true}")]
    assert used_mismatches(good, ("PTA",)) == [] and unpaired(good, ("PTA",)) == {}
    assert unpaired(good[:3], ("PTA",)) == {2: (1, 0)}
    wrong_used = good[:2] + [row(3, "FREE", "{allocation_id:1,addr:0x10,size:8,total:8,used:8}")]
    assert used_mismatches(wrong_used, ("PTA",)) == [("3", "FREE", 8, 4)]
    assert upstream_attr("{dtype:torch.float32,shape:torch.Size([2, 3]),addr:0x10}") == {
        "dtype": "torch.float32", "shape": "torch.Size([2, 3])", "addr": 16}


# ---------------------------------------------------------------- a C program under the CLI
def test_c_program_under_the_cli(cli, tmp_path):
    out = tmp_path / "out"
    p = cli(["--device=cpu", "--events=alloc,free", "--analysis=leaks", "--call-stack=c", f"--output={out}", "--",
             TEST_BIN / "analyzers_host_leak"], cwd=tmp_path, check_rc=0)
    rows = check_dump(only_dump(out))
    # the blocks leaked at exit got a shadow FREE, and are still reported as leaks
    assert len(shadows(rows, "FREE", "HOST")) >= 13
    assert "leaks: msmemscope's details (not in upstream's report):" in p.stdout.splitlines()
    assert any(l.strip().startswith("10 block(s), 10000 bytes, allocated at: leak_big") for l in p.stdout.splitlines())


# ---------------------------------------------------------------- PyTorch through the Python API
TORCH_LOOP = """
    import sys, torch, msmemscope
    msmemscope.config(device="cpu", events="alloc,free,launch,access", analysis="leaks", output="out",
                      call_stack="c:4,python:2")
    model = torch.nn.Linear(256, 1024)        # built before start(): 1 MiB weight + bias
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    keep = []
    print("weight", model.weight.data_ptr())
    import ctypes                             # host blocks from before start() (libc's, as the
    libc = ctypes.CDLL(None)                  # program's own malloc: the CLI's hooks see them)
    libc.malloc.restype = ctypes.c_void_p
    libc.free.argtypes = [ctypes.c_void_p]
    host_kept, host_freed = libc.malloc(777777), libc.malloc(888888)
    print("host", host_kept, host_freed)
    msmemscope.start()
    libc.free(host_freed)
    for step in range(4):
        loss = model(torch.randn(8, 256)).sum()
        loss.backward()
        opt.step()
        opt.zero_grad()
        keep.append(torch.ones(64))
        msmemscope.step()
        if step == 1:
            msmemscope.stop()
            scratch = torch.zeros(1000)         # allocated and freed while stopped: never written
            del scratch
            gone = keep.pop()                   # known, freed while stopped: a shadow FREE at start()
            del gone
            late = torch.zeros(2000)            # allocated while stopped: a shadow MALLOC at start()
            msmemscope.start()
    del model.bias                              # a block from before start(), freed in the range
    msmemscope.stop()
"""


def run_script(tmp_path, body, cli=None):
    script = tmp_path / "script.py"
    script.write_text(textwrap.dedent(body))
    env = dict(os.environ)
    env.pop("LD_PRELOAD", None)
    env.pop("MSMEMSCOPE_SESSION", None)
    env["PYTHONPATH"] = str(BUILD / "python")
    cmd = [PY, str(script)]
    if cli is not None:
        cmd = [str(BUILD / "bin" / "msmemscope")] + cli + ["--"] + cmd
    p = subprocess.run(cmd, cwd=str(tmp_path), env=env, capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, f"stdout:\n{p.stdout}\nstderr:\n{p.stderr}"
    return p


def check_host_blocks_from_before_start(p, rows):
    """Under the CLI the agent remembered the host blocks made before start()
    (issue #15 item 4): shadow MALLOCs at the first START_TRACE, the FREE of
    the one freed later pairs with its shadow MALLOC, the other gets a shadow
    FREE at the end and the leak report counts it apart, not judged, in no
    leak total (test_deferred_not_judged.py)."""
    kept, freed = ("0x%016x" % int(v) for v in
                   [l for l in p.stdout.splitlines() if l.startswith("host ")][0].split()[1:])
    first_start = min(int(r["ID"]) for r in rows if r["Event"] == "SYSTEM" and r["Event Type"] == "START_TRACE")
    born = {r["Ptr"]: r for r in shadows(rows, "MALLOC", "HOST") if int(r["ID"]) > first_start}
    assert born[kept]["attr"]["size"] == "777777" and born[freed]["attr"]["size"] == "888888"
    aid = born[freed]["attr"]["allocation_id"]
    [f] = [r for r in rows if r["Event"] == "FREE" and r["attr"].get("allocation_id") == aid]
    assert f["Ptr"] == freed and f["attr"].get("shadow") is None, f
    assert [r for r in shadows(rows, "FREE", "HOST") if r["Ptr"] == kept]
    # (the script starts collection twice: a block may be from between the ranges)
    [(n, size)] = re.findall(r"^  Not judged on device cpu: (\d+) block\(s\), (\d+) bytes allocated before "
                             r"collection started or between a stop\(\) and the next start\(\) were still "
                             r"allocated at stop\(\) \(no stack: allocated while collection was off\)$",
                             p.stdout, re.M)
    assert int(n) >= 1 and int(size) >= 777777, p.stdout
    assert "allocated at: before collection started" not in p.stdout, p.stdout
    host = re.findall(r"^  Host memory still allocated at stop\(\) on device cpu: \d+ block\(s\), (\d+) bytes",
                      p.stdout, re.M)
    assert all(int(b) < 777777 for b in host), p.stdout


def check_torch_loop(p, rows):
    weight = "0x%016x" % int([l for l in p.stdout.splitlines() if l.startswith("weight ")][0].split()[1])
    born = shadows(rows, "MALLOC", "PTA")
    # the weight existed when collection started: a shadow MALLOC at the first
    # START_TRACE, before any other PTA row, and a shadow FREE at the end
    first_start = min(int(r["ID"]) for r in rows if r["Event"] == "SYSTEM" and r["Event Type"] == "START_TRACE")
    w = [r for r in born if r["Ptr"] == weight]
    assert len(w) == 1 and int(w[0]["attr"]["size"]) == 256 * 1024 * 4, born
    assert int(w[0]["ID"]) > first_start
    assert [r for r in rows if r["Event Type"] == "PTA" and int(r["ID"]) < int(w[0]["ID"])
            and r["attr"].get("shadow") != "true"] == []
    assert [r for r in shadows(rows, "FREE", "PTA") if r["Ptr"] == weight]
    # the second range starts with shadow rows for what changed while stopped
    starts = [int(r["ID"]) for r in rows if r["Event"] == "SYSTEM" and r["Event Type"] == "START_TRACE"]
    assert len(starts) == 2
    assert any(int(r["ID"]) > starts[1] and r["attr"].get("size") == str(2000 * 4) for r in born)
    assert any(int(r["ID"]) > starts[1] for r in shadows(rows, "FREE", "PTA"))
    assert not any(r["attr"].get("size") == str(1000 * 4) for r in rows if r["Event Type"] == "PTA")
    # C stacks begin at the allocator's caller, never inside our own libraries
    stacks = [r["Call Stack(C)"] for r in rows if r["Event"] == "MALLOC" and r["Event Type"] == "PTA"
              and r["Call Stack(C)"]]
    assert stacks
    for st in stacks:
        first = st.splitlines()[0]
        assert not any(x in first for x in ("_msmemscope", "libmsms_", "libmsmemscope_agent")), st
    # the leak report still names blocks that got a shadow FREE at the end
    leaks = re.findall(r"Direct Pytorch Caching memory pool leak of [\d.]+ Mb\(s\) at 0x([0-9a-f]+) in ", p.stdout)
    assert leaks, p.stdout
    ended = {r["Ptr"] for r in shadows(rows, "FREE", "PTA")}
    assert all("0x%016x" % int(a, 16) in ended for a in leaks), (leaks, p.stdout)


def test_python_api_torch_loop_with_a_model_built_before_start(tmp_path):
    pytest.importorskip("torch")
    p = run_script(tmp_path, TORCH_LOOP)
    rows = check_dump(only_dump(tmp_path / "out"))
    check_torch_loop(p, rows)


def test_cli_deferred_start_after_the_model_is_built(tmp_path):
    pytest.importorskip("torch")
    p = run_script(tmp_path, TORCH_LOOP.replace('output="out"', 'output="ignored"'),
                   cli=["--device=cpu", "--events=alloc,free,launch,access", "--analysis=leaks",
                        "--call-stack=c:4,python:2",
                        "--collect-mode=deferred", "--output=out"])
    rows = check_dump(only_dump(tmp_path / "out"))
    check_torch_loop(p, rows)
    check_host_blocks_from_before_start(p, rows)
