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
import re

import pytest

from conftest import dump_files, process_dirs, read_dump

PY = "/usr/bin/python3"
KEPT = 54321  # odd: no other block of the run has this size

PROG = f"""\
import ctypes
libc = ctypes.CDLL(None)
libc.malloc.restype = ctypes.c_void_p
kept = libc.malloc({KEPT})  # never freed: the program's one leak
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
    sites = leak_sites(p.stdout)
    total = sum(n for _, n, _ in sites)
    # The program's block, and at most a few small blocks of its ctypes
    # calls; before, 745 KB more "at an unknown site".
    assert KEPT <= total < KEPT + 16384, p.stdout
    leaks = json.loads((folder / "summary.json").read_text())["leaks"]
    assert KEPT <= leaks["bytes"] < KEPT + 16384, leaks
    assert re.search(r"^  \d+ allocation site\(s\) suppressed on device cpu \(\d+ block\(s\), \d+ bytes\): \d+ by the "
                     r"built-in list of one-time set-up", p.stdout, re.M), p.stdout
    # The start-up window closed when the boot joined the session: rows
    # carry a C stack (none was asked for) only before it, and the
    # program's own block has none.
    rows, kept = kept_row(folder)
    assert kept["Call Stack(C)"] == "", kept
    with_c = [int(r["ID"]) for r in rows if r["Call Stack(C)"]]
    assert 100 < len(with_c) < 16384 and max(with_c) < int(kept["ID"]), (len(with_c), kept["ID"])

    # Nothing was lost: without the built-in list the start-up's blocks
    # come back, named after the interpreter.
    p, _ = run(cli, tmp_path, "out2", ["--default-suppressions=false"], [PY, "prog.py"])
    sites = leak_sites(p.stdout)
    interpreter = sum(n for _, n, site in sites if re.search(r" in /usr/bin/python3\.\d+$", site))
    assert interpreter > 256 << 10, p.stdout
    assert not [s for s in sites if "an unknown site" in s[2] and s[1] >= KEPT + 16384], p.stdout


def test_with_python_stacks_the_one_leak_is_the_programs_line(cli, tmp_path):
    (tmp_path / "prog.py").write_text(PROG)
    p, _ = run(cli, tmp_path, "out", ["--call-stack=python"], [PY, "prog.py"])
    sites = leak_sites(p.stdout)
    assert len(sites) == 1 and sites[0][:2] == (1, KEPT) and sites[0][2].endswith("prog.py(4): <module>"), p.stdout


def test_an_interpreter_that_ignores_the_boot_still_knows_its_start_up(cli, tmp_path):
    # -I ignores PYTHONPATH: no Python-side boot ends the window, which
    # stops by itself after 16384 blocks; the program's block, allocated
    # inside it, is reported with its C stack.
    (tmp_path / "prog.py").write_text(PROG)
    p, folder = run(cli, tmp_path, "out", [], [PY, "-I", "prog.py"])
    sites = leak_sites(p.stdout)
    assert len(sites) == 1 and sites[0][:2] == (1, KEPT), p.stdout
    _, kept = kept_row(folder)
    assert kept["Call Stack(C)"], kept


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
