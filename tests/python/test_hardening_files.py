"""Issue 16 §2-§4, §6: nothing is written outside --output, session and
output folders are fresh and private, write-back never follows a link and
keeps the input's mode, a root host loads nothing another user could write,
and the Python API refuses strings that cannot reach the C side intact."""
import csv
import os
import shutil
import signal
import stat
import subprocess
import sys

import pytest

from conftest import BUILD, CLI, process_dirs
from test_analyzers_cli import row, upstream_inefficient_csv, write_csv

ARGS = ["--device=cpu", "--events=alloc,free", "--analysis="]
IS_ROOT = os.geteuid() == 0


def run(args, cwd, env=None, umask=None):
    e = dict(os.environ)
    e.pop("LD_PRELOAD", None)
    e.update(env or {})
    pre = (lambda: os.umask(umask)) if umask is not None else None
    return subprocess.run([str(CLI)] + [str(a) for a in args], cwd=str(cwd), env=e, capture_output=True,
                          text=True, timeout=120, preexec_fn=pre)


def test_rank_from_the_environment_names_no_folder_outside_output(tmp_path):
    victim = tmp_path / "victim"
    p = run(ARGS + [f"--output={tmp_path}/out", "--", "/bin/true"], tmp_path,
            env={"RANK": "/../../victim/x"})
    assert p.returncode == 0, p.stdout + p.stderr
    assert not victim.exists()
    d = process_dirs(tmp_path / "out")
    assert len(d) == 1 and "_rank" not in d[0].name
    assert ("' is not a number; the output folder is named without it" in p.stderr
            and "RANK '/../../victim/x'" in p.stderr), p.stderr
    # A number is kept.
    p = run(ARGS + [f"--output={tmp_path}/out2", "--", "/bin/true"], tmp_path, env={"RANK": "3"})
    assert process_dirs(tmp_path / "out2")[0].name.endswith("_rank3")


def test_session_folder_is_fresh_and_private(tmp_path, test_bin):
    out = tmp_path / "out"
    out.mkdir()
    # A planted session folder with a capture in it is never read.
    planted = out / f".msmemscope_session_{os.getpid()}"
    planted.mkdir()
    (planted / "1.0.msmcap").write_bytes(b"MSMSCAP\0" + b"\0" * 8192)
    script = 'stat -c "mode=%a" "$MSMEMSCOPE_SESSION"; echo "dir=$MSMEMSCOPE_SESSION"; umask'
    p = run(ARGS + [f"--output={out}", "--", "/bin/sh", "-c", script], tmp_path, umask=0)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "mode=700" in p.stdout
    session = [l for l in p.stdout.splitlines() if l.startswith("dir=")][0][4:]
    assert os.path.basename(session) != planted.name
    assert not os.path.exists(session)  # removed at the end
    assert (planted / "1.0.msmcap").exists()  # untouched, never processed
    assert "1.0.msmcap" not in p.stdout + p.stderr
    # The program runs with the user's own umask (000 here) ...
    assert "\n0000\n" in "\n" + p.stdout
    # ... while nothing the tool wrote is writable by others.
    for root, dirs, files in os.walk(out):
        if ".msmemscope_session_" in root:
            continue
        for n in dirs + files:
            m = os.stat(os.path.join(root, n)).st_mode
            assert not m & stat.S_IWOTH, (os.path.join(root, n), oct(m))


@pytest.mark.skipif(not IS_ROOT or not shutil.which("setpriv"), reason="needs root and setpriv")
def test_other_user_cannot_plant_a_capture_in_a_root_session(tmp_path):
    script = ('setpriv --reuid=nobody --regid=nogroup --clear-groups /bin/sh -c '
              '\'echo x > "$MSMEMSCOPE_SESSION/9.0.msmcap" && echo planted || echo refused\'')
    p = run(ARGS + [f"--output={tmp_path}/out", "--", "/bin/sh", "-c", script], tmp_path, umask=0)
    assert "refused" in p.stdout.splitlines() and "planted" not in p.stdout.splitlines(), p.stdout + p.stderr


def test_existing_process_folder_is_never_reused(cli, test_bin, tmp_path):
    cli(ARGS + ["--save-capture=true", f"--output={tmp_path}/out", "--", test_bin / "short_threads", 2, 10],
        tmp_path, check_rc=0)
    d = process_dirs(tmp_path / "out")[0]
    cap = next(d.glob("*.msmcap"))
    # A replay's folder name is predictable: plant it with a link to a victim.
    again = tmp_path / "again"
    (again / d.name).mkdir(parents=True)
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me")
    os.symlink(victim, again / d.name / "config.json")
    p = cli(ARGS + [f"--replay={cap}", f"--output={again}"], tmp_path)
    assert p.returncode == 0, p.stdout + p.stderr
    assert victim.read_text() == "keep me"
    assert (again / (d.name + "_2") / "config.json").is_file()


