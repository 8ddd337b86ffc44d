"""Issue #28 items 5 and 6.

Item 5: `source msmemscope --load-api-env` / `--unload-api-env` as upstream's
`cli_base` smoke cases check them (in our own words): bin/msmemscope is a
shell script that, sourced, puts msmemscope's hook libraries on LD_PRELOAD and
its library folder on LD_LIBRARY_PATH in the calling shell, removes exactly
those again, refuses to be run for them, and otherwise execs the host binary
beside it (bin/msmemscope.bin) unchanged.

Item 6: the Python package finds its prefix (plugins, agent, host) through its
own real folder, also when it is reached through a symlink."""
import os
import shutil
import signal
import subprocess
import textwrap
import time

import pytest

from conftest import BUILD, TEST_BIN, dump_files, process_dirs
from test_upstream_dump_check import check_dump

WRAPPER = BUILD / "bin" / "msmemscope"
HOST = BUILD / "bin" / "msmemscope.bin"
LIB = os.path.realpath(BUILD / "lib" / "msmemscope")
HOOKS = [f"{LIB}/agent/libmsms_{n}_hook.so" for n in ("hal", "mstx", "kernel_launch", "cuda")]


def _env(**extra):
    e = {k: v for k, v in os.environ.items()
         if k not in ("LD_PRELOAD", "LD_LIBRARY_PATH", "MSMEMSCOPE_HOME", "PYTHONPATH", "MSMEMSCOPE_SESSION")}
    e.update(extra)
    return e


def bash(script, env=None, cwd=None):
    p = subprocess.run(["bash", "-c", script], env=env or _env(), cwd=cwd, capture_output=True, text=True, timeout=60)
    return p


def values(stdout):
    out = {}
    for line in stdout.splitlines():
        k, eq, v = line.partition("=")
        if eq and k in ("PRELOAD", "LIBS", "SET"):
            out[k] = v
    return out


SHOW = 'echo "PRELOAD=${LD_PRELOAD-<unset>}"; echo "LIBS=${LD_LIBRARY_PATH-<unset>}"; echo "SET=$(set | grep -c "^_msms")"'


def test_wrapper_and_host_binary_are_built():
    assert WRAPPER.read_text().startswith("#!/bin/bash\n")
    assert os.access(WRAPPER, os.X_OK) and os.access(HOST, os.X_OK)
    assert HOST.read_bytes()[:4] == b"\x7fELF"
    for h in HOOKS:
        assert os.path.isfile(h), h


def test_executed_instead_of_sourced_is_an_error():
    for opt in ("--load-api-env", "--unload-api-env"):
        for cmd in ([str(WRAPPER), opt], ["bash", str(WRAPPER), opt], ["sh", str(WRAPPER), opt]):
            p = subprocess.run(cmd, env=_env(), capture_output=True, text=True, timeout=60)
            assert p.returncode == 2, (cmd, p.returncode, p.stderr)
            assert p.stdout == ""
            assert p.stderr == (f"msmemscope: error: {opt} must be sourced (from bash or zsh), so that it changes the "
                                f"calling shell's environment: source {cmd[-2]} {opt}\n"), cmd


def test_load_sets_exactly_our_entries():
    p = bash(f'unset LD_PRELOAD LD_LIBRARY_PATH; source "{WRAPPER}" --load-api-env; echo "rc=$?"; {SHOW}')
    assert p.returncode == 0, p.stderr
    assert p.stderr == ""
    assert p.stdout.splitlines()[0] == (f"msmemscope: API environment loaded: LD_PRELOAD and LD_LIBRARY_PATH name {LIB} "
                                        "(undo: source msmemscope --unload-api-env)")
    assert "rc=0" in p.stdout.splitlines()
    v = values(p.stdout)
    assert v["PRELOAD"] == ":".join(HOOKS)
    assert v["LIBS"] == LIB
    assert v["SET"] == "0"  # no helper variables or functions left in the shell


