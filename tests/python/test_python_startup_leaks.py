"""A CPython process's own start-up is not a leak of the program's
(framework/agent/agent.cpp, the start-up window; msms_agent_python_started in
sdk/include/msmemscope/agent.h).

What the interpreter keeps from its start-up until exit (~750 KB: its types,
interned strings, the site module's state) is allocated before msmemscope's
Python boot runs, so it had no Python stack. Without C stacks (the default,
and --call-stack=python) every Python process of a run reported it as
"386 block(s), 759194 bytes, allocated at: an unknown site". From the agent's
start until the boot joins the session, a CPython process's host blocks now
get a short C stack, so the leak analysis's built-in list knows them by their
site (the interpreter, libc's locale tables, the loader); a program that embeds
Python keeps its own blocks from before Py_Initialize, with their site."""
import json
import os
import subprocess
import textwrap
import re

import pytest

from conftest import dump_files, process_dirs, read_dump

PY = "/usr/bin/python3"
KEPT = 54321  # odd: no other block of the run has this size
# A Python process's block without a stack: its line would name it
# (--call-stack=python), or its C caller. (Where the package could not load,
# the C caller alone: test_a_boot_that_cannot_load_the_package_...)
UNKNOWN_PY = "an unknown site (collect stacks with --call-stack=python or c)"

PROG = f"""\
import ctypes
libc = ctypes.CDLL(None)
libc.malloc.restype = ctypes.c_void_p
kept = libc.malloc({KEPT})  # never freed: the program's one leak
print("kept")
"""

PYOBJ = 100003  # a bytearray's block: 100004 bytes
# Two leaks: a C block, and a Python object whose reference a C extension
# never dropped (its block's C site is the interpreter's, whatever line made it).
PROG_TWO = f"""\
import ctypes
libc = ctypes.CDLL(None)
libc.malloc.restype = ctypes.c_void_p
kept = libc.malloc({KEPT})
b = bytearray({PYOBJ})
ctypes.pythonapi.Py_IncRef(ctypes.py_object(b))
del b
print("kept")
"""


def leak_sites(stdout):
    """The console's leak section for cpu/HOST: [(blocks, bytes, site)]."""
    m = re.search(r"^  Host memory still allocated at exit on device cpu: .*\n((?:    \d+ block\(s\).*\n)*)", stdout,
                  re.M)
    if not m:
        return []
    return [(int(b), int(n), site) for b, n, site in
            re.findall(r"^    (\d+) block\(s\), (\d+) bytes, allocated at: (.*)$", m.group(1), re.M)]


def run(cli, tmp_path, out, args, program):
    p = cli(["--device=cpu", "--analysis=leaks", f"--output={out}"] + args + ["--"] + program, tmp_path,
            env={"PYTHONPATH": ""}, check_rc=0)
    (folder,) = process_dirs(tmp_path / out)
    return p, folder


def kept_row(folder):
    rows = read_dump(dump_files(folder)[0])
    (row,) = [r for r in rows if r["Event"] == "MALLOC" and r["attr"].get("size") == str(KEPT)]
    return rows, row


def test_without_stacks_the_interpreters_start_up_is_not_reported(cli, tmp_path):
    (tmp_path / "prog.py").write_text(PROG)
    p, folder = run(cli, tmp_path, "out", [], [PY, "prog.py"])
    # The program's block alone; before, 745 KB more "at an unknown site"
    # (and 12664 bytes of the package's thread-locals).
    assert leak_sites(p.stdout) == [(1, KEPT, UNKNOWN_PY)], p.stdout
    leaks = json.loads((folder / "summary.json").read_text())["leaks"]
    assert leaks["bytes"] == KEPT, leaks
    assert re.search(r"^  \d+ allocation site\(s\) suppressed on device cpu \(\d+ block\(s\), \d+ bytes\): \d+ by the "
                     r"built-in list of one-time set-up", p.stdout, re.M), p.stdout
    # The start-up window closed when the boot joined the session: rows
    # carry a C stack (none was asked for) only before it, and the
    # program's own block has none.
    rows, kept = kept_row(folder)
    assert kept["Call Stack(C)"] == "", kept
    # (blocks the dynamic loader allocates get one all along: test_leaks_loader_blocks.py)
    loader = "\n[the dynamic loader's block (thread-local storage, dlopen): a C stack taken without --call-stack=c]"
    with_c = [r for r in rows if r["Call Stack(C)"] and not r["Call Stack(C)"].endswith(loader)]
    assert 100 < len(with_c) < 16384 and max(int(r["ID"]) for r in with_c) < int(kept["ID"]), len(with_c)
    # each says what it is, in every view that shows it
    assert all(r["Call Stack(C)"].endswith("\n[CPython's start-up: a C stack taken without --call-stack=c]")
               for r in with_c), with_c[0]

    # Nothing was lost: without the built-in list the start-up's blocks
    # come back, named after the interpreter.
    p, _ = run(cli, tmp_path, "out2", ["--default-suppressions=false"], [PY, "prog.py"])
    sites = leak_sites(p.stdout)
    interpreter = sum(n for _, n, site in sites if re.search(r" in /usr/bin/python3\.\d+$", site))
    assert interpreter > 256 << 10, p.stdout
    assert not [s for s in sites if "an unknown site" in s[2] and s[1] >= KEPT + 16384], p.stdout