def test_an_output_folder_that_cannot_be_made_exits_70(cli, test_bin, tmp_path):
    cli(ARGS + ["--save-capture=true", f"--output={tmp_path}/out", "--", test_bin / "short_threads", 1, 10],
        tmp_path, check_rc=0)
    d = process_dirs(tmp_path / "out")[0]
    cap = next(d.glob("*.msmcap"))
    again = tmp_path / "again"
    again.mkdir()
    for n in [""] + [f"_{k}" for k in range(2, 101)]:
        (again / (d.name + n)).write_text("")
    p = cli(ARGS + [f"--replay={cap}", f"--output={again}"], tmp_path)
    assert p.returncode == 70, p.stdout + p.stderr
    assert p.stderr.strip().splitlines()[-1] == (
        f"msmemscope: error: --replay: {again}/{d.name}: cannot create the output folder: it and 99 numbered "
        f"variants (_2, _3, ...) exist")


def descendants(pid):
    """pid and the processes below it (the pipeline runs in a worker)."""
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        try:
            for t in os.listdir(f"/proc/{p}/task"):
                with open(f"/proc/{p}/task/{t}/children") as c:
                    todo += [int(x) for x in c.read().split()]
        except OSError:
            pass
    return out


def open_files_in(pid, folder):
    """The files of `folder` that process `pid` or one below it holds open."""
    held = set()
    for p in descendants(pid):
        try:
            names = os.listdir(f"/proc/{p}/fd")
        except OSError:
            continue
        for n in names:
            try:
                target = os.readlink(f"/proc/{p}/fd/{n}")
            except OSError:
                continue
            if target.startswith(str(folder) + "/"):
                held.add(target)
    return held


def big_marked_dump(f):
    """A dump of ~40 MB: the small marked one and many host blocks after it."""
    with open(upstream_inefficient_csv(f), newline="") as src:
        rows = list(csv.reader(src))[1:]
    pad = "x" * 200
    for i in range(100000):
        rows.append(row(8 + 2 * i, "MALLOC", "HOST", "N/A", 700 + 2 * i, ptr="0x%016x" % (0x100000 + 64 * i),
                        attr="{allocation_id:%d,addr:0x%x,size:64,pad:%s}" % (3 + i, 0x100000 + 64 * i, pad)))
        rows.append(row(9 + 2 * i, "FREE", "HOST", "N/A", 701 + 2 * i, ptr="0x%016x" % (0x100000 + 64 * i),
                        attr="{allocation_id:%d,addr:0x%x,size:64}" % (3 + i, 0x100000 + 64 * i)))
    return write_csv(f, rows)


def interrupt_when(args, cwd, ready, sig=signal.SIGINT):
    """Runs the CLI, sends `sig` once ready(pid) (a barrier: what it holds
    open), returns (returncode, stdout, stderr)."""
    e = dict(os.environ)
    e.pop("LD_PRELOAD", None)
    p = subprocess.Popen([str(CLI)] + args, cwd=str(cwd), env=e, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True)
    while p.poll() is None and not ready(p.pid):
        pass
    assert p.poll() is None, "it ended first: " + "".join(p.communicate())
    p.send_signal(sig)
    out, err = p.communicate(timeout=120)
    return p.returncode, out, err


def test_analyze_interrupted_while_it_writes_back_leaves_nothing(tmp_path):
    d = tmp_path / "in"
    d.mkdir()
    f = big_marked_dump(d / "memscope_dump_1.csv")
    before = f.read_bytes()
    # the barrier: it holds a second file of the folder open (the results it writes)
    rc, out, err = interrupt_when(["--analyze=inefficient", f"--input={f}", f"--output={tmp_path}/o"], tmp_path,
                                  lambda pid: open_files_in(pid, d) - {str(f)})
    assert rc == -signal.SIGINT, out + err
    assert err.splitlines()[-1] == ("msmemscope: --analyze: interrupted by SIGINT before it finished; its results "
                                    "are written only at its end (the input is rewritten in one step)")
    assert os.listdir(d) == [f.name]  # no partial file beside it, named or hidden
    assert f.read_bytes() == before


