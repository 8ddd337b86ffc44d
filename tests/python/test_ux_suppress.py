"""Issue #19 item 7: --suppress=FILE (and YAML suppress:, Python
msmemscope.config(suppress=...)) with heaptrack-style patterns; the built-in
CPython list, said as "N allocation site(s) suppressed", and
--default-suppressions=false (config(default_suppressions=False)) to turn it off."""
import os
import re
import subprocess
import sys
import textwrap

import pytest

from conftest import BUILD, CLI, SOURCE, TEST_BIN, dump_files, process_dirs, read_dump

sys.path.insert(0, str(BUILD / "python"))
import msmemscope  # noqa: E402

DEMO = TEST_BIN / "demo_train"


def _run(args, cwd, env=None):
    e = dict(os.environ)
    e.pop("LD_PRELOAD", None)
    e.pop("PYTHONPATH", None)
    e.update(env or {})
    return subprocess.run([str(CLI)] + [str(a) for a in args], cwd=str(cwd), env=e, capture_output=True, text=True,
                          timeout=300)


def test_suppress_file_removes_sites_from_the_leak_report(tmp_path):
    p = _run(["--device=cpu", "--call-stack=c:16", "--output=o1", "--", DEMO], tmp_path)
    assert "from 2 allocation site(s)" in p.stdout, p.stdout
    supp = tmp_path / "my.supp"
    supp.write_text("# demo_train keeps one buffer per step on purpose\nleak:demo_train.c:24\n")
    p = _run(["--device=cpu", "--call-stack=c:16", f"--suppress={supp}", "--output=o2", "--", DEMO], tmp_path)
    assert p.returncode == 0, p.stderr
    assert "\n  Host memory still allocated at exit on device cpu: 1 block(s), 4096 bytes, from 1 allocation site(s):\n" in p.stdout
    assert f"\n  1 allocation site(s) suppressed on device cpu (8 block(s), 8028 bytes): 1 by {supp}\n" in p.stdout
    # YAML: the path is relative to the profile's folder.
    (tmp_path / "prof").mkdir()
    (tmp_path / "prof" / "p.supp").write_text("_IO_file_overflow\nleak:^main\n")
    (tmp_path / "prof" / "p.yaml").write_text("device: cpu\ncall_stack: c:16\nsuppress: p.supp\n")
    p = _run(["--config", tmp_path / "prof" / "p.yaml", "--output=o3", "--", DEMO], tmp_path)
    assert p.returncode == 0, p.stderr
    assert "Detected memory leaks" not in p.stdout
    assert (f"\n  2 allocation site(s) suppressed on device cpu (9 block(s), 12124 bytes): 2 by "
            f"{tmp_path}/prof/p.supp\n") in p.stdout


def test_suppress_errors(tmp_path):
    p = _run(["--device=cpu", "--suppress=missing.supp", "--", DEMO], tmp_path)
    assert p.returncode == 2
    assert p.stderr.splitlines()[-1] == "msmemscope: error: --suppress: 'missing.supp': No such file or directory"
    p = _run(["--device=cpu", "--default-suppressions=maybe", "--", DEMO], tmp_path)
    assert p.returncode == 2
    assert ("msmemscope: error: --default-suppressions: invalid value 'maybe' (allowed: true, false)"
            in p.stderr.splitlines())
    (tmp_path / "s").write_text("x\n")
    p = _run(["--device=cpu", "--suppress=s", "--analysis=decompose", "--output=o", "--", DEMO], tmp_path)
    assert p.returncode == 0
    assert ("msmemscope: warning: --suppress: the leaks analysis is not selected, so leak suppressions have no "
            "effect (select it with --analysis=leaks)") in p.stderr.splitlines()


