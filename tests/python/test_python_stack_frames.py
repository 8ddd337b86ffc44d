"""--call-stack=python: exact "file(line): func" frames where a reader of
frames can go wrong -- code objects made and freed at the same address over
and over (a cache keyed by the code's address, its file name's and line
table's would name the code before: they are all reallocated in turn),
another thread, a generator, a non-ASCII file name, a frame whose code dies
as it returns, code objects made by code.replace() (no malloc between two:
the reader's memo sees the same frame, code address and instruction), with
and without their infos (a thread while the main thread waits in join()
runs no pending call). Both readers: the interpreter's frame chain (bindings/src/
py_frames.cpp: the default on CPython 3.11, and while an installed module
is imported in shadow mode) and the profile function's shadow stacks
(MSMEMSCOPE_PY_STACKS=shadow, or trace records), which must give the same
text."""
import re
import textwrap

import pytest

from conftest import dump_files, process_dirs, pta_mallocs_of, read_dump, run_cli, run_with_user_site

PY = "/usr/bin/python3"
CALLS, LINES = 60, 40
BASE = 20000        # bytearray(BASE + k) on line k + 3 of each generated function
THREAD_SIZE, GEN_SIZE, MODULE_SIZE = 33333, 44444, 55555
# code objects made by code.replace() (no malloc between two of them: the frame reader's memo sees the
# same frame, code address and instruction), on the main thread and on a thread while the main thread
# waits in join() (no pending call runs then: their codes never get an info)
REPLACED_MAIN, REPLACED_THREAD = 81000, 91000
NEST_SIZES = (61111, 62222, 63333)  # one frame, three frames, one frame again: the stack changes depth between them
# one long-lived function allocating on LINES lines, called HOT_CALLS times: more instructions than a
# code's info caches ids for (py_code_info.h, kInstrIds), so its cache fills, then entries are replaced
HOT_BASE, HOT_CALLS = 70000, 3

PROGRAM = f"""
    import sys
    import threading
    import types

    import 模块

    G = {{}}
    SRC = "def f():\\n    del G['f']\\n" + "".join("    x%d = bytearray(%d)\\n" % (k, {BASE} + k) for k in range({LINES}))


    def make(i):
        ns = {{"G": G}}
        exec(compile(SRC, "dyn_%d.py" % i, "exec"), ns)
        G["f"] = ns.pop("f")


    for i in range({CALLS}):
        make(i)
        G["f"]()  # the frame holds the last references to f and its code: both die as it returns


    def worker():
        keep.append(bytearray({THREAD_SIZE}))  # THREAD LINE


    keep = []
    t = threading.Thread(target=worker)
    t.start()
    t.join()


    def replaced(base):
        ns = {{}}
        exec(compile("def g(n):\\n    for k in range(2):\\n        keep.append(bytearray(n))\\n", "g.py", "exec"), ns)
        code = ns["g"].__code__
        for i in range({CALLS}):
            f = types.FunctionType(code.replace(co_filename="rdyn_%d.py" % i), {{"keep": keep}})
            f(base + i)  # REPLACED LINE
            del f  # the code dies here; the next one is likely made at its address


    replaced({REPLACED_MAIN})  # REPLACED MAIN
    t = threading.Thread(target=replaced, args=({REPLACED_THREAD},))
    t.start()
    t.join()


    def gen():
        yield bytearray({GEN_SIZE})  # GEN LINE


    for b in gen():  # FOR LINE
        keep.append(b)
    keep.append(模块.alloc())  # MODULE CALL LINE


    def inner(n):
        return bytearray(n)  # INNER LINE


    def outer(n):
        keep.append(inner(n))  # OUTER LINE


    HOT = "def h():\\n" + "".join("    y%d = bytearray(%d)\\n" % (k, {HOT_BASE} + k) for k in range({LINES}))
    exec(compile(HOT, "hot.py", "exec"), G)
    for r in range({HOT_CALLS}):
        G["h"]()  # HOT CALL


    for r in range(3):
        keep.append(bytearray({NEST_SIZES[0]}))  # NEST A
        outer({NEST_SIZES[1]})  # NEST CALL
        keep.append(bytearray({NEST_SIZES[2]}))  # NEST B
    print("profile", type(sys.getprofile()).__name__, type(threading.getprofile()).__name__)
"""
MODULE = f"""
    def alloc():
        return bytearray({MODULE_SIZE})
"""


