"""Blocks the dynamic loader allocates for a thread (its static TLS and DTV
at pthread_create, a library's thread-local block at the thread's first use
of it through __tls_get_addr) are kept by ld.so: glibc caches a finished
thread's stack with its TLS. With only Python stacks (or none) such a block
had no C stack to say whose it is, so it read as a leak of the program's line
that ran torch in the thread (9,777 bytes of libtorch's TLS at the thread
function's line) and of threading.py's start() (912 bytes). The hook now
sees its caller is ld.so and takes a short C stack whatever --call-stack
asks for; the leak analysis's built-in list knows the loader."""
import re

import pytest

from conftest import dump_files, process_dirs, read_dump, run_cli

pytest.importorskip("torch")
PY = "/usr/bin/python3"

PROG = '''import threading

import torch


def op():
    t = torch.zeros(10)  # a transient tensor: libtorch's TLS is made here
    del t


for i in range(8):
    th = threading.Thread(target=op)
    th.start()
    th.join()
'''

LABEL = "[the dynamic loader's block (thread-local storage, dlopen): a C stack taken without --call-stack=c]"


def sites(stdout):
    return re.findall(r"^\s+\d+ block\(s\), \d+ bytes(?: \([^)]*\))?, allocated at: (.*)$", stdout, re.M)


@pytest.mark.parametrize("stack", ["python", "none"])
def test_thread_tls_is_not_the_programs_leak(tmp_path, stack):
    prog = tmp_path / "threads.py"
    prog.write_text(PROG)
    args = ["--device=cpu", "--analysis=leaks", f"--output={tmp_path}/out"]
    if stack != "none":
        args.append(f"--call-stack={stack}")
    p = run_cli(args + ["--", PY, prog], tmp_path, check_rc=0)
    found = sites(p.stdout)
    assert not [s for s in found if "threads.py" in s or "threading.py" in s], p.stdout
    if stack == "none":
        # what is left: torch's 8 bytes allocated by its exit handler, no stack
        assert re.search(r"still allocated at exit on device cpu: [01] block\(s\), (8|0) bytes", p.stdout) \
            or "no leak" in p.stdout, p.stdout
    else:
        # nothing: those 8 bytes (c10's PyInterpreter::disarm) are torch's set-up, known by their
        # allocator's caller (test_leaks_torch_setup.py)
        assert "still allocated at exit on device cpu" not in p.stdout, p.stdout
    rows = read_dump(dump_files(process_dirs(tmp_path / "out")[0])[0])
    tls = [r for r in rows if r["Event"] == "MALLOC" and "__tls_get_addr" in r["Call Stack(C)"]]
    assert tls, "no row of libtorch's thread-local block"
    for r in tls:
        assert r["Call Stack(C)"].split("\n")[-1] == LABEL, r["Call Stack(C)"]
        assert "ld-linux" in r["Call Stack(C)"].split("\n")[0]
    if stack == "python":  # the Python stack stays as asked: the threads' blocks name op()
        threads = [r for r in tls if r["Thread Id"] != r["Process Id"]]
        assert len(threads) >= 8
        for r in threads:
            assert r["Call Stack(Python)"].startswith(f"{prog}(7): op"), r["Call Stack(Python)"]


def test_c_stacks_asked_keep_their_source_lines(tmp_path):
    prog = tmp_path / "threads.py"
    prog.write_text(PROG)
    run_cli(["--device=cpu", "--analysis=leaks", "--call-stack=c:4", f"--output={tmp_path}/out",
             "--", PY, prog], tmp_path, check_rc=0)
    rows = read_dump(dump_files(process_dirs(tmp_path / "out")[0])[0])
    tls = [r for r in rows if r["Event"] == "MALLOC" and "__tls_get_addr" in r["Call Stack(C)"]]
    assert tls
    for r in tls:
        frames = r["Call Stack(C)"].split("\n")
        # c:4 asked: 8 frames for the loader's block, an ordinary stack (source lines, no label)
        assert len(frames) > 4 and LABEL not in frames, frames
        assert " at " in frames[0], frames