def test_python_interpreter_sites_are_suppressed_by_default(tmp_path):
    (tmp_path / "toy.py").write_text("import json, collections\nprint(sum(i * 2 for i in range(1000)))\n")
    p = _run(["--device=cpu", "--call-stack=c:30", "--output=o1", "--", "/usr/bin/python3", "toy.py"], tmp_path)
    assert p.returncode == 0, p.stderr
    # (and the caches of msmemscope's own Python modules, which the CLI's
    # Python side loads into every interpreter)
    m = re.search(r"^  (\d+) allocation site\(s\) suppressed on device cpu \((\d+) block\(s\), (\d+) bytes\): (\d+) by the "
                  r"built-in list of one-time set-up \(the interpreter, the imports' heap, the loader, libc's locale tables; "
                  r"--default-suppressions=false shows them\)(, \d+ by msmemscope's own modules "
                  r"\(the profiler's memory\))?$", p.stdout, re.M)
    assert m, p.stdout
    suppressed = int(m[4])
    assert suppressed >= 10
    # No interpreter or loader site is left in the report.
    sites = re.findall(r"allocated at: (.*)$", p.stdout, re.M)
    assert not [s for s in sites if "python3.11" in s or "ld-linux" in s], sites
    # Off: the interpreter's sites are listed again.
    p = _run(["--device=cpu", "--call-stack=c:30", "--default-suppressions=false", "--output=o2", "--",
              "/usr/bin/python3", "toy.py"], tmp_path)
    assert "suppressed" not in p.stdout
    n = int(re.search(r"from (\d+) allocation site\(s\)", p.stdout)[1])
    assert n >= 10
    assert [s for s in re.findall(r"allocated at: (.*)$", p.stdout, re.M) if "python3.11" in s]


def _python_api(tmp_path, body):
    """A script that uses the Python API without the CLI (the package spawns
    its own host, which prints the leak report on the script's stdout)."""
    (tmp_path / "api.py").write_text(textwrap.dedent(body))
    e = dict(os.environ)
    e.pop("LD_PRELOAD", None)
    e.pop("MSMEMSCOPE_SESSION", None)
    e["PYTHONPATH"] = str(BUILD / "python")
    return subprocess.run(["/usr/bin/python3", "api.py"], cwd=str(tmp_path), env=e, capture_output=True, text=True,
                          timeout=300)


LEAKY = """
    import os, msmemscope
    msmemscope.config(device="cpu", call_stack="c:16", output=os.path.abspath("{out}"), {kw})
    os.chdir("/")  # suppress= was resolved against the folder current at config()
    msmemscope.start()
    keep = [bytearray(100000 + i) for i in range(3)]  # alive at exit: reported
    msmemscope.stop()
"""


def test_python_api_suppress_removes_sites_as_the_command_line_does(tmp_path):
    # The three buffers come from one site in the interpreter, which the
    # built-in CPython list hides; with it off, they are reported ...
    p = _python_api(tmp_path, LEAKY.format(out="o1", kw="default_suppressions=False"))
    assert p.returncode == 0, p.stderr
    assert ("\n  Host memory still allocated at stop() on device cpu: 3 block(s), 300006 bytes, from 1 allocation "
            "site(s):\n") in p.stdout, p.stdout
    assert "suppressed" not in p.stdout
    # ... and a suppression file given to config() removes them, said as --suppress says it.
    (tmp_path / "py.supp").write_text("# the interpreter's own buffers\nleak:python3.11\n")
    p = _python_api(tmp_path, LEAKY.format(out="o2", kw="suppress='py.supp', default_suppressions=False"))
    assert p.returncode == 0, p.stderr
    assert "Host memory still allocated" not in p.stdout, p.stdout
    assert (f"\n  1 allocation site(s) suppressed on device cpu (3 block(s), 300006 bytes): 1 by "
            f"{tmp_path}/py.supp\n") in p.stdout, p.stdout
    # A list of files; a pattern that matches nothing leaves the site in the report.
    (tmp_path / "other.supp").write_text("leak:no_such_function\n")
    p = _python_api(tmp_path, LEAKY.format(out="o3", kw="suppress=['other.supp'], default_suppressions=False"))
    assert p.returncode == 0, p.stderr
    assert "Host memory still allocated at stop() on device cpu: 3 block(s), 300006 bytes" in p.stdout, p.stdout
    assert "suppressed" not in p.stdout
    # The default list is on unless turned off: the same site, suppressed by it.
    p = _python_api(tmp_path, LEAKY.format(out="o4", kw="suppress='other.supp'"))
    assert p.returncode == 0, p.stderr
    assert ("\n  1 allocation site(s) suppressed on device cpu (3 block(s), 300006 bytes): 1 by the built-in "
            "list of one-time set-up (the interpreter, the imports' heap, the loader, libc's locale tables; "
            "default_suppressions=\"false\" shows them)\n") in p.stdout, p.stdout  # config()'s words


