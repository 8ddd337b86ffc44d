"""Issue #29 item 2: as root, everything msmemscope executes passes the same
ownership/permission check as the plugins and the agent it loads
(util/file_trust.h), whatever names it: MSMEMSCOPE_HOME for the host's plugin
probe helper, the Python package's host binary (config()/start(), offline
analysis) and the pip command, which execs the package's host binary.

Each case plants executables that would create a marker file in a tree owned
by another user (uid 65534, 'nobody') and checks the exact refusal and that
the marker never appears; a positive control shows the same planted helper
does run once the tree is root's own. These tests need root (CI runs as
root): as any other user nothing is refused, by design."""
import os
import shutil
import subprocess
import textwrap

import pytest

from conftest import BUILD

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="the trust check applies to root only; CI runs as root")

NOBODY = 65534
CLI = BUILD / "bin" / "msmemscope"


def _env(**extra):
    e = {k: v for k, v in os.environ.items()
         if k not in ("LD_PRELOAD", "MSMEMSCOPE_HOME", "PYTHONPATH", "MSMEMSCOPE_SESSION", "MSMEMSCOPE_PLUGIN_PATH")}
    e.update(extra)
    return e


def plant(path, marker):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"#!/bin/sh\ntouch {marker}\necho planted ran\n")
    path.chmod(0o755)


def chown_tree(root, uid):
    for d, dirs, files in os.walk(root):
        os.chown(d, uid, uid)
        for f in files:
            os.chown(os.path.join(d, f), uid, uid)


@pytest.fixture
def home(tmp_path):
    """A copy of the build's prefix (lib/msmemscope) with a planted probe helper
    and host binary; owned by root until a test hands it to nobody."""
    tmp = tmp_path.resolve()
    h = tmp / "home"
    shutil.copytree(BUILD / "lib" / "msmemscope", h / "lib" / "msmemscope", symlinks=True)
    marker = tmp / "planted_ran"
    plant(h / "lib" / "msmemscope" / "msmemscope-plugin-probe", marker)
    plant(h / "bin" / "msmemscope.bin", marker)
    plant(h / "bin" / "msmemscope", marker)
    return h, marker


def probe_refusal(h):
    probe = f"{h}/lib/msmemscope/msmemscope-plugin-probe"
    return (f"{probe}", f"the plugin probe helper is not run: not loaded as root: {probe} belongs to user id "
                        f"{NOBODY}, not root")


def test_positive_control_a_root_owned_helper_runs(home, tmp_path):
    h, marker = home
    p = subprocess.run([str(CLI), "--list-plugins"], env=_env(MSMEMSCOPE_HOME=str(h)), cwd=tmp_path,
                       capture_output=True, text=True, timeout=120)
    assert marker.exists(), p.stdout + p.stderr  # the planted helper ran: the test can see it