def line_of(text, marker):
    for i, line in enumerate(textwrap.dedent(text).splitlines(), 1):
        if marker in line:
            return i
    raise AssertionError(marker)


@pytest.mark.parametrize("stacks", ["frames", "shadow"])
def test_python_stacks_are_exact(tmp_path, stacks):
    prog = tmp_path / "prog.py"
    prog.write_text(textwrap.dedent(PROGRAM), encoding="utf-8")
    (tmp_path / "模块.py").write_text(textwrap.dedent(MODULE), encoding="utf-8")
    p = run_cli(["--device=cpu", "--events=alloc,free", "--call-stack=python", "--analysis=", "--output=out",
                 "--", PY, "prog.py"], tmp_path, env={"MSMEMSCOPE_PY_STACKS": stacks}, timeout=300)
    assert p.returncode == 0, p.stdout + p.stderr
    # frames (the default): no profile function anywhere, not even the hook for threads started later
    want = {"frames": "profile NoneType NoneType", "shadow": "profile _ProfileState function"}[stacks]
    assert want in p.stdout, p.stdout
    (procdir,) = process_dirs(tmp_path / "out")
    rows = [r for r in read_dump(dump_files(procdir)[0]) if r["Event Type"] == "HOST"]
    for r in rows:
        for frame in r["Call Stack(Python)"].splitlines():
            assert re.fullmatch(r".+\(\d+\): \S+", frame), (frame, r)

    def mallocs(size):
        return [r for r in rows if r["Event"] == "MALLOC" and r["attr"].get("size") == str(size + 1)]

    def stack(r):
        return r["Call Stack(Python)"].splitlines()

    call_line = line_of(PROGRAM, 'G["f"]()')
    # the i-th generated function's blocks name its own file (dyn_i.py), each on its own line, though
    # every code object is made and freed in turn (likely at the address of the one before)
    seen = {}
    for k in range(LINES):
        ms = mallocs(BASE + k)
        assert len(ms) == CALLS, (k, len(ms))
        for i, r in enumerate(ms):
            s = stack(r)
            assert s[0] == f"dyn_{i}.py({k + 3}): f" and s[1] == f"{prog}({call_line}): <module>" and len(s) == 2, s
            seen[(i, k)] = r["attr"]["allocation_id"]
    # their frees (the frame's locals cleared as it returns) name the calling line
    frees = {r["attr"]["allocation_id"]: r for r in rows if r["Event"] == "FREE"}
    for (i, k), aid in seen.items():
        assert stack(frees[aid])[-1] == f"{prog}({call_line}): <module>", stack(frees[aid])
    # another thread: its own frames, innermost first, down to threading's bootstrap
    (t,) = mallocs(THREAD_SIZE)
    s = stack(t)
    assert s[0] == f"{prog}({line_of(PROGRAM, 'THREAD LINE')}): worker", s
    assert s[-1].endswith("): _bootstrap") and "threading.py" in s[-1], s
    # code objects replaced in turn: each allocation names its own code's file, twice (the second on
    # the main thread read through the code's info once the pending call made it, the first without)
    rl = line_of(PROGRAM, "REPLACED LINE")
    for base, last in ((REPLACED_MAIN, f"{prog}({line_of(PROGRAM, 'REPLACED MAIN')}): <module>"), (REPLACED_THREAD, None)):
        for i in range(CALLS):
            ms = mallocs(base + i)
            assert len(ms) == 2, (base, i, len(ms))
            for r in ms:
                s = stack(r)
                assert s[:2] == [f"rdyn_{i}.py(3): g", f"{prog}({rl}): replaced"], (base, i, s)
                assert s[-1] == last if last else s[-1].endswith("): _bootstrap"), (base, i, s)
    # a generator's frame, then the loop that resumed it
    (g,) = mallocs(GEN_SIZE)
    assert stack(g) == [f"{prog}({line_of(PROGRAM, 'GEN LINE')}): gen", f"{prog}({line_of(PROGRAM, 'FOR LINE')}): <module>"]
    # a module whose file name is not ASCII: its UTF-8 text
    # the same program line's allocations around a call that allocates deeper: each its own stack
    for size, want in zip(NEST_SIZES, (
            [f"{prog}({line_of(PROGRAM, 'NEST A')}): <module>"],
            [f"{prog}({line_of(PROGRAM, 'INNER LINE')}): inner", f"{prog}({line_of(PROGRAM, 'OUTER LINE')}): outer",
             f"{prog}({line_of(PROGRAM, 'NEST CALL')}): <module>"],
            [f"{prog}({line_of(PROGRAM, 'NEST B')}): <module>"])):
        assert [stack(r) for r in mallocs(size)] == [want] * 3, (size, [stack(r) for r in mallocs(size)])
    (m,) = mallocs(MODULE_SIZE)
    assert stack(m) == [f"{tmp_path / '模块.py'}(3): alloc", f"{prog}({line_of(PROGRAM, 'MODULE CALL LINE')}): <module>"]
    # one code, many allocating lines, called again and again: every call names each line
    hot_call = f"{prog}({line_of(PROGRAM, 'HOT CALL')}): <module>"
    for k in range(LINES):
        assert [stack(r) for r in mallocs(HOT_BASE + k)] == [[f"hot.py({k + 2}): h", hot_call]] * HOT_CALLS, k


