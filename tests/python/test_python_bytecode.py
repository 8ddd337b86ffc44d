"""The Python package ships its bytecode (issue #30): under the CLI every
Python process of a run imports the package at its start, and where it may
not write __pycache__ (PYTHONDONTWRITEBYTECODE, an installation another user
owns) it compiled all of its source each time (~25 ms a process). The build
tree and `cmake --install` compile it once; each module's cached bytecode is
the one Python takes: same magic, timestamp-checked, matching the source's
mtime and size."""
import importlib.util
import os
import struct
import subprocess
from pathlib import Path

from conftest import BUILD


def stale_bytecode(package: Path):
    """Modules of `package` (recursively) whose bytecode for this Python is
    missing or would be recompiled: [(module path, why)]."""
    out = []
    for src in sorted(package.rglob("*.py")):
        pyc = Path(importlib.util.cache_from_source(str(src)))
        if not pyc.is_file():
            out.append((str(src.relative_to(package)), "no bytecode"))
            continue
        head = pyc.read_bytes()[:16]
        st = src.stat()
        magic, flags, mtime, size = head[:4], *struct.unpack("<III", head[4:16])
        if magic != importlib.util.MAGIC_NUMBER:
            out.append((str(src.relative_to(package)), "another Python's bytecode"))
        elif flags != 0 or mtime != (int(st.st_mtime) & 0xFFFFFFFF) or size != (st.st_size & 0xFFFFFFFF):
            out.append((str(src.relative_to(package)), "bytecode of another version of the source"))
    return out


def test_the_build_tree_has_current_bytecode():
    # (for the Python the build is configured for: /usr/bin/python3, the tests')
    assert stale_bytecode(BUILD / "python" / "msmemscope") == []


def test_the_package_is_not_compiled_at_start(tmp_path):
    # Python asked not to write bytecode, as in a folder it cannot write:
    # every module of the package comes from the shipped bytecode (a source
    # compiled here would leave a code object whose file is the .py read by
    # the compiler; a cached one is loaded by SourceFileLoader.get_code
    # without calling source_to_code).
    probe = tmp_path / "probe.py"
    probe.write_text(
        "import importlib.machinery as m\n"
        "compiled = []\n"
        "orig = m.SourceFileLoader.source_to_code\n"
        "def spy(self, data, path, *a, **k):\n"
        "    compiled.append(path)\n"
        "    return orig(self, data, path, *a, **k)\n"
        "m.SourceFileLoader.source_to_code = spy\n"
        "import msmemscope, msmemscope._boot, msmemscope._step_on, msmemscope._torch\n"
        "print('compiled', sorted(p for p in compiled if '/msmemscope/' in p))\n")
    env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1", PYTHONPATH=str(BUILD / "python"))
    p = subprocess.run(["/usr/bin/python3", str(probe)], capture_output=True, text=True, env=env, timeout=120)
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip() == "compiled []"