@pytest.mark.parametrize("how", ["file", "-c", "-m"])
def test_a_program_that_ends_by_sys_exit_leaks_nothing_of_cpythons(cli, tmp_path, how):
    # sys.exit() ends through Py_Exit, which skips the release of what
    # Py_RunMain copied before the program's first line (its path
    # settings, ~800 bytes in 6 blocks): start-up, not the program's.
    (tmp_path / "mod.py").write_text(PROG + "import sys\nsys.exit(0)\n")
    program = {"file": [PY, "mod.py"], "-c": [PY, "-c", (tmp_path / "mod.py").read_text()],
               "-m": [PY, "-m", "mod"]}[how]
    for args in ([], ["--call-stack=python"]):
        p, _ = run(cli, tmp_path, "out%d" % len(args), args, program)
        assert "kept" in p.stdout
        assert [(b, n) for b, n, _ in leak_sites(p.stdout)] == [(1, KEPT)], (args, p.stdout)


def test_a_shallow_c_stack_still_knows_the_start_up(cli, tmp_path):
    # With --call-stack=c:1 the start-up blocks' sites were strdup and
    # operator new (setlocale's tables, pybind11's internals), which neither
    # built-in list names: 6 blocks of the start-up were the program's leaks.
    # Start-up blocks get 8 frames whatever fewer were asked for.
    (tmp_path / "prog.py").write_text(PROG)
    for depth in ("c:1", "c:1,python"):
        p, _ = run(cli, tmp_path, "out_" + depth.replace(",", "_").replace(":", ""), [f"--call-stack={depth}"],
                   [PY, "prog.py"])
        assert [(b, n) for b, n, _ in leak_sites(p.stdout)] == [(1, KEPT)], (depth, p.stdout)


def test_with_python_stacks_the_one_leak_is_the_programs_line(cli, tmp_path):
    (tmp_path / "prog.py").write_text(PROG)
    p, _ = run(cli, tmp_path, "out", ["--call-stack=python"], [PY, "prog.py"])
    sites = leak_sites(p.stdout)
    assert len(sites) == 1 and sites[0][:2] == (1, KEPT) and sites[0][2].endswith("prog.py(4): <module>"), p.stdout


@pytest.mark.parametrize("flag", ["-I", "-E", "-S"])
def test_an_interpreter_that_skips_the_site_hook_is_booted_by_the_agent(cli, tmp_path, flag):
    # -I and -E ignore PYTHONPATH, -S imports no site: the CLI's
    # sitecustomize is never imported. They printed a warning and ran
    # without the Python side (no Python stacks, no PyTorch collectors; the
    # interpreter's start-up and every import's heap at an unknown site).
    # The agent now runs the boot itself, from an audit hook, before the
    # program's first line (framework/agent/python_boot.cpp): the report is
    # the program's two leaks, at their lines with Python stacks, as without
    # the flag; the program's sys.path is its own.
    (tmp_path / "prog.py").write_text(PROG_TWO + "import sys\nprint('path', sys.path)\n")
    plain = subprocess.run([PY, flag, "prog.py"], cwd=tmp_path, capture_output=True, text=True, check=True,
                           env=dict(os.environ, PYTHONPATH=""))
    (own_path,) = [line for line in plain.stdout.splitlines() if line.startswith("path ")]
    for args in ([], ["--call-stack=python"]):
        p, folder = run(cli, tmp_path, "out%d" % len(args), args, [PY, flag, "prog.py"])
        assert "kept" in p.stdout and own_path in p.stdout.splitlines(), p.stdout
        assert re.search(rf"^msmemscope: pid (\d+) \({PY} {flag} prog.py\) exited with code 0$", p.stdout, re.M)
        assert "never imports msmemscope's sitecustomize" not in p.stderr, p.stderr
        if args:
            assert sorted((b, n, s.rpartition("/")[2]) for b, n, s in leak_sites(p.stdout)) == [
                (1, KEPT, "prog.py(4): <module>"), (1, PYOBJ + 1, "prog.py(5): <module>")], p.stdout
        else:
            assert leak_sites(p.stdout) == [(2, KEPT + PYOBJ + 1, UNKNOWN_PY)], p.stdout
        assert json.loads((folder / "summary.json").read_text())["leaks"]["bytes"] == KEPT + PYOBJ + 1


