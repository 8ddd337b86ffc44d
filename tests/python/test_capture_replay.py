"""Issue 3 §7: capture once, analyse many: --save-capture keeps the .msmcap,
--replay re-runs the pipeline on it; damaged or foreign files get one clear
error."""
import json
import shutil

from capture_util import first_chunk_in_place, iter_rows, only_dump
from conftest import process_dirs

ARGS = ["--device=cpu", "--events=alloc,free", "--analysis="]


def saved_capture(cli, test_bin, tmp_path):
    cli(ARGS + ["--save-capture=true", f"--output={tmp_path}/out", "--", test_bin / "cap_threads", 2, 5000, 50],
        tmp_path, check_rc=0)
    dirs = process_dirs(tmp_path / "out")
    assert len(dirs) == 1
    caps = sorted(dirs[0].glob("*.msmcap"))
    assert len(caps) == 1
    return dirs[0], caps[0]


def test_replay_gives_same_rows(cli, test_bin, tmp_path):
    d, cap = saved_capture(cli, test_bin, tmp_path)
    p = cli(ARGS + [f"--replay={cap}", f"--output={tmp_path}/again"], tmp_path, check_rc=0)
    again = process_dirs(tmp_path / "again")
    assert len(again) == 1 and again[0].name == d.name
    a = list(iter_rows(only_dump(d)))
    b = list(iter_rows(only_dump(again[0])))
    assert len(a) == len(b) and len(a) > 20000
    assert a == b


def test_replay_errors(cli, test_bin, tmp_path):
    d, cap = saved_capture(cli, test_bin, tmp_path)

    def err(path):
        p = cli(ARGS + [f"--replay={path}", f"--output={tmp_path}/x"], tmp_path)
        assert p.returncode == 2
        return p.stderr.strip().splitlines()[-1]

    missing = tmp_path / "missing.msmcap"
    assert err(missing) == f"msmemscope: error: --replay: {missing}: cannot open: No such file or directory"
    foreign = tmp_path / "foreign.msmcap"
    foreign.write_bytes(b"ID,Event\n" * 1000)
    assert err(foreign) == f"msmemscope: error: --replay: {foreign}: not a msmemscope capture (bad magic)"
    short = tmp_path / "short.msmcap"
    short.write_bytes(b"MSMSCAP\0xx")
    assert err(short) == f"msmemscope: error: --replay: {short}: not a msmemscope capture (file too short: 10 bytes)"
    assert err(tmp_path) == f"msmemscope: error: --replay: {tmp_path}: not a msmemscope capture (not a regular file)"
    trunc = tmp_path / "trunc.msmcap"
    shutil.copy(cap, trunc)
    size = trunc.stat().st_size
    with open(trunc, "r+b") as f:
        f.truncate(4096 + 65536)
    assert err(trunc) == (f"msmemscope: error: --replay: {trunc}: truncated capture (the header describes {size} "
                          f"bytes, the file has {4096 + 65536})")
    bad = tmp_path / "bad.msmcap"
    shutil.copy(cap, bad)
    with open(bad, "r+b") as f:
        first = first_chunk_in_place(bad)
        f.seek(4096 + first * 65536 + 32)  # its first record
        f.write(b"\xee")
    # Damage is found by the sealed chunk's checksum (format 2, #16): the
    # output is incomplete (70), the chunk is skipped, never misread.
    p = cli(ARGS + [f"--replay={bad}", f"--output={tmp_path}/x"], tmp_path)
    assert p.returncode == 70
    assert p.stderr.strip().splitlines()[-1] == (
        f"msmemscope: error: --replay: {bad}: corrupt capture: 1 damaged part(s) skipped "
        f"(first: checksum mismatch in chunk {first} at offset 0)")
    newer = tmp_path / "newer.msmcap"
    shutil.copy(cap, newer)
    with open(newer, "r+b") as f:
        f.seek(8)
        f.write((99).to_bytes(4, "little"))
        minor = int.from_bytes(f.read(4), "little")  # the capture's own (this build's minor)
    assert err(newer) == (f"msmemscope: error: --replay: {newer}: capture format 99.{minor} is not supported "
                          f"(this build reads 2.x to 4.x)")


PROGRAM = """\
def f3():
    return bytearray(100000)
def f2():
    return f3()
def f1():
    return f2()
keep = [f1() for _ in range(5)]
print("ok")
"""


def test_replay_config_json_describes_the_capture(cli, tmp_path):
    # A replay without --device took the capture's devices after the
    # collectors had been chosen for the default npu: config.json said
    # collectors hal, kernel_launch, mstx, call_stack {} and program []
    # for a capture of a Python program's host heap with Python stacks.
    (tmp_path / "prog.py").write_text(PROGRAM)
    cli(["--device=cpu", "--call-stack=python", "--save-capture=true", f"--output={tmp_path}/out", "--",
         "/usr/bin/python3", "prog.py"], tmp_path, env={"PYTHONPATH": "", "LD_PRELOAD": ""}, check_rc=0)
    (d,) = process_dirs(tmp_path / "out")
    (cap,) = d.glob("*.msmcap")
    cli([f"--replay={cap}", f"--output={tmp_path}/again"], tmp_path, check_rc=0)
    (again,) = process_dirs(tmp_path / "again")
    recorded = json.loads((d / "config.json").read_text())
    replayed = json.loads((again / "config.json").read_text())
    assert replayed["device"] == recorded["device"] == ["cpu"]
    assert replayed["collectors"] == recorded["collectors"] and "host_heap" in replayed["collectors"]
    assert replayed["program"] == recorded["program"] == ["/usr/bin/python3", "prog.py"]
    # the stacks the capture holds: Python ones, as deep as the deepest row's
    deepest = max(len(r[10].splitlines()) for r in iter_rows(only_dump(d)))
    assert 4 <= deepest <= 50
    assert replayed["call_stack"] == {"python": deepest}