def test_compare_interrupted_says_so_and_writes_nothing(tmp_path):
    d = tmp_path / "in"
    d.mkdir()
    a = big_marked_dump(d / "a.csv")
    b = d / "b.csv"
    shutil.copy(a, b)
    # the barrier: it reads the second input
    rc, out, err = interrupt_when(["--compare", f"--input-path={a},{b}", f"--output-path={tmp_path}/o"], tmp_path,
                                  lambda pid: str(b) in open_files_in(pid, d), signal.SIGTERM)
    assert rc == -signal.SIGTERM, out + err
    assert err.splitlines()[-1] == ("msmemscope: --compare: interrupted by SIGTERM before it finished; its compare "
                                    "file is written only at the end")
    assert not list((tmp_path / "o").glob("**/memory_compare_*.csv"))


def test_analyze_write_back_keeps_mode_and_refuses_links(cli, tmp_path):
    d = tmp_path / "in"
    d.mkdir()
    f = upstream_inefficient_csv(d / "memscope_dump_1.csv")
    os.chmod(f, 0o600)
    # The old fixed temporary name, planted as a link: never followed.
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me")
    os.symlink(victim, str(f) + ".msmemscope.tmp")
    p = cli(["--analyze=inefficient", f"--input={f}", f"--output={tmp_path}/o"], tmp_path)
    assert p.returncode == 0, p.stdout + p.stderr
    assert f"msmemscope: wrote 1 result(s) back into {f}" in p.stdout
    assert stat.S_IMODE(os.stat(f).st_mode) == 0o600
    assert victim.read_text() == "keep me"
    assert not os.path.islink(f)
    assert sorted(n for n in os.listdir(d) if n.startswith("memscope_dump_1.csv.msmemscope.")) == \
        ["memscope_dump_1.csv.msmemscope.tmp"]  # only the planted link; no temporary left
    # The input itself a link: read, but never written through.
    real = upstream_inefficient_csv(tmp_path / "real.csv")
    before = real.read_text()
    link = d / "memscope_dump_2.csv"
    os.symlink(real, link)
    p = cli(["--analyze=inefficient", f"--input={link}", f"--output={tmp_path}/o"], tmp_path)
    assert p.returncode == 70, p.stdout + p.stderr
    assert p.stderr.strip().splitlines()[-1] == (f"msmemscope: error: {link}: cannot write the results back: "
                                                  f"Too many levels of symbolic links")
    assert real.read_text() == before


def test_non_regular_and_huge_inputs_are_refused(cli, tmp_path):
    p = cli(["--analyze=leaks", "--input=/dev/zero", f"--output={tmp_path}/o"], tmp_path, timeout=60)
    assert p.returncode == 2
    assert p.stderr.strip().splitlines()[-1] == ("msmemscope: error: --input: '/dev/zero' is not a regular file "
                                                  "(a character device); give a file or a folder")


@pytest.mark.skipif(not IS_ROOT, reason="the permission checks apply to a root host")
def test_root_refuses_plugins_others_could_write(cli, tmp_path):
    src = BUILD / "lib" / "msmemscope" / "plugins"
    plugin = sorted(src.glob("libmsmemscope_plugin_*.so"))[0]
    bad = tmp_path / "open"
    bad.mkdir()
    os.chmod(tmp_path, 0o755)
    os.chmod(bad, 0o777)
    shutil.copy(plugin, bad / "libmsmemscope_plugin_copy.so")
    p = cli(["--list-plugins", f"--plugin-path={bad}"], tmp_path)
    assert (f"refused: {bad}/libmsmemscope_plugin_copy.so: not loaded as root: its folder {bad} is writable by "
            f"all users") in p.stdout, p.stdout
    # Owned by another user.
    other = tmp_path / "other"
    other.mkdir()
    shutil.copy(plugin, other / "libmsmemscope_plugin_copy.so")
    nobody = 65534
    os.chown(other / "libmsmemscope_plugin_copy.so", nobody, nobody)
    p = cli(["--list-plugins", f"--plugin-path={other}"], tmp_path)
    assert (f"refused: {other}/libmsmemscope_plugin_copy.so: not loaded as root: "
            f"{other}/libmsmemscope_plugin_copy.so belongs to user id {nobody}, not root") in p.stdout, p.stdout
    p = cli(ARGS + [f"--output={tmp_path}/o", "--", "/bin/true"], tmp_path)
    assert ("msmemscope: warning: running as root: plugins and agent libraries that a user other than root owns "
            "or could write (they or a folder above them) are refused") in p.stderr


PY_BAD_STRINGS = r'''
import msmemscope
def err(f):
    try:
        f()
    except (TypeError, ValueError) as e:
        return type(e).__name__ + ": " + str(e)
    return "accepted"
print(err(lambda: msmemscope.config(device="\udcff")))
print(err(lambda: msmemscope.config(output="a\x00b")))
print(err(lambda: msmemscope.take_snapshot(name="x\x00y")))
print(err(lambda: msmemscope.RecordFunction("r\udc80")))
'''


