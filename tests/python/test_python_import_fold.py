"""Host-heap rows of Python imports under the CLI with --device=cpu
(host_heap.python_imports: framework/agent/import_fold.h, bindings/msmemscope/_boot.py).

Default (fold): while the interpreter loads a module of the Python installation
(here: one in the user site-packages, PYTHONUSERBASE), its host blocks get no
rows of their own, for their whole life; those still live are written together
as one block, the imports' heap (a MALLOC with Attr shadow:true,import:true,
blocks:N at a reserved address, no stacks), written again as it changes. The
program's own modules and the program's body are recorded as always, so the
body's rows and leak figures are the same as with python_imports=record, which
writes every import-time allocation with its stacks."""
import csv
import re
import textwrap

import pytest

from conftest import DUMP_HEADER, dump_files, parse_attr, process_dirs, pta_mallocs_of, run_with_user_site

PY = "/usr/bin/python3"

# Sizes are odd so that no other block of the run has them; bytearray(n)
# allocates n + 1 bytes with malloc (n > 512).
INSTALLED_KEPT, INSTALLED_TEMP = 777776, 555554     # in the "installed" module (user site)
OWN_KEPT = 333332                                   # in the program's own module
BODY_LEAK, BODY_TEMP = 123457, 76543                # libc malloc in the body (the leak is never freed)

INSTALLED_MOD = f"""
    KEPT = bytearray({INSTALLED_KEPT})
    _temp = bytearray({INSTALLED_TEMP})
    del _temp
"""
OWN_MOD = f"""
    import fold_installed_probe
    OWN = bytearray({OWN_KEPT})
"""
PROGRAM = f"""
    import ctypes
    import own_probe

    def body():
        libc = ctypes.CDLL(None)
        libc.malloc.restype = ctypes.c_void_p
        libc.free.argtypes = [ctypes.c_void_p]
        libc.malloc({BODY_LEAK})
        libc.free(libc.malloc({BODY_TEMP}))

    body()
    print("done", len(own_probe.fold_installed_probe.KEPT), len(own_probe.OWN))
"""


def read_rows(procdir):
    (dump,) = dump_files(procdir)
    with open(dump, newline="") as f:
        r = csv.reader(f)
        assert next(r) == DUMP_HEADER
        rows = [dict(zip(DUMP_HEADER, rec)) for rec in r]
    for row in rows:
        row["attr"] = parse_attr(row["Attr"])
    return rows


def run(tmp_path, mode):
    args = ["--device=cpu", "--events=alloc,free", "--call-stack=c,python", "--analysis=leaks,decompose",
            "--output-path=out"]
    p, procdir, _ = run_with_user_site(tmp_path / mode, {"fold_installed_probe.py": INSTALLED_MOD}, PROGRAM, args,
                                       mode, files={"own_probe.py": OWN_MOD})
    assert f"done {INSTALLED_KEPT} {OWN_KEPT}" in p.stdout
    return p, read_rows(procdir)


def host(rows, event, size=None):
    return [r for r in rows if r["Event"] == event and r["Event Type"] == "HOST"
            and (size is None or r["attr"].get("size") == str(size))]


def freed(rows, malloc_row):
    """The FREE rows of malloc_row's block (same allocation_id)."""
    return [r for r in host(rows, "FREE") if r["attr"]["allocation_id"] == malloc_row["attr"]["allocation_id"]]


def body_rows(rows):
    """(event, size, Python frames of prog.py) of the host rows whose Python
    stack is in the program's body, leaving out msmemscope's own caches."""
    out = []
    for r in host(rows, "MALLOC") + host(rows, "FREE"):
        py = r["Call Stack(Python)"]
        if "prog.py" not in py or "in body" not in py and "): body" not in py:
            continue
        if "msms_py::" in r["Call Stack(C)"]:
            continue
        frames = tuple(l.rpartition("/")[2] for l in py.splitlines() if "prog.py" in l)
        out.append((r["Event"], r["attr"].get("size"), frames))
    return sorted(out)


