"""The malloc family looked up in libc's own handle: ctypes.CDLL("libc.so.6")
(or CDLL(find_library("c"))), cffi's dlopen("c"), a program's dlsym on
dlopen("libc.so.6"). That lookup found libc's definitions, not the preloaded
hooks: such a malloc was in no view at all, and such a free of a recorded
block left it reported as a leak. The hook library's dlsym now gives the
hooks for those lookups, and passes dlsym(RTLD_NEXT, ...) on by a tail jump,
so that it stays relative to its real caller."""
import os
import re
import subprocess

from conftest import BUILD, dump_files, process_dirs, read_dump, run_cli

PY = "/usr/bin/python3"

PROG = '''import ctypes
import ctypes.util

libc = ctypes.CDLL("libc.so.6")
found = ctypes.CDLL(ctypes.util.find_library("c"))
me = ctypes.CDLL(None)
for lib in (libc, found, me):
    lib.malloc.restype = ctypes.c_void_p
    lib.free.argtypes = [ctypes.c_void_p]
kept = [libc.malloc(71111)]  # LIBC_LEAK
kept.append(found.malloc(72223))  # FOUND_LEAK
p = me.malloc(55553)
libc.free(p)  # freed through libc's handle: no leak
q = libc.malloc(33331)
me.free(q)  # allocated through libc's handle, freed through the preload: no leak
'''


def line_of(text, marker):
    return next(i for i, l in enumerate(text.splitlines(), 1) if l.rstrip().endswith(marker))


def exit_sites(stdout):
    """{bytes: site} of the console's "still allocated at exit" lines."""
    out = {}
    for m in re.finditer(r"^\s+1 block\(s\), (\d+) bytes, allocated at: (.*)$", stdout, re.M):
        out[int(m.group(1))] = m.group(2)
    return out


def test_ctypes_libc_handle_is_recorded(tmp_path):
    prog = tmp_path / "prog.py"
    prog.write_text(PROG)
    p = run_cli(["--device=cpu", "--analysis=leaks", "--call-stack=python", f"--output={tmp_path}/out",
                 "--", PY, prog], tmp_path, check_rc=0)
    sites = exit_sites(p.stdout)
    assert sites.get(71111) == f"{prog}({line_of(PROG, 'LIBC_LEAK')}): <module>", p.stdout
    assert sites.get(72223) == f"{prog}({line_of(PROG, 'FOUND_LEAK')}): <module>", p.stdout
    assert 55553 not in sites and 33331 not in sites, p.stdout
    rows = read_dump(dump_files(process_dirs(tmp_path / "out")[0])[0])
    events = {}
    for r in rows:
        size = int(r["attr"].get("size", "0") or 0)
        shadow = r["attr"].get("shadow") == "true"  # the rows closing what is live at the end
        if size in (71111, 72223, 55553, 33331) and r["Event"] in ("MALLOC", "FREE") and not shadow:
            events.setdefault(size, []).append(r["Event"])
    # every block in the dump: the kept ones freed by no row, the others freed
    assert events == {71111: ["MALLOC"], 72223: ["MALLOC"], 55553: ["MALLOC", "FREE"],
                      33331: ["MALLOC", "FREE"]}, events


def test_c_program_libc_handle_and_rtld_next(cli, test_bin, tmp_path):
    p = cli(["--device=cpu", "--analysis=leaks", "--call-stack=c", f"--output={tmp_path}/out",
             "--", test_bin / "cap_dlsym"], tmp_path, check_rc=0)
    assert "rtld_next: same" in p.stdout, p.stdout
    sites = exit_sites(p.stdout)
    assert sites.get(6161, "").startswith("main+0x"), p.stdout
    assert "/tests/programs/capture/cap_dlsym.c:25 in " in sites[6161]
    assert 6262 not in sites, p.stdout


API = '''import ctypes

import msmemscope

msmemscope.config(device="cpu", analysis="leaks", call_stack="python", output="out")
msmemscope.start()
libc = ctypes.CDLL("libc.so.6")  # looked up after start(): the hooks' GOT slots hold dlsym too
libc.malloc.restype = ctypes.c_void_p
libc.free.argtypes = [ctypes.c_void_p]
me = ctypes.CDLL(None)
me.malloc.restype = ctypes.c_void_p
kept = libc.malloc(71111)  # LIBC_LEAK
p = me.malloc(55553)
libc.free(p)
msmemscope.stop()
'''


def test_python_api_libc_handle_is_recorded(tmp_path):
    (tmp_path / "api.py").write_text(API)
    e = dict(os.environ, PYTHONPATH=str(BUILD / "python"))
    e.pop("LD_PRELOAD", None)
    e.pop("MSMEMSCOPE_SESSION", None)
    p = subprocess.run([PY, "api.py"], cwd=tmp_path, env=e, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    sites = exit_sites(p.stdout)
    assert sites.get(71111) == f"{tmp_path / 'api.py'}({line_of(API, 'LIBC_LEAK')}): <module>", p.stdout
    assert 55553 not in sites, p.stdout