def test_python_api_suppress_errors(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ValueError) as e:
        msmemscope.config(suppress="missing.supp")
    assert str(e.value) == f"msmemscope.config: suppress: '{tmp_path}/missing.supp': No such file or directory"
    with pytest.raises(TypeError) as e:
        msmemscope.config(suppress=5)
    assert str(e.value) == "msmemscope.config: 'suppress' must be a suppression file path, or a list of paths, got int"
    with pytest.raises(ValueError) as e:
        msmemscope.config(default_suppressions="maybe")
    assert str(e.value) == "msmemscope.config: default_suppressions: invalid value 'maybe' (allowed: true, false)"


TORCH_LOOP = SOURCE / "tests" / "programs" / "python" / "sgd_keep.py"


def _at_exit_sites(stdout):
    """The number of allocation sites the at-exit report names (0: it names none)."""
    found = re.findall(r"^  Host memory still allocated at exit on device cpu: .*, from (\d+) allocation site\(s\):$",
                       stdout, re.M)
    assert len(found) <= 1, stdout
    return int(found[0]) if found else 0


def _own_memory_left_out(tmp_path, call_stack, ours, env=None, recorded=True):
    """Runs TORCH_LOOP (a small SGD loop) with the given stacks: no at-exit site line matches
    `ours` (a regex) and the summary counts sites left out as msmemscope's;
    with the built-in lists off those sites are in the report again. Not
    `recorded`: msmemscope's memory there has no rows at all, lists or not."""
    (tmp_path / "loop.py").write_text(TORCH_LOOP.read_text())
    args = ["--device=cpu", f"--call-stack={call_stack}", "--analysis=leaks"]
    p = _run(args + ["--output=out", "--", "/usr/bin/python3", "loop.py"], tmp_path, env=env)
    assert p.returncode == 0, p.stderr
    lines = p.stdout.splitlines()
    # (none at all, now that torch's one-time set-up, all that was left, is known by the
    # allocator's caller too: test_leaks_torch_setup.py)
    heads = [i for i, l in enumerate(lines) if l.startswith("  Host memory still allocated at exit on device cpu")]
    assert len(heads) <= 1, p.stdout
    sites = [l for l in lines[heads[0] + 1:] if l.startswith("    ")] if heads else []
    assert not [l for l in sites if re.search(ours, l)], sites
    summary = [l for l in lines if " allocation site(s) suppressed on device cpu " in l]
    # each site is counted under one list: the parts add up to the sites left out
    for l in summary:
        total = int(re.match(r"^  (\d+) allocation site\(s\)", l).group(1))
        assert sum(int(n) for n in re.findall(r"(?:: |, )(\d+) by ", l)) == total, l
    own = re.search(r"[:,] (\d+) by msmemscope's own modules \(the profiler's memory\)(?:$|, )", "".join(summary))
    # Not `recorded`: the start-up hook's import of the package itself may
    # still leave a block the list names as msmemscope's; what must not be
    # recorded is checked without the lists below.
    assert bool(own) or not recorded, summary
    p2 = _run(args + ["--default-suppressions=false", "--output=out2", "--", "/usr/bin/python3", "loop.py"], tmp_path,
              env=env)
    assert p2.returncode == 0, p2.stderr
    assert " allocation site(s) suppressed on device cpu " not in p2.stdout, p2.stdout
    if recorded:
        # what the list took out is listed again (named by its first frame, libstdc++'s or Python's)
        assert _at_exit_sites(p2.stdout) >= _at_exit_sites(p.stdout) + int(own.group(1)), (p.stdout, p2.stdout)
    else:
        assert not [l for l in p2.stdout.splitlines() if l.startswith("    ") and re.search(ours, l)], p2.stdout