@pytest.fixture(scope="module")
def both(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("fold")
    return run(tmp, "fold"), run(tmp, "record")


IMPORT_HEAP = "0xffff800000000000"  # framework/agent/import_fold.h, kImportHeapAddr


def test_installed_module_blocks_still_live_are_one_block_the_imports_heap(both):
    (p, rows), _ = both
    # the module's blocks have no rows of their own: the one it keeps nor the one it frees
    assert host(rows, "MALLOC", INSTALLED_KEPT + 1) == []
    assert host(rows, "MALLOC", INSTALLED_TEMP + 1) == []
    heap = [r for r in host(rows, "MALLOC") + host(rows, "FREE") if r["attr"].get("import") == "true"]
    heap.sort(key=lambda r: int(r["ID"]))
    assert heap and all(r["Ptr"] == IMPORT_HEAP and r["attr"].get("shadow") == "true" and not r["Call Stack(C)"]
                        and not r["Call Stack(Python)"] for r in heap), heap[:4]
    mallocs = [r for r in heap if r["Event"] == "MALLOC"]
    # written again as it changes: MALLOC, FREE, MALLOC, ... each FREE pairs with the MALLOC before it
    assert [r["Event"] for r in heap] == ["MALLOC", "FREE"] * (len(heap) // 2) + ["MALLOC"] * (len(heap) % 2)
    for m, f in zip(heap[0::2], heap[1::2]):
        assert f["attr"]["allocation_id"] == m["attr"]["allocation_id"] and f["attr"]["size"] == m["attr"]["size"]
    # the last one is still live at exit: its FREE is the end's shadow row
    assert len(freed(rows, mallocs[-1])) == 1
    # the module's import grew the heap by the block it kept, not by the one it freed
    sizes = [int(r["attr"]["size"]) for r in mallocs]
    growth = [b - a for a, b in zip(sizes, sizes[1:])]
    assert any(INSTALLED_KEPT + 1 <= g < INSTALLED_KEPT + 1 + INSTALLED_TEMP for g in growth), growth
    assert all(int(r["attr"]["blocks"]) >= 1 for r in mallocs)
    m = re.search(r"^  cpu/HOST: Python imports left up to (\d+) block\(s\), [\d.]+ [KMG]?i?B, live: written as one "
                  r"block, the imports' heap \((\d+) MALLOC row\(s\) as it changed, Attr shadow:true,import:true,"
                  r"blocks\), no row of their own \(host_heap.python_imports=fold\)$", p.stdout, re.M)
    assert m, p.stdout
    assert int(m.group(1)) == max(int(r["attr"]["blocks"]) for r in mallocs)
    assert int(m.group(2)) == len(mallocs)


def test_program_own_module_is_recorded_with_stacks(both):
    (_, rows), _ = both
    own = host(rows, "MALLOC", OWN_KEPT + 1)
    assert len(own) == 1 and "shadow" not in own[0]["attr"], own
    assert "own_probe.py" in own[0]["Call Stack(Python)"] and own[0]["Call Stack(C)"]


def test_record_writes_every_import_allocation_with_stacks(both):
    _, (p, rows) = both
    assert not [r for r in rows if r["attr"].get("import") == "true"]
    assert "python_imports=fold" not in p.stdout
    for size in (INSTALLED_KEPT + 1, INSTALLED_TEMP + 1):
        (m,) = host(rows, "MALLOC", size)
        assert "fold_installed_probe.py" in m["Call Stack(Python)"] and m["Call Stack(C)"], m
    (t,) = host(rows, "MALLOC", INSTALLED_TEMP + 1)
    assert len(freed(rows, t)) == 1


def test_body_rows_and_leak_figures_are_the_same(both):
    (pf, fold), (pr, record) = both
    fb, rb = body_rows(fold), body_rows(record)
    assert fb == rb
    assert (("MALLOC", str(BODY_LEAK), ) in {x[:2] for x in fb}
            and ("FREE", str(BODY_TEMP)) in {x[:2] for x in fb}), fb
    # the leak report's line of the body's block is the same
    # (the site is the program's line, in its own folder per mode)
    def leak_line(p):
        return [l.rpartition("/")[2] for l in p.stdout.splitlines() if f"{BODY_LEAK} bytes, allocated at: " in l]
    assert leak_line(pf) == leak_line(pr) == ["prog.py(9): body"], pf.stdout
    # decompose: the body's block has the same owner in both
    for rows in (fold, record):
        (leak,) = host(rows, "MALLOC", BODY_LEAK)
        assert leak["attr"].get("owner") == "HOST" and "prog.py" in leak["Call Stack(Python)"]


# While an installed module is imported the thread's profile function, where
# there is one (MSMEMSCOPE_PY_STACKS=shadow), is off (no frame object per call
# of the import machinery; _boot.py, py_trace.h): a tensor made meanwhile
# still gets its exact Python stack, read from the interpreter's own frames,
# the same text as the profile function's stack -- and as the default's,
# which reads every stack from the interpreter's frames, with no profile
# function at all.
PAUSE_MOD = """
    import sys
    import torch

    PROFILE = type(sys.getprofile()).__name__


    def make(n):
        return torch.empty(n, dtype=torch.uint8)


    T = make(12345)
"""
PAUSE_PROGRAM = """
    import sys
    import torch
    import pause_probe
    after = torch.empty(54321, dtype=torch.uint8)
    print("profile", pause_probe.PROFILE, type(sys.getprofile()).__name__)
"""


def run_pause(tmp_path, mode, stacks="shadow"):
    args = ["--device=cpu", "--events=alloc,free", "--call-stack=python", "--output-path=out"]
    p, procdir, site = run_with_user_site(tmp_path / (mode + "_" + stacks), {"pause_probe.py": PAUSE_MOD},
                                          PAUSE_PROGRAM, args, mode, env={"MSMEMSCOPE_PY_STACKS": stacks})
    stacks = {r["attr"].get("size"): r["Call Stack(Python)"] for r in pta_mallocs_of(procdir)
              if r["attr"].get("size") in ("12345", "54321")}
    return p.stdout, stacks, site


def test_tensor_made_in_installed_import_has_exact_stack(tmp_path):
    pytest.importorskip("torch")
    fold_out, fold, site = run_pause(tmp_path, "fold")
    record_out, record, _ = run_pause(tmp_path, "record")
    frames_out, frames, frames_site = run_pause(tmp_path, "fold", "frames")
    # fold: the profile function was off inside the installed module's import, back after it
    assert "profile NoneType _ProfileState" in fold_out, fold_out
    assert "profile _ProfileState _ProfileState" in record_out, record_out
    # the default: no profile function, ever
    assert "profile NoneType NoneType" in frames_out, frames_out
    probe = site / "pause_probe.py"
    inner = fold["12345"].splitlines()
    assert inner[:2] == [f"{probe}(9): make", f"{probe}(12): <module>"], fold["12345"]
    assert inner[-1].endswith("prog.py(4): <module>"), fold["12345"]
    assert fold["54321"].splitlines() == [str(tmp_path / "fold_shadow" / "prog.py") + "(5): <module>"], fold["54321"]
    # the same text as the profile function's own stacks (record: no scope, no pause), and as the default's
    assert fold["12345"] == record["12345"].replace("record_shadow", "fold_shadow")
    assert {k: v.replace("fold_frames", "fold_shadow") for k, v in frames.items()} == fold


FORK_PROGRAM = """
    import ctypes, os, sys
    import decimal, email.parser, json  # the installation's modules: their blocks are folded
    libc = ctypes.CDLL(None)
    libc.malloc.restype = ctypes.c_void_p
    for how in ("exit", "_exit"):
        pid = os.fork()
        if pid == 0:
            libc.malloc(55551)  # the child's own, never freed
            print("child", os.getpid(), how, flush=True)
            if how == "exit":
                sys.exit(0)  # the interpreter's teardown frees the parent's import blocks here
            os._exit(0)
        os.waitpid(pid, 0)
"""


def test_a_forked_child_does_not_count_its_parents_imports(cli, tmp_path):
    # The child inherited the table of the parent's folded import blocks and
    # their count: its imports' heap (a MALLOC at the reserved address, its
    # peak, its leak report's "while importing Python modules") was the
    # parent's whole import heap -- each DataLoader worker of a torch program
    # said 62 MiB for 12 KiB of its own.
    import json
    (tmp_path / "prog.py").write_text(textwrap.dedent(FORK_PROGRAM))
    # The built-in list would take the imports' heap out of the report
    # anyway: without it, the report shows whose heap it is.
    p = cli(["--device=cpu", "--call-stack=c", "--analysis=leaks", "--default-suppressions=false", "--output=out", "--",
             PY, "prog.py"], tmp_path, env={"PYTHONPATH": ""}, check_rc=0)
    children = dict((how, pid) for pid, how in re.findall(r"^child (\d+) (\S+)$", p.stdout, re.M))
    assert set(children) == {"exit", "_exit"}, p.stdout
    folders = {d.name.split("_")[1]: d for d in process_dirs(tmp_path / "out")}
    (parent,) = [pid for pid in folders if pid not in children.values()]
    parent_peak = json.loads((folders[parent] / "summary.json").read_text())["pools"]["cpu/HOST"]["peak_bytes"]
    for how, pid in children.items():
        s = json.loads((folders[pid] / "summary.json").read_text())
        assert s["pools"]["cpu/HOST"]["peak_bytes"] < 55551 + 65536 < parent_peak, (how, s["pools"], parent_peak)
        assert not [r for r in read_rows(folders[pid]) if r["Ptr"] == IMPORT_HEAP], how
        block = re.split(r"^msmemscope: pid ", p.stdout, flags=re.M)
        (mine,) = [b for b in block if b.startswith(f"{pid} ")]
        assert "while importing Python modules" not in mine, mine
    leaks = json.loads((folders[children["exit"]] / "summary.json").read_text())["leaks"]
    assert 55551 <= leaks["bytes"] < 55551 + 8192, leaks


def test_a_script_that_only_imports_torch_leaks_nothing(cli, tmp_path):
    # What the imports left live at exit (the module objects, torch's
    # operator registrations) is one-time set-up: summary.json and --merge
    # said `import torch` alone leaked 9.5 MiB. The built-in list takes the
    # imports' heap out, as it takes the import system's frames when the
    # blocks are recorded one by one, and the report says what it took.
    import json
    (tmp_path / "prog.py").write_text("import torch\n")
    args = ["--device=cpu", "--call-stack=c", "--analysis=leaks"]
    p = cli(args + ["--output=out", "--", PY, "prog.py"], tmp_path, env={"PYTHONPATH": ""}, check_rc=0)
    (folder,) = process_dirs(tmp_path / "out")
    leaks = json.loads((folder / "summary.json").read_text())["leaks"]
    assert leaks["bytes"] < 4096, (leaks, p.stdout)
    assert "allocated at: while importing Python modules" not in p.stdout
    m = re.search(r"^  \d+ allocation site\(s\) suppressed on device cpu \((\d+) block\(s\), (\d+) bytes\): \d+ by the "
                  r"built-in list of one-time set-up \(the interpreter, the imports' heap, the loader, libc's locale "
                  r"tables; --default-suppressions=false shows them\)", p.stdout, re.M)
    assert m and int(m.group(2)) > 5 << 20, p.stdout
    # without the list: the imports' heap is the largest site, and counted
    p = cli(args + ["--default-suppressions=false", "--output=out2", "--", PY, "prog.py"], tmp_path,
            env={"PYTHONPATH": ""}, check_rc=0)
    (folder,) = process_dirs(tmp_path / "out2")
    leaks = json.loads((folder / "summary.json").read_text())["leaks"]
    site = re.search(r"^    (\d+) block\(s\), (\d+) bytes, allocated at: while importing Python modules \(no stack: "
                     r"host_heap.python_imports=fold; =record keeps the stacks\)$", p.stdout, re.M)
    assert site and int(site.group(2)) > 5 << 20 and leaks["bytes"] >= int(site.group(2)), (leaks, p.stdout)


def test_a_deferred_start_writes_the_imports_heap_as_one_block(cli, tmp_path):
    # --collect-mode=deferred: `import torch` runs with collection off, and
    # each host block it left live was its own shadow MALLOC at start() (and
    # its own shadow FREE at the end): ~327 k rows each, a 93 MB CSV for this
    # script of 4 steps. They join the imports' heap while collection is off
    # too, so start() writes the one block a run collecting from its first
    # line writes, and the pool's figures stay the same.
    import json
    (tmp_path / "prog.py").write_text(textwrap.dedent("""\
        import torch
        import msmemscope
        msmemscope.start()
        x = torch.ones(1000)
        for i in range(4):
            y = x * 2
            msmemscope.step()
        msmemscope.stop()
    """))
    p = cli(["--device=cpu", "--collect-mode=deferred", "--output=out", "--", PY, "prog.py"], tmp_path,
            env={"PYTHONPATH": ""}, check_rc=0)
    (folder,) = process_dirs(tmp_path / "out")
    rows = read_rows(folder)
    heap = [r for r in rows if r["Event"] == "MALLOC" and r["attr"].get("import") == "true"]
    assert len(heap) == 1 and heap[0]["attr"]["shadow"] == "true", heap
    blocks, size = int(heap[0]["attr"]["blocks"]), int(heap[0]["attr"]["size"])
    assert blocks > 100_000 and size > 20 << 20, heap
    shadows = [r for r in rows if r["attr"].get("shadow") == "true"]
    assert len(shadows) < 10_000, len(shadows)
    m = re.search(r"^  cpu/HOST: Python imports left up to (\d+) block\(s\), [0-9.]+ MiB, live: written as one block, "
                  r"the imports' heap \(1 MALLOC row\(s\) as it changed, Attr shadow:true,import:true,blocks\), no row "
                  r"of their own \(host_heap.python_imports=fold\)$", p.stdout, re.M)
    assert m and int(m.group(1)) == blocks, p.stdout
    # the pool's peak counts the imports' heap, as before
    peak = json.loads((folder / "summary.json").read_text())["pools"]["cpu/HOST"]["peak_bytes"]
    assert peak >= size, (peak, size)