INSTALLED = f"""
    import torch

    G = {{}}
    SRC = "def f():\\n    del G['f']\\n" + "".join("    x%d = torch.empty(%d, dtype=torch.uint8)\\n" % (k, {BASE} + k)
                                                 for k in range({LINES}))
    KEEP = []


    def make(i):
        ns = {{"G": G, "torch": torch}}
        exec(compile(SRC, "dyn_%d.py" % i, "exec"), ns)
        G["f"] = ns.pop("f")


    for i in range({CALLS}):
        make(i)
        G["f"]()


    def gen():
        yield torch.empty({GEN_SIZE}, dtype=torch.uint8)


    for b in gen():
        KEEP.append(b)
"""
IMPORTER = """
    import torch
    import stack_probe
    print("done", len(stack_probe.KEEP))
"""


def pta_stacks(tmp_path, mode):
    work = tmp_path / mode
    args = ["--device=cpu", "--events=alloc,free", "--call-stack=python", "--analysis=", "--output=out"]
    p, procdir, site = run_with_user_site(work, {"stack_probe.py": INSTALLED}, IMPORTER, args, mode)
    assert "done 1" in p.stdout, p.stdout
    return [(r["attr"]["size"], r["Call Stack(Python)"].replace(str(work), "WORK")) for r in pta_mallocs_of(procdir)], site


def test_frames_read_while_an_installed_module_is_imported_are_exact(tmp_path):
    pytest.importorskip("torch")
    fold, site = pta_stacks(tmp_path, "fold")
    record, _ = pta_stacks(tmp_path, "record")
    # the import (fold: the profile function off, frames read from the interpreter) and the same
    # import recorded (record: no scope, the profile function's shadow stacks) give the same stacks
    assert fold == record
    by_size = {}
    for size, stack in fold:
        by_size.setdefault(int(size), []).append(stack.splitlines())
    probe = "WORK/userbase/lib/python3.11/site-packages/stack_probe.py"
    for k in range(LINES):
        stacks = by_size[BASE + k]
        assert len(stacks) == CALLS
        for i, s in enumerate(stacks):
            assert s[0] == f"dyn_{i}.py({k + 3}): f" and s[1].startswith(probe + "(") and s[-1] == "WORK/prog.py(3): <module>", s
    (g,) = by_size[GEN_SIZE]
    assert g[0] == f"{probe}({line_of(INSTALLED, 'yield')}): gen" and g[-1] == "WORK/prog.py(3): <module>", g