def test_load_keeps_the_users_entries_and_is_idempotent():
    p = bash(f'export LD_PRELOAD=/opt/other/hook.so LD_LIBRARY_PATH=/usr/local/lib:/opt/x/lib64; '
             f'source "{WRAPPER}" --load-api-env >/dev/null; source "{WRAPPER}" --load-api-env; {SHOW}; '
             f'env | grep -E "^LD_(PRELOAD|LIBRARY_PATH)=" | sort')
    assert p.returncode == 0, p.stderr
    lines = p.stdout.splitlines()
    assert lines[0] == f"msmemscope: the API environment was already loaded ({LIB})"
    v = values(p.stdout)
    assert v["PRELOAD"] == ":".join(HOOKS + ["/opt/other/hook.so"])
    assert v["LIBS"] == f"{LIB}:/usr/local/lib:/opt/x/lib64"
    # exported: children see them
    assert f"LD_PRELOAD={v['PRELOAD']}" in lines and f"LD_LIBRARY_PATH={v['LIBS']}" in lines


def test_unload_removes_exactly_our_entries():
    # upstream's case: ours first, a user's own entries after (and between).
    pre = f"{HOOKS[2]}:{HOOKS[1]}:/opt/other/hook.so:{LIB}/libmsmemscope_agent.so:/opt/more.so"
    libs = f"{LIB}:/usr/local/lib:{LIB}x:/opt/cann/lib64"
    p = bash(f'export LD_PRELOAD="{pre}" LD_LIBRARY_PATH="{libs}"; source "{WRAPPER}" --unload-api-env; '
             f'echo "rc=$?"; {SHOW}')
    assert p.returncode == 0, p.stderr
    assert p.stdout.splitlines()[0] == (f"msmemscope: API environment unloaded: {LIB} removed from LD_PRELOAD and "
                                        "LD_LIBRARY_PATH")
    v = values(p.stdout)
    assert v["PRELOAD"] == "/opt/other/hook.so:/opt/more.so"
    assert v["LIBS"] == f"/usr/local/lib:{LIB}x:/opt/cann/lib64"  # a look-alike folder is the user's
    assert v["SET"] == "0"


def test_load_then_unload_restores_the_shell():
    p = bash(f'export LD_PRELOAD=/opt/other/hook.so; unset LD_LIBRARY_PATH; source "{WRAPPER}" --load-api-env >/dev/null; '
             f'source "{WRAPPER}" --unload-api-env >/dev/null; {SHOW}; source "{WRAPPER}" --unload-api-env')
    assert p.returncode == 0, p.stderr
    v = values(p.stdout)
    assert v["PRELOAD"] == "/opt/other/hook.so" and v["LIBS"] == "<unset>"
    assert p.stdout.splitlines()[-1] == (f"msmemscope: the API environment was not loaded: nothing of {LIB} in "
                                         "LD_PRELOAD or LD_LIBRARY_PATH")
    # only ours: the variables are unset, not left empty
    p = bash(f'unset LD_PRELOAD LD_LIBRARY_PATH; source "{WRAPPER}" --load-api-env >/dev/null; '
             f'source "{WRAPPER}" --unload-api-env >/dev/null; {SHOW}')
    v = values(p.stdout)
    assert v["PRELOAD"] == "<unset>" and v["LIBS"] == "<unset>"


def test_sourced_through_a_symlink_on_path(tmp_path):
    # `source msmemscope` finds the file on PATH; a symlink there resolves to the real tree.
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "msmemscope").symlink_to(WRAPPER)
    (tmp_path / "lib" / "msmemscope" / "agent").mkdir(parents=True)  # a decoy beside the link: not used
    env = _env(PATH=f"{tmp_path}/bin:{os.environ['PATH']}")
    p = bash(f'unset LD_PRELOAD LD_LIBRARY_PATH; cd /; source msmemscope --load-api-env >/dev/null; {SHOW}', env=env)
    assert p.returncode == 0, p.stderr
    v = values(p.stdout)
    assert v["PRELOAD"] == ":".join(HOOKS) and v["LIBS"] == LIB