def test_msmemscopes_own_module_memory_is_not_the_programs(tmp_path):
    # The package's extension keeps memory until exit (pybind11's function
    # records, its caches): the profiler's memory. With C stacks it used to
    # head the "Host memory still allocated at exit" list; a built-in list
    # takes it out.
    _own_memory_left_out(tmp_path, "c,python", r"/msmemscope/_")


def test_msmemscopes_own_memory_makes_no_rows_while_the_loop_runs(tmp_path):
    # The operator observer's name caches (one entry and name per operator
    # and thread) were recorded as the program's: with Python stacks alone
    # the at-exit report named the lines that first ran each operator
    # (`linear.py(114): forward`, `functional.py(2210): embedding`, ...) as
    # sites still holding memory. And each owner tag the package writes
    # (a gradient's, after backward()) went through pybind11, whose call
    # allocates its argument vectors and a string per str argument: two
    # MALLOC/FREE pairs a tag at the program's backward() line; and glibc
    # made the observer's TLS block at a thread's first operator, a block
    # held until exit at that operator's line. The caches are made with the
    # agent's hooks off, the TLS is initial-exec, the tag's call allocates nothing:
    # between the first and the last operator row, no row has a frame of
    # msmemscope's modules, while the operator and tag rows are there.
    # C stacks unwound by the DWARF unwinder (libgcc): the frame-pointer walk
    # reads stale return addresses through PyTorch's code (no frame pointers),
    # which may point into msmemscope's modules (an earlier call's).
    (tmp_path / "loop.py").write_text(TORCH_LOOP.read_text())
    p = _run(["--device=cpu", "--call-stack=c,python", "--analysis=decompose", "--output=out", "--",
              "/usr/bin/python3", "loop.py"], tmp_path, env={"MSMEMSCOPE_UNWIND": "libgcc"})
    assert p.returncode == 0, p.stderr
    (procdir,) = process_dirs(tmp_path / "out")
    rows = read_dump(dump_files(procdir)[0])
    ops = [i for i, r in enumerate(rows) if r["Event"] == "OP_LAUNCH"]
    loop = rows[ops[0]:ops[-1]]
    assert [r for r in loop if r["Event Type"] == "ATEN_START" and r["Name"] == "torch._ops.aten.addmm.default"]
    assert [r for r in loop if r["Event"] == "MALLOC" and "owner:PTA@gradient" in r["Attr"]]  # a tag's answer
    mine = [r for r in loop if r["Event"] in ("MALLOC", "FREE") and "/msmemscope/_" in r["Call Stack(C)"]]
    assert not mine, mine[:3]
    # nor a thread's first operator: glibc making the observer's TLS block (its first TLS access)
    tls = [r for r in rows if r["Event"] == "MALLOC" and "__tls_get_addr" in r["Call Stack(C)"] and
           "/msmemscope/_" in r["Call Stack(C)"]]
    assert not tls, tls[:3]


def test_the_start_up_hooks_memory_is_not_the_programs(tmp_path):
    # With Python stacks only, what msmemscope's start-up in the program keeps
    # (the profile function's infos of the code objects it saw) was listed
    # after the CLI's generated sitecustomize.py in its session folder (a
    # temporary path, gone by the time the list is read).
    _own_memory_left_out(tmp_path, "python", r"/\.msmemscope_session_\w+/python/sitecustomize\.py\(\d+\): ",
                         env={"MSMEMSCOPE_PY_STACKS": "shadow"})


def test_code_infos_of_the_frame_reader_are_not_recorded(tmp_path):
    # The default reads Python stacks from the interpreter's frames: the code
    # objects' infos are made by a pending call on the program's time (its
    # rows would name whatever line of the program then ran), with the
    # agent's hooks off -- no row, no site, with or without the lists.
    _own_memory_left_out(tmp_path, "python", r"/\.msmemscope_session_\w+/python/sitecustomize\.py\(\d+\): |"
                         r"/msmemscope/_", recorded=False)
