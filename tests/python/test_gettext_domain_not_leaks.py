"""A C program's one-time libc set-up is not its leak: the message-catalog
domain that every coreutils program names at its start (setlocale, then
bindtextdomain and textdomain, which libc keeps until exit).

A user's `bash user.sh` runs such programs (`dirname "$0"`); with C stacks
each one's row in the run's table read `leaked 44 B`: `1 block(s), 34 bytes,
allocated at: set_binding_values.part.0+0x1bf at ./intl/bindtextdom.c:203 in
.../libc.so.6` and `1 block(s), 10 bytes, allocated at: textdomain+0xb8 at
./intl/textdomain.c:94 in .../libc.so.6`, next to the locale tables that the
built-in list already took out."""
import json
import re
import shutil

import pytest

from conftest import process_dirs, run_cli
from sinks_common import only

DIRNAME = shutil.which("dirname")


@pytest.mark.skipif(DIRNAME is None, reason="no dirname (coreutils) on this machine")
def test_dirname_with_c_stacks_leaks_nothing(tmp_path):
    p = run_cli(["--device=cpu", "--call-stack=c", f"--output={tmp_path}/out", "--", DIRNAME, "/a/b"],
                tmp_path, env={"LANG": "C.UTF-8"}, check_rc=0)
    assert "/a\n" in p.stdout
    assert "still allocated at exit" not in p.stdout, p.stdout
    assert re.search(r"^  \d+ allocation site\(s\) suppressed on device cpu \(\d+ block\(s\), \d+ bytes\): \d+ by the "
                     r"built-in list of one-time set-up", p.stdout, re.M), p.stdout
    leaks = json.loads((only(process_dirs(tmp_path / "out")) / "summary.json").read_text())["leaks"]
    assert (leaks["bytes"], leaks["allocations"]) == (0, 0), leaks
