"""Issue #29 item 8: `pip install .` builds outside the source tree, and the
installed package carries the plugin SDK, so that a plugin team can build
against a pip install: the headers, the CMake package (find_package(msmemscope)
with CMAKE_PREFIX_PATH pointing into the install) and `msmemscope-conformance`
on the environment's PATH.

Offline, as the README says (Debian 12: a venv with --system-site-packages,
pip --no-index --no-build-isolation). To keep CI fast the build reuses this
build tree's outputs (MSMEMSCOPE_BUILD_DIR); setup.py writes nothing into the
source tree either way (its CMake build tree, setuptools' build folder and the
egg-info live in a temporary folder)."""
import os
import re
import shutil
import subprocess

import pytest

from conftest import BUILD, SOURCE

# In the checkout, beside the project's own build/ (the README's set-up makes it):
# the plugin's build tree is its own folder's.
README_RECIPE = ('cmake -S my_plugin -B my_plugin/build '
                 '-DCMAKE_PREFIX_PATH="$(msmemscope-conformance --cmake-prefix-path)"')


def _env(venv=None):
    e = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "LD_PRELOAD", "MSMEMSCOPE_HOME",
                                                           "MSMEMSCOPE_PLUGIN_PATH", "CMAKE_PREFIX_PATH")}
    e["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    if venv is not None:
        # As an activated venv: its bin/ first on PATH.
        e["PATH"] = f"{venv / 'bin'}:{e.get('PATH', '/usr/bin:/bin')}"
        e["VIRTUAL_ENV"] = str(venv)
    return e


def _git(src, *args):
    return subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", "-c", "commit.gpgsign=false",
                           *args], cwd=src, capture_output=True, text=True, check=True, timeout=300).stdout


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """A copy of the checkout as its own git repository (committed, so that
    `git status --ignored` shows anything the install adds, ignored or not),
    pip-installed into a fresh venv; returns (tmp, src, venv, git status after)."""
    tmp = tmp_path_factory.mktemp("pip_sdk")
    src = tmp / "src"
    shutil.copytree(SOURCE, src, ignore=shutil.ignore_patterns("build*", ".git", "*.egg-info", "__pycache__",
                                                               ".pytest_cache"))
    _git(src, "init", "-q")
    _git(src, "add", "-A")
    _git(src, "commit", "-q", "-m", "copy")
    assert _git(src, "status", "--porcelain", "--ignored") == ""
    manifest = BUILD / "install_manifest.txt"
    manifest_before = (manifest.read_bytes(), manifest.stat().st_mtime_ns) if manifest.exists() else None
    venv = tmp / "v"
    subprocess.run(["/usr/bin/python3", "-m", "venv", "--system-site-packages", str(venv)], check=True)
    env = _env()
    env["MSMEMSCOPE_BUILD_DIR"] = str(BUILD)
    p = subprocess.run([str(venv / "bin" / "pip"), "install", "--no-index", "--no-build-isolation", "."],
                       cwd=src, env=env, capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    # The build tree it was given, as it was (CMake's install step rewrote
    # its install_manifest.txt; setup.py puts it back).
    manifest_after = (manifest.read_bytes(), manifest.stat().st_mtime_ns) if manifest.exists() else None
    assert manifest_after == manifest_before
    return tmp, src, venv, _git(src, "status", "--porcelain", "--ignored")


def test_pip_install_writes_nothing_into_the_source_tree(installed):
    # Before #29 item 8: "!! build/" (build/pip-setuptools) and "!! msmemscope.egg-info/".
    _, _, _, status = installed
    assert status == ""


def test_installed_package_carries_the_sdk(installed):
    _, _, venv, _ = installed
    conformance = venv / "bin" / "msmemscope-conformance"
    assert conformance.exists() and os.access(conformance, os.X_OK)
    p = subprocess.run([str(conformance), "--cmake-prefix-path"], env=_env(venv), capture_output=True, text=True,
                       timeout=60)
    assert p.returncode == 0, p.stderr
    prefix = p.stdout.strip()
    assert prefix.startswith(str(venv / "lib")) and prefix.endswith("site-packages/msmemscope/_prefix"), prefix
    for rel in ["include/msmemscope/abi.h", "include/msmemscope/plugin.hpp", "include/msmemscope/testing.hpp",
                "include/msmemscope/agent.h",
                "lib/cmake/msmemscope/msmemscopeConfig.cmake", "lib/cmake/msmemscope/msmemscopeConfigVersion.cmake",
                "lib/cmake/msmemscope/msmemscopeTargets.cmake", "lib/cmake/msmemscope/msmemscopePlugin.cmake",
                "bin/msmemscope-conformance",
                "share/msmemscope/examples/peak_analyzer/CMakeLists.txt"]:
        assert os.path.isfile(os.path.join(prefix, rel)), rel


def test_plugin_team_builds_and_checks_a_plugin_against_the_pip_install(installed, test_bin):
    """The README's recipe, run as written in a checkout that has the
    project's own build/ (the README's set-up makes it; a recipe that named
    -B build failed there): the SDK example built against the venv
    (CMAKE_PREFIX_PATH from msmemscope-conformance --cmake-prefix-path), then
    checked by the venv's own msmemscope-conformance, found on PATH."""
    tmp, _, venv, _ = installed
    env = _env(venv)
    checkout = tmp / "checkout"
    shutil.copytree(SOURCE / "sdk" / "examples" / "peak_analyzer", checkout / "my_plugin")
    (checkout / "build").mkdir()
    shutil.copy(BUILD / "CMakeCache.txt", checkout / "build" / "CMakeCache.txt")
    p = subprocess.run(["bash", "-c", README_RECIPE], cwd=checkout, env=env, capture_output=True, text=True,
                       timeout=300)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    pb = checkout / "my_plugin" / "build"
    p = subprocess.run(["cmake", "--build", "my_plugin/build", "-j2"], cwd=checkout, env=env, capture_output=True,
                       text=True, timeout=600)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    cache = (pb / "CMakeCache.txt").read_text()
    # The package found is the pip install's, not the build tree or a system one.
    assert f"msmemscope_DIR:PATH={venv}/lib/" in cache and "site-packages/msmemscope/_prefix/lib/cmake/msmemscope" in cache
    assert (pb / "libmsmemscope_plugin_my_peak.so").exists()
    assert shutil.which("msmemscope-conformance", path=env["PATH"]) == str(venv / "bin" / "msmemscope-conformance")
    p = subprocess.run(["msmemscope-conformance", "my_plugin/build/libmsmemscope_plugin_my_peak.so"], cwd=checkout,
                       env=env, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "ok    load: analyzer 'my_peak' 1.0.0" in p.stdout
    assert "1 plugin(s): 1 passed, 0 failed" in p.stdout
    # The plugin runs under the pip-installed command too, as the README runs it.
    p = subprocess.run(["msmemscope", "--plugin-path=my_plugin/build", "--analysis=my_peak", "--device=cpu",
                        f"--output={tmp / 'out'}", "--", str(test_bin / "demo_train")], cwd=checkout, env=env,
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stdout + p.stderr
    assert re.search(r"^my_peak: step 1: HOST \d", p.stdout, re.M), p.stdout + p.stderr


def test_readme_has_the_plugin_team_recipe():
    text = (SOURCE / "README.md").read_text()
    assert README_RECIPE in text
    assert "msmemscope-conformance my_plugin/build/libmsmemscope_plugin_my_peak.so" in text
    assert "msmemscope --plugin-path=my_plugin/build --analysis=my_peak --device=cpu -- ./your_program" in text
