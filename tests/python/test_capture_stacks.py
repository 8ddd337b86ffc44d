"""Issue 3 §6: C call stacks, symbolized in the host, one frame per line."""
from capture_util import iter_rows, only_dump, size_of
from conftest import SOURCE, process_dirs

SRC = "cap_stack.c"


def run(cli, test_bin, tmp_path, stack):
    args = ["--device=cpu", "--events=alloc,free", "--analysis=", f"--output={tmp_path}/out"]
    if stack:
        args.append(f"--call-stack={stack}")
    cli(args + ["--", test_bin / "cap_stack"], tmp_path, check_rc=0)
    dirs = process_dirs(tmp_path / "out")
    assert len(dirs) == 1
    return {(r[1], size_of(r[9])): r for r in iter_rows(only_dump(dirs[0])) if size_of(r[9]) in (4242, 4343)}


def frames(row):
    return row[11].split("\n")


def test_c_stack_full(cli, test_bin, tmp_path):
    rows = run(cli, test_bin, tmp_path, "c")
    prog = str(test_bin / "cap_stack")
    f = frames(rows[("MALLOC", 4242)])
    want = [("leaf_alloc", 6), ("level_b", 7), ("level_a", 8), ("main", 16)]
    for line, (fn, ln) in zip(f, want):
        assert line.startswith(fn + "+0x"), f
        assert line.endswith(f"/tests/programs/capture/{SRC}:{ln} in {prog}"), line
    assert f[-1].startswith("_start+0x")
    f = frames(rows[("FREE", 4343)])
    assert [x.split("+")[0] for x in f[:3]] == ["leaf_alloc2", "other_path", "main"]
    assert f[0].endswith(f"{SRC}:11 in {prog}")
    assert rows[("MALLOC", 4242)][10] == ""  # no Python stack asked for


def test_c_stack_depth(cli, test_bin, tmp_path):
    rows = run(cli, test_bin, tmp_path, "c:2")
    assert [x.split("+")[0] for x in frames(rows[("MALLOC", 4242)])] == ["leaf_alloc", "level_b"]


def test_no_stacks_by_default(cli, test_bin, tmp_path):
    rows = run(cli, test_bin, tmp_path, None)
    assert rows[("MALLOC", 4242)][11] == "" and rows[("MALLOC", 4242)][10] == ""


def test_python_stack_provider(cli, test_bin, tmp_path):
    """The agent side of Python stacks: a provider installed through
    msms_agent_set_python_stack_provider gives interned frame strings."""
    args = ["--device=cpu", "--events=alloc,free", "--analysis=", "--call-stack=python:2", f"--output={tmp_path}/out"]
    cli(args + ["--", test_bin / "cap_pystack"], tmp_path, check_rc=0)
    dirs = process_dirs(tmp_path / "out")
    rows = {(r[1], size_of(r[9])): r for r in iter_rows(only_dump(dirs[0]))}
    assert rows[("MALLOC", 5151)][10] == "train.py(30): step\nmodel.py(12): forward"
    assert rows[("MALLOC", 5252)][10] == "main.py(1): <module>"
    assert rows[("FREE", 5151)][10] == "main.py(1): <module>"
    assert rows[("MALLOC", 5151)][11] == ""  # no C stack asked for


def test_c_stack_through_rbp_used_for_data(cli, test_bin, tmp_path):
    """Code built without frame pointers may hold data in %rbp when it calls
    malloc. The frame-pointer walk then reads the stack's words as frame
    records: here the return address it would read is text, "/tmp/pro"
    (0x6f72702f706d742f). Such a stack used to show that word twice as its
    frames, and no caller; a word that is no user-space address now sends the
    walk to the unwind tables, which give the true chain."""
    args = ["--device=cpu", "--events=alloc,free", "--analysis=", "--call-stack=c", f"--output={tmp_path}/out"]
    cli(args + ["--", test_bin / "cap_junk_fp"], tmp_path, check_rc=0)
    dirs = process_dirs(tmp_path / "out")
    rows = {(r[1], size_of(r[9])): r for r in iter_rows(only_dump(dirs[0]))}
    f = frames(rows[("MALLOC", 4545)])
    assert [x.split("+")[0] for x in f[:3]] == ["junk_fp_alloc", "caller_of_junk", "main"], f
    assert f[1].endswith(f"/tests/programs/capture/cap_junk_fp.c:44 in {test_bin / 'cap_junk_fp'}")
    assert f[-1].startswith("_start+0x")
    assert not any("6f72702f706d742f" in x for x in f), f
