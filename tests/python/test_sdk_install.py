"""cmake --install: the binary, the agent, the built-in plugins, the SDK
headers and the CMake package land under a prefix; the prefix still works
after it is moved elsewhere (everything is found relative to the binary)."""
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from conftest import BUILD, SOURCE, DUMP_HEADER, dump_files, process_dirs, read_dump


def install(tmp_path):
    """Installs the build tree into tmp_path/staging, then moves it to
    tmp_path/moved/prefix; returns the moved prefix."""
    staging = tmp_path / "staging"
    p = subprocess.run(["cmake", "--install", str(BUILD), "--prefix", str(staging)],
                       capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stdout + p.stderr
    moved = tmp_path / "moved" / "prefix"
    moved.parent.mkdir()
    shutil.move(str(staging), str(moved))
    return moved


def clean_env():
    e = dict(os.environ)
    for k in ("LD_PRELOAD", "MSMEMSCOPE_HOME", "MSMEMSCOPE_PLUGIN_PATH"):
        e.pop(k, None)
    return e


@pytest.fixture(scope="module")
def prefix(tmp_path_factory):
    return install(tmp_path_factory.mktemp("install"))


def test_layout(prefix):
    for rel in ["bin/msmemscope", "bin/msmemscope-conformance",
                "lib/msmemscope/libmsmemscope_agent.so",
                "lib/msmemscope/plugins/libmsmemscope_plugin_csv.so",
                "lib/msmemscope/plugins/libmsmemscope_plugin_host_heap.so",
                "lib/msmemscope/agent/libmsms_host_heap_hook.so",
                "include/msmemscope/abi.h", "include/msmemscope/plugin.hpp",
                "include/msmemscope/agent.h", "include/msmemscope/testing.hpp",
                "lib/cmake/msmemscope/msmemscopeConfig.cmake",
                "lib/cmake/msmemscope/msmemscopeConfigVersion.cmake",
                "lib/cmake/msmemscope/msmemscopeTargets.cmake",
                "lib/cmake/msmemscope/msmemscopePlugin.cmake",
                "lib/cmake/msmemscope/msmemscope_plugin.map",
                "share/msmemscope/examples/peak_analyzer/CMakeLists.txt",
                "share/doc/msmemscope/SDK.md"]:
        assert (prefix / rel).is_file(), rel
    # Every plugin the build tree has is installed (test fixtures excepted).
    built = sorted(p.name for p in (BUILD / "lib" / "msmemscope" / "plugins").glob("libmsmemscope_plugin_*.so"))
    installed = sorted(p.name for p in (prefix / "lib" / "msmemscope" / "plugins").glob("libmsmemscope_plugin_*.so"))
    assert installed == built
    built_agent = sorted(p.name for p in (BUILD / "lib" / "msmemscope" / "agent").glob("*.so"))
    installed_agent = sorted(p.name for p in (prefix / "lib" / "msmemscope" / "agent").glob("*.so"))
    assert installed_agent == built_agent
    # Nothing of the build tree leaks into the package's paths.
    for f in (prefix / "lib" / "cmake" / "msmemscope").glob("*.cmake"):
        assert str(BUILD) not in f.read_text(), f


def test_installed_package_has_its_bytecode(prefix):
    # compiled by the install itself (bindings/CMakeLists.txt), still current
    # after the prefix moved (test_python_bytecode.py: why)
    from test_python_bytecode import stale_bytecode
    assert stale_bytecode(prefix / "python" / "msmemscope") == []


def test_moved_prefix_finds_its_plugins(prefix, tmp_path):
    p = subprocess.run([str(prefix / "bin" / "msmemscope"), "--list-plugins"], capture_output=True, text=True,
                       env=clean_env(), cwd=tmp_path, timeout=120)
    assert p.returncode == 0, p.stderr
    rows = [line.split() for line in p.stdout.splitlines()[1:] if not line.startswith("refused")]
    assert not [line for line in p.stdout.splitlines() if line.startswith("refused")], p.stdout
    paths = {r[0]: r[3] for r in rows}
    assert "csv" in paths and "host_heap" in paths
    plugin_dir = os.path.realpath(prefix / "lib" / "msmemscope" / "plugins")
    for name, path in paths.items():
        assert os.path.dirname(os.path.realpath(path)) == plugin_dir, (name, path)


def test_moved_prefix_profiles_a_program(prefix, tmp_path):
    out = tmp_path / "out"
    p = subprocess.run([str(prefix / "bin" / "msmemscope"), "--device=cpu", "--events=alloc,free", "--analysis=",
                        f"--output={out}", "--", "/bin/ls", "/"],
                       capture_output=True, text=True, env=clean_env(), cwd=tmp_path, timeout=300)
    assert p.returncode == 0, p.stdout + p.stderr
    dirs = process_dirs(out)
    assert dirs
    rows = read_dump(dump_files(dirs[0])[0])
    assert any(r["Event"] == "MALLOC" and r["Event Type"] == "HOST" for r in rows)


def test_version_and_package_version(prefix):
    p = subprocess.run([str(prefix / "bin" / "msmemscope"), "--version"], capture_output=True, text=True,
                       env=clean_env(), timeout=60)
    m = re.fullmatch(r"msmemscope (\d+\.\d+\.\d+)\n", p.stdout)
    assert m, p.stdout
    text = (prefix / "lib" / "cmake" / "msmemscope" / "msmemscopeConfigVersion.cmake").read_text()
    assert f'set(PACKAGE_VERSION "{m.group(1)}")' in text


def test_find_package_gives_targets_and_functions(prefix, tmp_path):
    """A minimal consumer: find_package, the targets, the functions, and a
    version that is too new is refused."""
    src = tmp_path / "consumer"
    src.mkdir()
    (src / "CMakeLists.txt").write_text(
        "cmake_minimum_required(VERSION 3.18)\n"
        "project(consumer LANGUAGES CXX)\n"
        "find_package(msmemscope CONFIG REQUIRED)\n"
        "foreach(t msmemscope::sdk msmemscope::agent)\n"
        "  if(NOT TARGET ${t})\n    message(FATAL_ERROR \"no ${t}\")\n  endif()\n"
        "endforeach()\n"
        "if(NOT COMMAND msmemscope_add_plugin OR NOT COMMAND msmemscope_add_agent_library)\n"
        "  message(FATAL_ERROR \"no functions\")\nendif()\n"
        "message(STATUS \"msmemscope ${msmemscope_VERSION} conformance=${msmemscope_CONFORMANCE_EXECUTABLE}\")\n"
        "find_package(msmemscope 99 CONFIG QUIET)\n"
        "message(STATUS \"v99 found=${msmemscope_FOUND}\")\n")
    p = subprocess.run(["cmake", "-S", str(src), "-B", str(tmp_path / "b"), f"-DCMAKE_PREFIX_PATH={prefix}"],
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stdout + p.stderr
    assert f"conformance={prefix}/bin/msmemscope-conformance" in p.stdout
    assert "v99 found=0" in p.stdout