@pytest.mark.parametrize("how", [["-I", "-X", "dev"], ["-IXdev"], ["-S"]])
def test_with_the_debug_allocators_the_skipped_boot_is_said_and_hides_nothing(cli, tmp_path, how):
    # The agent's audit hook is allocated before the interpreter sets up its
    # allocators; with the debug ones (-X dev, PYTHONDEVMODE) its exit frees
    # it with them and aborts (_PyMem_DebugRawFree: bad ID). Then the
    # process runs without the Python side, says so, and nothing of the
    # program's is taken for the interpreter's start-up.
    (tmp_path / "prog.py").write_text(PROG_TWO)
    env = {"PYTHONPATH": "", "PYTHONDEVMODE": "1"} if how == ["-S"] else {"PYTHONPATH": ""}
    p = cli(["--device=cpu", "--analysis=leaks", "--output=out", "--", PY] + how + ["prog.py"], tmp_path, env=env,
            check_rc=0)
    (folder,) = process_dirs(tmp_path / "out")
    assert "kept" in p.stdout
    flag = how[0][:2]
    why = "imports no site module" if flag == "-S" else "ignores PYTHONPATH"
    (pid,) = re.findall(rf"^msmemscope: pid (\d+) \({PY} {' '.join(how)} prog.py\) exited with code 0$", p.stdout,
                        re.M)
    assert (f"msmemscope: warning: pid {pid}: Python run with {flag} {why}, so it never imports msmemscope's "
            "sitecustomize, and with the interpreter's debug allocators (-X dev, PYTHONDEVMODE, PYTHONMALLOC=debug, "
            "a debug build) msmemscope cannot run it itself: no Python-side collection (no Python stacks, no "
            "PyTorch tensors or operators); its host memory is recorded\n") in p.stderr, p.stderr
    leaks = json.loads((folder / "summary.json").read_text())["leaks"]
    assert leaks["bytes"] >= KEPT + PYOBJ + 1, (leaks, p.stdout)
    rows, _ = kept_row(folder)
    # (the dynamic loader's blocks have theirs: test_leaks_loader_blocks.py)
    loader = "\n[the dynamic loader's block (thread-local storage, dlopen): a C stack taken without --call-stack=c]"
    assert not [r for r in rows if r["Call Stack(C)"] and not r["Call Stack(C)"].endswith(loader)], \
        "start-up stacks taken"


@pytest.mark.parametrize("optimize", [[], ["-O"]])
def test_a_start_up_that_compiles_the_standard_library_is_still_the_start_ups(cli, tmp_path, optimize):
    # `python3 -O` reads the standard library's .opt-1.pyc, which Debian does
    # not ship (nor a pycache_prefix that is empty, nor an image whose .pyc
    # were deleted): the start-up compiles site, os, encodings ... from
    # source, about 20000 blocks before the boot. The window stopped after
    # 16384, and what the start-up keeps after that (9 blocks, 77192 bytes)
    # was a leak "at an unknown site" of every such run.
    (tmp_path / "prog.py").write_text(PROG)
    (tmp_path / "nopyc").mkdir()
    program = [PY] + optimize + ["-B", "-X", f"pycache_prefix={tmp_path / 'nopyc'}", "prog.py"]
    for args in ([], ["--call-stack=python"]):
        p, folder = run(cli, tmp_path, "out%d%d" % (len(optimize), len(args)), args, program)
        assert "kept" in p.stdout
        site = "prog.py(4): <module>" if args else UNKNOWN_PY
        assert [(b, n, s.rpartition("/")[2]) for b, n, s in leak_sites(p.stdout)] == [(1, KEPT, site)], \
            (optimize, args, p.stdout)
        assert json.loads((folder / "summary.json").read_text())["leaks"]["bytes"] == KEPT, (optimize, args)
        # the window was longer than the bound that used to end it
        rows, _ = kept_row(folder)
        assert len([r for r in rows if r["Call Stack(C)"].endswith("[CPython's start-up: a C stack taken without "
                                                                    "--call-stack=c]")]) > 16384, (optimize, args)