def test_python_bad_strings_are_refused_before_anything_starts(tmp_path):
    env = dict(os.environ)
    env.pop("LD_PRELOAD", None)
    env["PYTHONPATH"] = str(BUILD / "python")
    p = subprocess.run(["/usr/bin/python3", "-c", PY_BAD_STRINGS], cwd=tmp_path, env=env, capture_output=True,
                       text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    assert p.stdout.splitlines() == [
        "ValueError: msmemscope.config: 'device' is not valid text: '\\udcff' at position 0 cannot be encoded as "
        "UTF-8",
        "ValueError: msmemscope.config: 'output' contains a NUL character (at position 1)",
        "ValueError: msmemscope.take_snapshot: 'name' contains a NUL character (at position 1)",
        "ValueError: msmemscope.RecordFunction: 'name' is not valid text: '\\udc80' at position 1 cannot be "
        "encoded as UTF-8",
    ]
    assert not any(n.startswith(".msmemscope_session") for n in os.listdir(tmp_path))


@pytest.mark.skipif(not IS_ROOT, reason="the permission checks apply to a root host")
def test_root_refuses_an_agent_others_could_replace(tmp_path):
    # MSMEMSCOPE_HOME pointing at a tree whose agent anyone may write.
    home = tmp_path / "home"
    shutil.copytree(BUILD / "lib" / "msmemscope", home / "lib" / "msmemscope")
    os.chmod(tmp_path, 0o755)
    for d in (home, home / "lib", home / "lib" / "msmemscope"):
        os.chmod(d, 0o755)
    agent = home / "lib" / "msmemscope" / "libmsmemscope_agent.so"
    os.chmod(agent, 0o666)
    p = run(ARGS + [f"--output={tmp_path}/out", "--", "/bin/true"], tmp_path, env={"MSMEMSCOPE_HOME": str(home)})
    assert p.returncode == 2, p.stdout + p.stderr
    assert (f"msmemscope: error: the agent library {agent} is refused: not loaded as root: {agent} is writable by "
            f"all users") in p.stderr.splitlines(), p.stderr


def test_host_killed_leaves_a_csv_with_its_header(tmp_path):
    """A host killed with SIGKILL while the program runs leaves a CSV that
    starts with its header (written and flushed when the file is made), not a
    0-byte file."""
    import signal
    import subprocess
    import time
    from conftest import CLI, DUMP_HEADER
    out = tmp_path / "out"
    env = dict(os.environ)
    env.pop("LD_PRELOAD", None)
    # The program waits on its stdin: it runs until the test has killed the host.
    p = subprocess.Popen([str(CLI), "--device=cpu", "--events=alloc,free", "--analysis=", f"--output={out}", "--",
                          "bash", "-c", "read line"],
                         stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                         env=env, start_new_session=True)
    try:
        deadline = time.monotonic() + 120
        files = []
        while time.monotonic() < deadline and not files:
            files = list(out.glob("msmemscope_*/device_cpu/dump/memscope_dump_*.csv"))
            if not files:
                time.sleep(0.05)
        assert files, "the CSV never appeared"
        os.killpg(p.pid, signal.SIGKILL)
        p.wait(timeout=60)
    finally:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait(timeout=60)
    first = files[0].read_text().splitlines()[0]
    assert first == ",".join(DUMP_HEADER)


def test_compare_result_never_follows_a_planted_link(tmp_path):
    """Links planted at every name the compare result could take in the next
    minute point at a victim file: the result replaces the link (a new file
    renamed into place), the victim is untouched."""
    import time
    from conftest import run_cli
    for name in ("a", "b"):
        run_cli(["--device=cpu", "--analysis=", f"--output={tmp_path}/{name}", "--", "/bin/true"],
                cwd=tmp_path, check_rc=0)
    victim = tmp_path / "victim"
    victim.write_text("keep me\n")
    cmp_dir = tmp_path / "cmp" / "compare"
    cmp_dir.mkdir(parents=True)
    now = int(time.time())
    for t in range(now - 2, now + 60):
        (cmp_dir / f"memory_compare_{time.strftime('%Y%m%d%H%M%S', time.localtime(t))}.csv").symlink_to(victim)
    run_cli(["--compare", f"--input={tmp_path}/a,{tmp_path}/b", f"--output={tmp_path}/cmp"], cwd=tmp_path,
            check_rc=0)
    assert victim.read_text() == "keep me\n"
    results = [f for f in cmp_dir.glob("memory_compare_*.csv") if not f.is_symlink()]
    assert len(results) == 1 and results[0].read_text().startswith(",,,Base,Compare\n")
    assert stat.S_IMODE(results[0].stat().st_mode) == 0o644
