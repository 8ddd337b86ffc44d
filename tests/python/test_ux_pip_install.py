"""Issue #19 item 8: `pip install .` into a fresh virtual environment (offline,
Debian 12: --system-site-packages, --no-index --no-build-isolation) installs
the package, the msmemscope binary, the agent and the plugins, and a
`msmemscope` console command that profiles a program.

To keep CI fast the build reuses this build tree's outputs
(MSMEMSCOPE_BUILD_DIR); without it setup.py configures and builds its own."""
import os
import re
import shutil
import subprocess
import sys

import pytest

from conftest import BUILD, SOURCE, TEST_BIN

README_CMD = ("python3 -m venv --system-site-packages v && "
              "v/bin/pip install --no-index --no-build-isolation .")


def _env():
    e = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "LD_PRELOAD", "MSMEMSCOPE_HOME")}
    e["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    return e


def test_readme_shows_the_install_command():
    assert README_CMD in (SOURCE / "README.md").read_text()


def test_pip_install_into_a_fresh_venv(tmp_path):
    # A copy of the checkout (pip builds in the source folder).
    src = tmp_path / "src"
    shutil.copytree(SOURCE, src, ignore=shutil.ignore_patterns("build*", ".git", "*.egg-info", "__pycache__"))
    venv = tmp_path / "v"
    subprocess.run(["/usr/bin/python3", "-m", "venv", "--system-site-packages", str(venv)], check=True)
    env = _env()
    env["MSMEMSCOPE_BUILD_DIR"] = str(BUILD)
    p = subprocess.run([str(venv / "bin" / "pip"), "install", "--no-index", "--no-build-isolation", "."],
                       cwd=src, env=env, capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    # The console command is in the environment and runs the bundled binary.
    exe = venv / "bin" / "msmemscope"
    assert exe.exists()
    env = _env()
    p = subprocess.run([str(exe), "--version"], env=env, capture_output=True, text=True, timeout=60)
    assert p.returncode == 0 and p.stdout.startswith("msmemscope "), p.stderr
    out = tmp_path / "out"
    p = subprocess.run([str(exe), "--device=cpu", f"--output={out}", "--", str(TEST_BIN / "demo_train")],
                       cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    assert "demo: trained 8 steps" in p.stdout and "events: 60, dropped: 0" in p.stdout
    assert "Host memory still allocated at exit on device cpu: 9 block(s), 12124 bytes" in p.stdout
    # The package is the venv's (not the build tree's), and it finds its own binary and agent.
    code = ("import msmemscope, msmemscope._session as s, os; print(msmemscope.__file__); print(s.CLI); "
            "print(os.path.exists(s.AGENT))")
    p = subprocess.run([str(venv / "bin" / "python"), "-c", code], cwd=tmp_path, env=env, capture_output=True,
                       text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    pkg, cli, agent = p.stdout.split("\n")[:3]
    site = str(venv / "lib")
    assert pkg.startswith(site) and cli.startswith(site) and agent == "True", p.stdout
    # A Python program under the console command: the package's collectors start in it.
    (tmp_path / "toy.py").write_text("import msmemscope\nx = [bytearray(1000) for _ in range(10)]\nprint('toy ok')\n")
    p = subprocess.run([str(exe), "--device=cpu", f"--output={tmp_path}/out2", "--", str(venv / "bin" / "python"),
                        "toy.py"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    assert "toy ok" in p.stdout and "cannot load the msmemscope package" not in p.stderr, p.stderr
    # Issue #28 item 5: the command is also a shell script: `source msmemscope
    # --load-api-env` sets (and --unload-api-env removes) the package's own entries.
    lib = os.path.realpath(p_site_prefix(venv)) + "/lib/msmemscope"
    hooks = ":".join(f"{lib}/agent/libmsms_{n}_hook.so" for n in ("hal", "mstx", "kernel_launch", "cuda"))
    show = 'echo "P=${LD_PRELOAD-<unset>}"; echo "L=${LD_LIBRARY_PATH-<unset>}"'
    p = subprocess.run(["bash", "-c", f'export LD_PRELOAD=/opt/own.so; unset LD_LIBRARY_PATH; '
                                      f'source "{exe}" --load-api-env; {show}; source "{exe}" --unload-api-env; {show}'],
                       env=env, capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    assert p.stdout.splitlines() == [
        f"msmemscope: API environment loaded: LD_PRELOAD and LD_LIBRARY_PATH name {lib} "
        "(undo: source msmemscope --unload-api-env)",
        f"P={hooks}:/opt/own.so", f"L={lib}",
        f"msmemscope: API environment unloaded: {lib} removed from LD_PRELOAD and LD_LIBRARY_PATH",
        "P=/opt/own.so", "L=<unset>"], p.stdout + p.stderr
    for cmd in ([str(exe), "--load-api-env"], ["bash", str(exe), "--unload-api-env"]):
        p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=60)
        assert p.returncode == 2 and p.stdout == "", (cmd, p.returncode, p.stdout, p.stderr)
        assert f"{cmd[-1]} must be sourced (from bash or zsh)" in p.stderr, p.stderr
    p = subprocess.run(["bash", str(exe), "--version"], env=env, capture_output=True, text=True, timeout=60)
    assert p.returncode == 0 and p.stdout.startswith("msmemscope "), p.stderr


def p_site_prefix(venv):
    """The package's _prefix inside the venv's site-packages."""
    found = list((venv / "lib").glob("python3*/site-packages/msmemscope/_prefix"))
    assert len(found) == 1, found
    return found[0]