def other_python():
    """A CPython of another minor version than the one the package's extension
    was built for (PY), so that the boot cannot load it; None if there is none."""
    import glob
    import shutil
    import sys
    mine = "python%d.%d" % sys.version_info[:2]
    found = [shutil.which("python3.%d" % minor) for minor in range(8, 15)]
    found += sorted(glob.glob(os.path.expanduser("~/.pyenv/versions/3.*/bin/python3.*")))
    for exe in found:
        if exe and re.search(r"python3\.\d+$", exe) and not exe.endswith(mine) and os.access(exe, os.X_OK):
            with open(exe, "rb") as f:
                if f.read(4) == b"\x7fELF":  # the interpreter, not a launcher script (pyenv's shims)
                    return exe
    return None


def test_a_boot_that_cannot_load_the_package_leaves_the_program_its_own(cli, tmp_path):
    # A Python other than the build's (a pyenv or conda one) cannot load the
    # extension: the boot gives up with a warning. The start-up window went on
    # giving the program's blocks a C stack (the KEPT block's site was libffi
    # with no stacks asked), and the PYTHONPATH the boot gave back to the
    # program was set with the hooks on: 36 bytes of libc's setenv (its
    # string, its tsearch node) were leaks of the program's.
    exe = other_python()
    if exe is None:
        pytest.skip("no CPython of another version than %s here" % PY)
    (tmp_path / "prog.py").write_text(PROG)
    p, folder = run(cli, tmp_path, "out", [], [exe, "prog.py"])
    assert "kept" in p.stdout
    assert "msmemscope: warning: cannot load the msmemscope package (" in p.stderr, p.stderr
    assert leak_sites(p.stdout) == [(1, KEPT, "an unknown site (collect stacks with --call-stack=c)")], p.stdout
    _, kept = kept_row(folder)
    assert kept["Call Stack(C)"] == "", kept


def test_with_c_and_python_stacks_a_python_objects_leak_is_its_line(cli, tmp_path):
    # Its C site is the interpreter's (as for every Python object): the
    # built-in list took it for the interpreter's own, and the report
    # grouped a ctypes leak under libffi. The Python line that ran is the site.
    (tmp_path / "prog.py").write_text(PROG_TWO)
    p, folder = run(cli, tmp_path, "out", ["--call-stack=c,python", "--format=db"], [PY, "prog.py"])
    sites = sorted(leak_sites(p.stdout))
    assert [(b, n, s.rpartition("/")[2]) for b, n, s in sites] == [
        (1, KEPT, "prog.py(4): <module>"), (1, PYOBJ + 1, "prog.py(5): <module>")], p.stdout
    # The db's finding says the same; its one stack is the C frames above
    # the interpreter, then the Python ones (never the interpreter's frames
    # down to _start before the Python frames that ran them).
    import sqlite3
    (db,) = list((folder / "device_cpu" / "dump").glob("*.db"))
    found = {f["size"]: f for f in (json.loads(row[-1]) for row in sqlite3.connect(db).execute(
        "SELECT * FROM msms_leaks"))}
    ffi = found[KEPT]["stack"].splitlines()
    assert found[KEPT]["site"].endswith("prog.py(4): <module>") and "libffi" in ffi[0], found[KEPT]
    assert ffi[-1].endswith("prog.py(4): <module>") and not [f for f in ffi if " in /usr/bin/python3" in f or "_start" in f], ffi
    assert found[PYOBJ + 1]["stack"].endswith("prog.py(5): <module>") and "\n" not in found[PYOBJ + 1]["stack"], \
        found[PYOBJ + 1]


def test_a_leak_without_a_stack_reads_the_same_in_the_db(cli, tmp_path):
    (tmp_path / "prog.py").write_text(PROG)
    p, folder = run(cli, tmp_path, "out", ["--format=db"], [PY, "prog.py"])
    import sqlite3
    (db,) = list((folder / "device_cpu" / "dump").glob("*.db"))
    (row,) = sqlite3.connect(db).execute("SELECT * FROM msms_leaks").fetchall()
    f = json.loads(row[-1])
    assert (f["size"], f["site"]) == (KEPT, UNKNOWN_PY), f


