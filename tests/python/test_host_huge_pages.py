"""The host's malloc in transparent huge pages (issue #30): the host starts
with glibc.malloc.hugetlb=1 in GLIBC_TUNABLES (bin/msmemscope adds it before
it executes the host binary; run directly, the host executes itself once more
with it) and puts the user's GLIBC_TUNABLES back before it starts anything,
so the profiled program's environment is exactly the user's
(util/host_process.h)."""
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from conftest import BUILD

# The program: what it sees, and whether an ancestor (the host) was started
# the second time (its initial environment, /proc/PID/environ, holds the
# saved user value; glibc may rewrite GLIBC_TUNABLES itself there).
PROBE = r"""
import os
seen = os.environ.get("GLIBC_TUNABLES", "<unset>")
marker = "MSMEMSCOPE_HOST_TUNABLES" in os.environ
host = False
pid = os.getppid()
while pid > 1:
    try:
        env = open(f"/proc/{pid}/environ", "rb").read().split(b"\0")
        stat = open(f"/proc/{pid}/stat").read()
    except OSError:
        break
    if any(e.startswith(b"MSMEMSCOPE_HOST_TUNABLES=") for e in env):
        host = True
    pid = int(stat.rsplit(")", 1)[1].split()[1])
print(f"seen={seen} marker={marker} host_tuned={host}")
"""


def thp_available():
    try:
        return "[never]" not in Path("/sys/kernel/mm/transparent_hugepage/enabled").read_text()
    except OSError:
        return False


def run_probe(cli, tmp_path, env):
    script = tmp_path / "probe.py"
    script.write_text(PROBE)
    p = cli(["--device=cpu", "--analysis=", f"--output={tmp_path / 'out'}", "--", "/usr/bin/python3", str(script)],
            tmp_path, env=env, check_rc=0)
    return next(line for line in p.stdout.splitlines() if line.startswith("seen="))


@pytest.fixture
def no_user_tunables(monkeypatch):
    monkeypatch.delenv("GLIBC_TUNABLES", raising=False)
    monkeypatch.delenv("MSMEMSCOPE_HUGE_PAGES", raising=False)


def test_the_program_sees_no_tunables_when_the_user_set_none(cli, tmp_path, no_user_tunables):
    line = run_probe(cli, tmp_path, None)
    want_host = "True" if thp_available() else "False"
    assert line == f"seen=<unset> marker=False host_tuned={want_host}"


def test_the_program_sees_the_users_tunables_unchanged(cli, tmp_path, no_user_tunables):
    line = run_probe(cli, tmp_path, {"GLIBC_TUNABLES": "glibc.malloc.check=0"})
    want_host = "True" if thp_available() else "False"
    assert line == f"seen=glibc.malloc.check=0 marker=False host_tuned={want_host}"


def test_the_users_own_choice_and_the_switch_are_kept(cli, tmp_path, no_user_tunables):
    # a user who chose hugetlb already: left as it is, no second start
    line = run_probe(cli, tmp_path, {"GLIBC_TUNABLES": "glibc.malloc.hugetlb=0"})
    assert line == "seen=glibc.malloc.hugetlb=0 marker=False host_tuned=False"
    # MSMEMSCOPE_HUGE_PAGES=0: not asked for
    off = tmp_path / "off"
    off.mkdir()
    assert run_probe(cli, off, {"MSMEMSCOPE_HUGE_PAGES": "0"}) == "seen=<unset> marker=False host_tuned=False"


# The command (bin/msmemscope, a shell script) makes the same choice before it
# executes the host binary, so that the host starts once instead of twice
# (issue #30: a start costs ~10 ms on a VM). A stand-in msmemscope.bin beside
# a copy of the script prints what it was given.
FAKE_BIN = """#!/bin/sh
printf 'tunables=%s saved=%s\\n' "${GLIBC_TUNABLES-<unset>}" "${MSMEMSCOPE_HOST_TUNABLES-<unset>}"
"""


def wrapper_sees(tmp_path, env_changes, prefix=""):
    d = tmp_path / "bin"
    d.mkdir(exist_ok=True)
    shutil.copy(BUILD / "bin" / "msmemscope", d / "msmemscope")
    (d / "msmemscope.bin").write_text(FAKE_BIN)
    (d / "msmemscope.bin").chmod(0o755)
    env = {k: v for k, v in os.environ.items() if k not in ("GLIBC_TUNABLES", "MSMEMSCOPE_HUGE_PAGES", "MSMEMSCOPE_HOST_TUNABLES")}
    env.update(env_changes)
    p = subprocess.run(["/bin/bash", "-c", prefix + f'exec "{d}/msmemscope" --version'], env=env,
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 0 and p.stderr == "", p.stderr
    return p.stdout.strip()


def test_the_command_decides_for_the_host(tmp_path):
    if not thp_available():
        assert wrapper_sees(tmp_path, {}) == "tunables=<unset> saved=<unset>"
        return
    assert wrapper_sees(tmp_path, {}) == "tunables=glibc.malloc.hugetlb=1 saved=-"
    assert wrapper_sees(tmp_path, {"GLIBC_TUNABLES": "glibc.malloc.check=0"}) == \
        "tunables=glibc.malloc.check=0:glibc.malloc.hugetlb=1 saved==glibc.malloc.check=0"
    assert wrapper_sees(tmp_path, {"GLIBC_TUNABLES": ""}) == "tunables=glibc.malloc.hugetlb=1 saved=="


def test_the_command_leaves_what_it_must_not_choose(tmp_path):
    # the user's own choice, the switch, and an address-space limit (there
    # the host decides, and chooses nothing)
    assert wrapper_sees(tmp_path, {"GLIBC_TUNABLES": "glibc.malloc.hugetlb=0"}) == \
        "tunables=glibc.malloc.hugetlb=0 saved=<unset>"
    assert wrapper_sees(tmp_path, {"MSMEMSCOPE_HUGE_PAGES": "0"}) == "tunables=<unset> saved=<unset>"
    assert wrapper_sees(tmp_path, {}, prefix="ulimit -v 8000000; ") == "tunables=<unset> saved=<unset>"


def test_the_host_binary_run_directly_decides_itself(tmp_path, no_user_tunables):
    # msmemscope.bin started without the command: its own second start
    script = tmp_path / "probe.py"
    script.write_text(PROBE)
    p = subprocess.run([str(BUILD / "bin" / "msmemscope.bin"), "--device=cpu", "--analysis=",
                        f"--output={tmp_path / 'out'}", "--", "/usr/bin/python3", str(script)],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    line = next(line for line in p.stdout.splitlines() if line.startswith("seen="))
    want_host = "True" if thp_available() else "False"
    assert line == f"seen=<unset> marker=False host_tuned={want_host}"