def test_list_plugins_does_not_run_another_users_probe_helper(home, tmp_path):
    h, marker = home
    chown_tree(h, NOBODY)
    p = subprocess.run([str(CLI), "--list-plugins"], env=_env(MSMEMSCOPE_HOME=str(h)), cwd=tmp_path,
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    path, why = probe_refusal(h)
    assert f"refused: {path}: {why}" in p.stdout.splitlines(), p.stdout
    assert not marker.exists()


def test_a_run_and_replay_do_not_run_it_either(home, tmp_path):
    h, marker = home
    chown_tree(h, NOBODY)
    path, why = probe_refusal(h)
    for args in (["--device=cpu", f"--output={tmp_path}/out", "--", "/bin/true"], [f"--replay={tmp_path}/nothing"]):
        p = subprocess.run([str(CLI)] + args, env=_env(MSMEMSCOPE_HOME=str(h)), cwd=tmp_path,
                           capture_output=True, text=True, timeout=120)
        assert p.returncode != 0, (args, p.stdout, p.stderr)
        assert f"msmemscope: warning: plugin {path} refused: {why}" in p.stderr.splitlines(), p.stderr
        assert not marker.exists(), args


def test_a_world_writable_helper_is_refused_too(home, tmp_path):
    h, marker = home
    probe = h / "lib" / "msmemscope" / "msmemscope-plugin-probe"
    probe.chmod(0o777)
    p = subprocess.run([str(CLI), "--list-plugins"], env=_env(MSMEMSCOPE_HOME=str(h)), cwd=tmp_path,
                       capture_output=True, text=True, timeout=120)
    assert (f"refused: {probe}: the plugin probe helper is not run: not loaded as root: {probe} is writable by "
            "all users") in p.stdout.splitlines(), p.stdout
    assert not marker.exists()


def _pip_command(h, tmp_path, *args):
    # The pip command's Python half (bindings/pip/msmemscope runs exactly this).
    code = "import sys; from msmemscope._cli import main; sys.argv[0] = 'msmemscope'; sys.exit(main())"
    return subprocess.run(["/usr/bin/python3", "-c", code] + list(args), cwd=tmp_path,
                          env=_env(MSMEMSCOPE_HOME=str(h), PYTHONPATH=str(BUILD / "python")),
                          capture_output=True, text=True, timeout=120)


def test_pip_command_refuses_another_users_host_binary(home, tmp_path):
    h, marker = home
    chown_tree(h, NOBODY)
    for args in (["--version"], ["--list-plugins"], ["--device=cpu", "--", "/bin/true"], [f"--replay={tmp_path}/x"]):
        p = _pip_command(h, tmp_path, *args)
        assert p.returncode == 2, (args, p.stdout, p.stderr)
        assert p.stderr == (f"msmemscope: error: the host binary {h}/bin/msmemscope.bin is refused: not loaded as root: "
                            f"{h}/bin/msmemscope.bin belongs to user id {NOBODY}, not root\n")
        assert p.stdout == "" and not marker.exists()


def test_pip_command_positive_control(home, tmp_path):
    h, marker = home  # root's own tree: the planted binary is what it runs
    p = _pip_command(h, tmp_path, "--version")
    assert p.returncode == 0 and p.stdout == "planted ran\n" and marker.exists(), (p.stdout, p.stderr)


def _python(h, tmp_path, body):
    (tmp_path / "s.py").write_text(textwrap.dedent(body))
    return subprocess.run(["/usr/bin/python3", "s.py"], cwd=tmp_path,
                          env=_env(MSMEMSCOPE_HOME=str(h), PYTHONPATH=str(BUILD / "python")),
                          capture_output=True, text=True, timeout=300)


def test_python_config_does_not_run_another_users_probe_helper(home, tmp_path):
    h, marker = home
    chown_tree(h, NOBODY)
    p = _python(h, tmp_path, """\
        import msmemscope
        try:
            msmemscope.config(device="cpu", output="out")
        except ValueError as e:
            print(e)
    """)
    assert p.returncode == 0, p.stderr
    assert p.stdout == ("msmemscope.config: --data-format: the 'csv' sink plugin was not found "
                        "(available sinks: none found)\n")
    assert not marker.exists()


def test_python_session_and_offline_refuse_another_users_host_binary(home, tmp_path):
    # The plugins are root's (config() validates), only the host binary is not.
    h, marker = home
    shutil.copy2(BUILD / "lib" / "msmemscope" / "msmemscope-plugin-probe", h / "lib" / "msmemscope")  # the real one
    os.chown(h / "bin" / "msmemscope.bin", NOBODY, NOBODY)
    (tmp_path / "dump.csv").write_text("ID,Event,Event Type,Name,Timestamp(ns),Process Id,Thread Id,Device Id,Ptr,"
                                       "Attr,Call Stack(Python),Call Stack(C)\n")
    p = _python(h, tmp_path, """\
        import msmemscope
        msmemscope.config(device="cpu", output="out")
        for f in (msmemscope.start, lambda: msmemscope.analyze("decompose", "dump.csv")):
            try:
                f()
            except RuntimeError as e:
                print(e)
    """)
    assert p.returncode == 0, p.stderr
    refusal = (f"msmemscope: the host binary {h}/bin/msmemscope.bin is refused: not loaded as root: "
               f"{h}/bin/msmemscope.bin belongs to user id {NOBODY}, not root")
    assert p.stdout.splitlines() == [refusal, refusal]
    assert not marker.exists()
    assert not (tmp_path / "out").exists() or os.listdir(tmp_path / "out") == []  # nothing created before the check


def _planted_library(path, marker, tmp_path):
    """A shared library whose constructor creates `marker`."""
    src = tmp_path / "planted.c"
    src.write_text(textwrap.dedent(f"""\
        #include <stdio.h>
        __attribute__((constructor)) static void planted(void) {{
            FILE* f = fopen("{marker}", "w");
            if (f) fclose(f);
        }}
    """))
    path.unlink(missing_ok=True)
    subprocess.run(["cc", "-shared", "-fPIC", "-o", str(path), str(src)], check=True, timeout=120)


def test_python_session_refuses_another_users_agent(home, tmp_path):
    # Host binary and plugins root's (the real ones), the agent another user's.
    h, marker = home
    shutil.copy2(BUILD / "lib" / "msmemscope" / "msmemscope-plugin-probe", h / "lib" / "msmemscope")
    shutil.copy2(BUILD / "bin" / "msmemscope.bin", h / "bin" / "msmemscope.bin")
    agent = h / "lib" / "msmemscope" / "libmsmemscope_agent.so"
    _planted_library(agent, marker, tmp_path)
    # positive control: the planted library does create the marker when loaded
    ctl = tmp_path / "control.so"
    _planted_library(ctl, tmp_path / "control_ran", tmp_path)
    subprocess.run(["/usr/bin/python3", "-c", f"import ctypes; ctypes.CDLL('{ctl}')"], check=True, timeout=60)
    assert (tmp_path / "control_ran").exists()
    os.chown(agent, NOBODY, NOBODY)
    p = _python(h, tmp_path, """\
        import msmemscope
        msmemscope.config(device="cpu", output="out")
        try:
            msmemscope.start()
        except RuntimeError as e:
            print(e)
        from msmemscope import _msmemscope as ext
        try:
            ext.load_agent(msmemscope._session.AGENT)  # the package's own native check, under it
        except RuntimeError as e:
            print(e)
    """)
    assert p.returncode == 0, p.stderr
    why = f"not loaded as root: {agent} belongs to user id {NOBODY}, not root"
    assert p.stdout.splitlines() == [f"msmemscope: the msmemscope agent {agent} is refused: {why}",
                                     f"the msmemscope agent {agent} is refused: {why}"]
    assert not marker.exists()
    assert not (tmp_path / "out").exists() or os.listdir(tmp_path / "out") == []


def test_heap_hooks_of_another_user_are_not_loaded(tmp_path):
    tmp = tmp_path.resolve()
    marker = tmp / "planted_ran"
    hook = tmp / "hooks" / "libmsms_host_heap_hook.so"
    hook.parent.mkdir()
    _planted_library(hook, marker, tmp)
    os.chown(hook, NOBODY, NOBODY)
    code = textwrap.dedent(f"""\
        import msmemscope
        from msmemscope import _msmemscope as ext
        ext.load_agent(msmemscope._session.AGENT)
        try:
            ext.install_heap_hooks("{hook}", "_msmemscope")
        except RuntimeError as e:
            print(e)
    """)
    p = subprocess.run(["/usr/bin/python3", "-c", code], cwd=tmp, env=_env(PYTHONPATH=str(BUILD / "python")),
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    assert p.stdout == (f"the heap hook library {hook} is refused: not loaded as root: {hook} belongs to user id "
                        f"{NOBODY}, not root\n")
    assert not marker.exists()


@pytest.mark.parametrize("owner", [0, NOBODY], ids=["root_control", "nobody"])
def test_the_python_package_booted_in_python_processes_is_checked(tmp_path, owner):
    # The CLI puts <prefix>/python first on every Python process's path
    # (framework/host/launcher.cpp): as root, a package file another user
    # owns refuses the package (Python runs without the Python-side
    # collectors) and its code never runs.
    tmp = tmp_path.resolve()
    prefix = tmp / "prefix"
    for sub in ("bin", "lib", "python"):
        shutil.copytree(BUILD / sub, prefix / sub, symlinks=True)
    marker = tmp / "planted_ran"
    boot = prefix / "python" / "msmemscope" / "_boot.py"
    boot.write_text(f"open({str(marker)!r}, 'w').close()\ndef run(here):\n    pass\n")
    os.chown(boot, owner, owner)
    p = subprocess.run([str(prefix / "bin" / "msmemscope"), "--device=cpu", "--analysis=", "--output", str(tmp / "out"),
                        "--", "/usr/bin/python3", "-c", "print('program ran')"], cwd=tmp, env=_env(),
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0 and "program ran" in p.stdout, p.stderr
    refusal = (f"msmemscope: warning: the msmemscope Python package is refused: not loaded as root: {boot} belongs to "
               f"user id {NOBODY}, not root; Python processes run without the Python-side collectors\n")
    if owner == 0:
        assert marker.exists() and "Python package is refused" not in p.stderr
    else:
        assert not marker.exists()
        assert refusal in p.stderr, p.stderr


@pytest.mark.parametrize("mode,owner,why", [
    (0o777, 0, "{out} is writable by all users"),
    (0o1777, 0, "{out} is writable by all users"),
    (0o755, NOBODY, "{out} belongs to user id 65534, not root"),
], ids=["world_writable", "sticky", "other_owner"])
def test_an_output_folder_another_user_can_write_is_refused(tmp_path, mode, owner, why):
    # (issue #29 item 4) as root, a --output another user owns or can write
    # is refused before the program runs: that user could swap a process
    # folder for a link at its predictable name while root writes.
    tmp = tmp_path.resolve()
    out = tmp / "shared"
    out.mkdir()
    os.chown(out, owner, owner)
    out.chmod(mode)
    marker = tmp / "program_ran"
    p = subprocess.run([str(CLI), "--device=cpu", "--output", str(out), "--", "/usr/bin/touch", str(marker)],
                       cwd=tmp, env=_env(), capture_output=True, text=True, timeout=120)
    assert p.returncode == 2, p.stderr
    assert (f"msmemscope: error: --output: '{out}' is not safe for a run as root: {why.format(out=out)}; give a "
            "folder that only root can write\n") in p.stderr, p.stderr
    assert not marker.exists() and os.listdir(out) == []
    # a root-only folder below it, or in a sticky /tmp, is fine
    if owner == 0 and mode & 0o1000:
        own = out / "mine"
        own.mkdir(mode=0o755)
        p = subprocess.run([str(CLI), "--device=cpu", "--analysis=", "--output", str(own), "--", "/usr/bin/touch",
                            str(marker)], cwd=tmp, env=_env(), capture_output=True, text=True, timeout=120)
        assert p.returncode == 0, p.stderr
        assert marker.exists()
