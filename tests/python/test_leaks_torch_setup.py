"""torch's own one-time set-up is not a leak of the program's lines.

Every torch process keeps, until it exits, what torch sets up once: cpuinfo's
tables of the machine (at the first operator), c10's registry of device hooks
(at the first backward()), libgomp's state of a thread that ran a parallel
operator, and the interpreter tag c10 leaves when Python exits. With
--call-stack=python alone those blocks had only the Python line that was
running, so the leak report named the program's first operator's line (432
bytes), torch/autograd/__init__.py(197) (224 bytes), a thread's first
operator's line (216 bytes) and an unknown site (8 bytes) as leaks. The agent
now records, for a host block with a Python stack and no C one, the native
code that called the allocator (its return address, and operator new's
caller); the leak analysis's built-in list knows torch's set-up by that site,
as it does by the C site with --call-stack=c (which took none of them out
either, before). What the program itself keeps -- a libc malloc through
ctypes, a Python object it never released -- is still reported at its line,
with its bytes, and the dump's rows carry no C stack that was not asked for."""
import re

import pytest

from conftest import dump_files, process_dirs, read_dump, run_cli

pytest.importorskip("torch")
PY = "/usr/bin/python3"

KEPT = 4321  # a libc block the program never frees
PYOBJ = 100003  # a bytearray never released: a block of 100004 bytes
PROG = f"""\
import ctypes
import threading

import torch

w = torch.randn(64, 64, requires_grad=True)  # line 6: the first operator (cpuinfo)
loss = (w @ w).sum()
loss.backward()  # autograd's backward() (c10's CUDA hooks registry)
del loss


def work():
    a = torch.randn(512, 512)
    b = a @ a
    c = (b * 2).sum()  # line 15: the thread's first parallel operator (libgomp)
    del a, b, c


th = threading.Thread(target=work)
th.start()
th.join()
libc = ctypes.CDLL("libc.so.6")
libc.malloc.restype = ctypes.c_void_p
kept = libc.malloc({KEPT})  # line 24: the program's own leak
obj = bytearray({PYOBJ})  # line 25: a Python object whose reference is never dropped
ctypes.pythonapi.Py_IncRef(ctypes.py_object(obj))
"""

TORCH_LIST = ("by the built-in list of torch's one-time set-up (cpuinfo's tables, libgomp's threads, "
              "c10's hooks registries; --default-suppressions=false shows them)")


def host_sites(stdout):
    """The console's sites of host memory live at exit: [(blocks, bytes, site)]."""
    m = re.search(r"^  Host memory still allocated at exit on device cpu: .*\n((?:    .*\n)*)", stdout, re.M)
    assert m, stdout
    return [(int(b), int(n), s) for b, n, s in
            re.findall(r"^    (\d+) block\(s\), (\d+) bytes, allocated at: (.*)$", m.group(1), re.M)]


def run(tmp_path, stack, extra=()):
    prog = tmp_path / "prog.py"
    prog.write_text(PROG)
    p = run_cli(["--device=cpu", "--analysis=leaks", f"--call-stack={stack}", f"--output={tmp_path}/out", *extra,
                 "--", PY, prog], tmp_path, check_rc=0)
    return prog, p


@pytest.mark.parametrize("stack", ["python", "c,python"])
def test_torch_set_up_is_not_the_programs_leak(tmp_path, stack):
    prog, p = run(tmp_path, stack)
    sites = host_sites(p.stdout)
    # the program's own leaks, at their lines, with their bytes
    assert (1, KEPT, f"{prog}(24): <module>") in sites, p.stdout
    assert (1, PYOBJ + 1, f"{prog}(25): <module>") in sites, p.stdout
    # and nothing of torch's set-up: no other line of the program, no autograd
    # line, no unknown site, no torch frame
    assert sorted(sites) == sorted([(1, KEPT, f"{prog}(24): <module>"), (1, PYOBJ + 1, f"{prog}(25): <module>")]), \
        p.stdout
    line = next(l for l in p.stdout.splitlines() if "allocation site(s) suppressed on device cpu" in l)
    assert re.search(r", \d+ " + re.escape(TORCH_LIST) + "$", line), line


def test_python_stacks_alone_add_no_c_stack_to_the_rows(tmp_path):
    prog, _ = run(tmp_path, "python")
    rows = read_dump(dump_files(process_dirs(tmp_path / "out")[0])[0])
    host = [r for r in rows if r["Event Type"] == "HOST"]
    assert host
    # no C stack asked for: none written (the loader's and the start-up's
    # blocks keep theirs, with their notes)
    for r in host:
        c = r["Call Stack(C)"]
        assert c == "" or c.endswith(" C stack taken without --call-stack=c]"), r
    kept = [r for r in host if r["Event"] == "MALLOC" and r["attr"].get("size") == str(KEPT)]
    assert [r["Call Stack(Python)"].split("\n")[0] for r in kept] == [f"{prog}(24): <module>"]


def test_without_the_built_in_list_torch_set_up_reads_as_before(tmp_path):
    prog, p = run(tmp_path, "python", ["--default-suppressions=false", "--plugin-option=leaks.max_lines=1000"])
    sites = {s: (n, b) for n, b, s in host_sites(p.stdout)}
    assert f"{prog}(6): <module>" in sites, p.stdout
    assert "/usr/lib/python3/dist-packages/torch/autograd/__init__.py(197): backward" in sites, p.stdout
    assert sites[f"{prog}(24): <module>"] == (1, KEPT)
