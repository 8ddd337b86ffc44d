"""Issue #29 item 1: the watch analyzer moves only the profiled program's own
staging files (made in the live run's session folder, named with the host's
per-session token); a path that a capture (live, or shared for --replay) or a
dump (--analyze=watch) names is never opened for writing, moved or deleted.

A real program under the CLI sends full-content checkpoints naming a private
file outside the session folder, a symbolic link, a directory tree and a path
with '..' (tests/programs/analyzers/watch_hostile.py); its capture is then
replayed and its dump analysed. Each original keeps its inode, content and
place, and each run says so in one warning."""
import os
import stat

from conftest import BUILD, SOURCE, dump_files, process_dirs

PY = "/usr/bin/python3"
PROG = SOURCE / "tests" / "programs" / "analyzers" / "watch_hostile.py"
LIB = BUILD / "lib" / "msmemscope" / "agent" / "libmsms_watch.so"
TAIL = ("; only the profiled program's own staging files of this live run are moved "
        "(never a path read from a capture or dump)")
TOKEN = "0123456789abcdef0123456789abcdef"


def victims(tmp_path):
    """Files another owner would keep private: a 0600 file in a 0700 folder,
    a link to a file, a directory tree, a file reached through '..'."""
    v = tmp_path / "victims"
    v.mkdir(mode=0o700)
    (v / "secret").write_text("root's secret\n")
    os.chmod(v / "secret", 0o600)
    (v / "link_target").write_text("behind the link\n")
    os.symlink(v / "link_target", v / "link")
    (v / "tree" / "sub").mkdir(parents=True)
    (v / "tree" / "sub" / "file").write_text("in the tree\n")
    (v / "dotdot").write_text("reached by ..\n")
    named = [str(v / "secret"), str(v / "link"), str(v / "tree"), str(v / ".." / "victims" / "dotdot")]
    return v, named


def state(v):
    """(path, inode, kind, content) of everything under the victims folder."""
    out = []
    for root, dirs, files in os.walk(v):
        for n in sorted(dirs + files):
            p = os.path.join(root, n)
            st = os.lstat(p)
            if stat.S_ISLNK(st.st_mode):
                body = "-> " + os.readlink(p)
            elif stat.S_ISREG(st.st_mode):
                with open(p) as f:
                    body = f.read()
            else:
                body = "dir"
            out.append((os.path.relpath(p, v), st.st_ino, stat.S_IMODE(st.st_mode), body))
    return sorted(out)


def warning(n, first, why):
    return (f"[msmemscope] warning: watch: {n} checkpoint file(s) named by the events were ignored, "
            f"first '{first}' ({why})" + TAIL)


def no_watch_files(out):
    for d in process_dirs(out):
        assert not list(d.glob("device_*/watch_dump/*")), list(d.glob("device_*/watch_dump/*"))


def test_marks_naming_other_files_move_nothing_live_replay_or_analyze(cli, tmp_path):
    assert LIB.exists(), LIB
    v, named = victims(tmp_path)
    before = state(v)
    assert len(before) == 7, before
    # live: the program names them in its own checkpoints
    p = cli(["--device=cpu", "--events=launch", "--save-capture=true", f"--output={tmp_path}/live", "--",
             PY, PROG, LIB] + named, cwd=tmp_path, check_rc=0)
    assert state(v) == before
    assert "sent 4" in p.stdout, p.stdout + p.stderr
    assert warning(4, named[0], "not a file name of the session folder") in p.stderr, p.stderr
    no_watch_files(tmp_path / "live")
    [proc] = process_dirs(tmp_path / "live")
    [capture] = proc.glob("capture_*.msmcap")
    [dump] = dump_files(proc)
    assert dump.read_text().count("msmemscope.watch") == 4
    # the capture shared for --replay: no session folder, nothing moved
    p = cli([f"--replay={capture}", f"--output={tmp_path}/replay"], cwd=tmp_path, check_rc=0)
    assert state(v) == before
    assert warning(4, named[0], "not a live run's session folder") in p.stderr, p.stderr
    no_watch_files(tmp_path / "replay")
    # the dump given to --analyze=watch
    p = cli(["--analyze=watch", f"--input={dump}"], cwd=tmp_path, check_rc=0)
    assert state(v) == before
    assert warning(4, named[0], "not a live run's session folder") in p.stderr, p.stderr
    assert "with watch" in p.stdout, p.stdout


def test_replay_never_takes_a_staging_folder_from_its_environment(cli, tmp_path):
    """A file named exactly as a staging file, with the token and folder the
    host's plugin reads handed to --replay in its environment: the host
    clears them at start, so nothing is moved."""
    v = tmp_path / "staging"
    v.mkdir(mode=0o700)
    name = f"watch_{TOKEN}_{{pid}}_1.bin"
    p = cli(["--device=cpu", "--events=launch", "--save-capture=true", f"--output={tmp_path}/live", "--",
             PY, PROG, LIB, name], cwd=tmp_path, check_rc=0)
    [proc] = process_dirs(tmp_path / "live")
    pid = proc.name.split("_")[1]
    staged = v / name.replace("{pid}", pid)
    staged.write_text("planted\n")
    os.chmod(staged, 0o600)
    before = state(v)
    [capture] = proc.glob("capture_*.msmcap")
    p = cli([f"--replay={capture}", f"--output={tmp_path}/replay"], cwd=tmp_path, check_rc=0,
            env={"MSMEMSCOPE_HOST_WATCH_STAGING": str(v), "MSMEMSCOPE_HOST_WATCH_TOKEN": TOKEN})
    assert state(v) == before
    assert warning(1, staged.name, "not a live run's session folder") in p.stderr, p.stderr
    no_watch_files(tmp_path / "replay")