def test_sourced_with_other_arguments_is_an_error():
    p = bash(f'source "{WRAPPER}" --version; echo "rc=$?"')
    assert "rc=2" in p.stdout.splitlines()
    assert p.stderr == ("msmemscope: error: sourced, msmemscope takes --load-api-env or --unload-api-env "
                        "(got '--version'); run it to profile a program\n")


def test_python_api_under_the_loaded_environment(tmp_path):
    # The hook libraries preloaded the upstream way: the package's own session still works.
    (tmp_path / "s.py").write_text(textwrap.dedent("""\
        import ctypes, msmemscope
        msmemscope.config(device="cpu", output="out", events="alloc,free", analysis="")
        msmemscope.start()
        b = ctypes.create_string_buffer(1 << 20)
        msmemscope.stop()
        print("api ok")
    """))
    env = _env(PYTHONPATH=str(BUILD / "python"))
    p = bash(f'source "{WRAPPER}" --load-api-env >/dev/null && /usr/bin/python3 s.py', env=env, cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    assert "api ok" in p.stdout and "events: " in p.stdout and ", dropped: 0" in p.stdout
    [d] = process_dirs(tmp_path / "out")
    [dump] = dump_files(d)
    check_dump(dump)  # upstream's dump_csv_check (issue #28 item 10)


def test_normal_run_through_the_wrapper(tmp_path):
    # Arguments and output as the binary's own; the exit status is the program's.
    p = subprocess.run([str(WRAPPER), "--device=cpu", f"--output={tmp_path}/out", "--", str(TEST_BIN / "demo_train")],
                       cwd=tmp_path, env=_env(), capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    assert "demo: trained 8 steps" in p.stdout and "events: 60, dropped: 0" in p.stdout
    [d] = process_dirs(tmp_path / "out")
    [dump] = dump_files(d)
    check_dump(dump)  # upstream's dump_csv_check (issue #28 item 10)
    p = subprocess.run([str(WRAPPER), "--device=cpu", f"--output={tmp_path}/out", "--", "sh", "-c", "exit 3"],
                       cwd=tmp_path, env=_env(), capture_output=True, text=True, timeout=300)
    assert p.returncode == 3, p.stderr
    v = subprocess.run([str(WRAPPER), "--version"], env=_env(), capture_output=True, text=True, timeout=60)
    h = subprocess.run([str(HOST), "--version"], env=_env(), capture_output=True, text=True, timeout=60)
    assert (v.returncode, v.stdout, v.stderr) == (h.returncode, h.stdout, h.stderr)
    assert v.stdout.startswith("msmemscope ")


def test_the_wrapper_execs_the_host_in_its_own_process(tmp_path):
    # exec, not a child: the pid the caller holds is the host's, so signals reach it directly.
    p = subprocess.Popen([str(WRAPPER), "--device=cpu", f"--output={tmp_path}/out", "--", "sleep", "30"],
                         cwd=tmp_path, env=_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        exe = ""
        for _ in range(300):
            try:
                exe = os.readlink(f"/proc/{p.pid}/exe")
            except OSError:
                pass
            if exe == str(HOST):
                break
            time.sleep(0.05)
        assert exe == str(HOST)
        p.send_signal(signal.SIGTERM)
        out, err = p.communicate(timeout=120)
        # the signal went to the host itself (what it makes of it is its own business, not the wrapper's)
        assert p.returncode != 0, (out, err)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()


def test_the_wrapper_names_no_other_binary(tmp_path):
    # Neither PATH nor MSMEMSCOPE_HOME chooses what the wrapper runs.
    marker = tmp_path / "ran"
    fake = tmp_path / "home" / "bin"
    fake.mkdir(parents=True)
    for name in ("msmemscope.bin", "msmemscope"):
        (fake / name).write_text(f"#!/bin/sh\ntouch {marker}\n")
        (fake / name).chmod(0o755)
    env = _env(PATH=f"{fake}:{os.environ['PATH']}", MSMEMSCOPE_HOME=str(tmp_path / "home"))
    p = subprocess.run([str(WRAPPER), "--version"], env=env, capture_output=True, text=True, timeout=60)
    assert p.returncode == 0 and p.stdout.startswith("msmemscope "), p.stderr
    assert not marker.exists()


# ---------------------------------------------------------------- item 6
def test_package_reached_through_a_symlink(tmp_path):
    pk = tmp_path / "pk"
    pk.mkdir()
    (pk / "msmemscope").symlink_to(BUILD / "python" / "msmemscope")
    (tmp_path / "s.py").write_text(textwrap.dedent("""\
        import ctypes, msmemscope, msmemscope._paths as p
        print("PREFIX=" + p.PREFIX)
        print("FILE=" + msmemscope.__file__)
        msmemscope.config(device="cpu", output="out", events="alloc,free", analysis="")
        msmemscope.start()
        b = ctypes.create_string_buffer(1 << 20)
        msmemscope.stop()
        print("api ok")
    """))
    p = subprocess.run(["/usr/bin/python3", "s.py"], cwd=tmp_path, env=_env(PYTHONPATH=str(pk)),
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    lines = p.stdout.splitlines()
    assert f"PREFIX={os.path.realpath(BUILD)}" in lines
    assert f"FILE={pk}/msmemscope/__init__.py" in lines  # imported through the link
    assert "api ok" in lines and "events: " in p.stdout


def test_package_folder_reached_through_a_symlinked_parent(tmp_path):
    # run_st.sh's layout: output/python -> <build>/python
    (tmp_path / "output").mkdir()
    (tmp_path / "output" / "python").symlink_to(BUILD / "python")
    code = ("import msmemscope, msmemscope._paths as p; print(p.PREFIX); "
            "msmemscope.config(device='cpu', data_format='csv'); print('config ok')")
    p = subprocess.run(["/usr/bin/python3", "-c", code], cwd=tmp_path,
                       env=_env(PYTHONPATH=str(tmp_path / "output" / "python")),
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    assert p.stdout.splitlines() == [os.path.realpath(BUILD), "config ok"]


def test_sourcing_under_set_eu():
    # A strict calling shell (set -eu) is neither ended nor tripped by the script.
    p = bash(f'set -eu; unset LD_PRELOAD LD_LIBRARY_PATH; source "{WRAPPER}" --load-api-env >/dev/null; '
             f'source "{WRAPPER}" --unload-api-env >/dev/null; source "{WRAPPER}" --unload-api-env >/dev/null; '
             f'source "{WRAPPER}" --bogus 2>/dev/null || echo "rc=$?"; {SHOW}')
    assert p.returncode == 0, p.stderr
    assert p.stdout.splitlines()[0] == "rc=2"
    v = values(p.stdout)
    assert v["PRELOAD"] == "<unset>" and v["LIBS"] == "<unset>" and v["SET"] == "0"


@pytest.mark.skipif(shutil.which("zsh") is None, reason="zsh is not installed (Debian: zsh); bash is tested above")
def test_sourced_from_zsh(tmp_path):
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "msmemscope").symlink_to(WRAPPER)
    env = _env(PATH=f"{tmp_path}/bin:{os.environ['PATH']}", LD_PRELOAD="/opt/other/hook.so")
    show = 'echo "PRELOAD=${LD_PRELOAD-<unset>}"; echo "LIBS=${LD_LIBRARY_PATH-<unset>}"'
    p = subprocess.run(["zsh", "-f", "-c", f"cd /; source msmemscope --load-api-env >/dev/null; {show}; "
                                           f"source msmemscope --unload-api-env >/dev/null; {show}"],
                       env=env, capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    assert p.stdout.splitlines() == [f"PRELOAD={':'.join(HOOKS)}:/opt/other/hook.so", f"LIBS={LIB}",
                                     "PRELOAD=/opt/other/hook.so", "LIBS=<unset>"]
    p = subprocess.run(["zsh", "-f", "-c", f'"{WRAPPER}" --load-api-env'], env=env, capture_output=True, text=True,
                       timeout=60)
    assert p.returncode == 2 and "--load-api-env must be sourced (from bash or zsh)" in p.stderr