def test_the_programs_own_sitecustomize_is_the_programs(cli, tmp_path):
    # The CLI's sitecustomize runs the program's own one next, outside the
    # boot: what it keeps is reported, with or without stacks (it ran inside
    # the boot's frames, whose memory is msmemscope's, and inside the
    # start-up window, whose Python objects are the interpreter's).
    own = tmp_path / "own"
    own.mkdir()
    (own / "sitecustomize.py").write_text(PROG_TWO.replace('print("kept")', 'print("own sitecustomize")'))
    (tmp_path / "prog.py").write_text('print("program")\n')
    for args in ([], ["--call-stack=python"], ["--call-stack=c,python"]):
        out = "out%d" % len(args and args[0])
        p = cli(["--device=cpu", "--analysis=leaks", f"--output={out}"] + args + ["--", PY, "prog.py"], tmp_path,
                env={"PYTHONPATH": str(own)}, check_rc=0)
        assert "own sitecustomize\nprogram\n" in p.stdout, p.stdout
        assert sum(n for _, n, _ in leak_sites(p.stdout)) == KEPT + PYOBJ + 1, (args, p.stdout)


def test_a_program_embedding_python_keeps_its_own_leak_from_before_py_initialize(cli, tmp_path, test_bin):
    prog = test_bin / "python_embed"
    if not prog.exists():
        pytest.skip("python_embed was not built (no libpython: tests/programs/python_embed/CMakeLists.txt)")
    p, _ = run(cli, tmp_path, "out", [], [prog])
    assert "embedded 3" in p.stdout
    sites = leak_sites(p.stdout)
    assert len(sites) == 1, p.stdout
    blocks, size, site = sites[0]
    # a start-up stack no one asked for: functions, no source lines
    assert (blocks, size) == (1, 43210) and site.startswith("kept_before_the_interpreter+0x"), p.stdout
    assert site.endswith(" in " + str(prog)), p.stdout


def test_a_torch_training_loop_reports_its_one_leak_and_not_the_start_up(cli, tmp_path):
    # A real PyTorch loop (SGD, 20 steps) that leaks one odd-sized block at
    # step 10: with no stacks, Python stacks, or both, the report holds that
    # block at its line and only torch's own first-use blocks beside it
    # (~900 bytes: kaiming_uniform_'s, autograd's), never the interpreter's
    # start-up (~745 KB before) or msmemscope's own; summary.json agrees.
    leak = 77771
    (tmp_path / "train.py").write_text(textwrap.dedent(f"""\
        import ctypes
        import torch
        libc = ctypes.CDLL(None)
        libc.malloc.restype = ctypes.c_void_p
        torch.manual_seed(0)
        model = torch.nn.Linear(16, 4)
        opt = torch.optim.SGD(model.parameters(), lr=0.01)
        x, y = torch.randn(8, 16), torch.randn(8, 4)
        for step in range(20):
            opt.zero_grad()
            loss = ((model(x) - y) ** 2).mean()
            loss.backward()
            opt.step()
            if step == 10:
                libc.malloc({leak})
        print("trained", round(loss.item(), 3))
        """))
    for args in ([], ["--call-stack=python"], ["--call-stack=c,python"]):
        p, folder = run(cli, tmp_path, "out%d" % len("".join(args)), args, [PY, "train.py"])
        assert "trained" in p.stdout
        sites = leak_sites(p.stdout)
        total = sum(n for _, n, _ in sites)
        assert leak <= total < leak + 4096, (args, p.stdout)
        if args:
            assert (1, leak) in [(b, n) for b, n, s in sites if s.endswith("train.py(15): <module>")], (args, p.stdout)
        assert json.loads((folder / "summary.json").read_text())["leaks"]["bytes"] == total, args


def test_the_hint_of_a_site_without_a_stack_is_the_same_live_and_in_analyze(cli, tmp_path):
    # Blocks no Python frame made (the main module's parser arenas, live at
    # stop()) have no site in a run with Python stacks: C stacks would name
    # them. --analyze of that run's dump has no --call-stack of its own; the
    # dump's Python stacks say the run took them, so it names the same
    # option (it said "--call-stack=python or c").
    (tmp_path / "prog.py").write_text(textwrap.dedent(f"""\
        import msmemscope
        msmemscope.start()
        keep = bytearray({KEPT})
        msmemscope.stop()
        """))
    p, folder = run(cli, tmp_path, "out", ["--call-stack=python"], [PY, "prog.py"])

    def host_sites(stdout):
        m = re.search(r"^  Host memory still allocated at stop\(\) on device cpu: .*\n((?:    \d+ block\(s\).*\n)*)",
                      stdout, re.M)
        assert m, stdout
        return re.findall(r"allocated at: (.*)$", m.group(1), re.M)

    live = host_sites(p.stdout)
    assert "an unknown site (collect stacks with --call-stack=c)" in live, p.stdout
    assert [s for s in live if s.endswith("prog.py(3): <module>")], p.stdout
    offline = cli(["--analyze=leaks", f"--input-path={dump_files(folder)[0]}"], tmp_path, check_rc=0)
    assert host_sites(offline.stdout) == live, (p.stdout, offline.stdout)
