"""A collector's own pool (issue #29 item 7): a collector that records its
blocks as Event Type MSMS_T_CUSTOM_POOL_FIRST with the Attr pool:MYPOOL has
them named MYPOOL everywhere -- the CSV's Event Type, the summary, leaks'
"Direct MYPOOL leak" line (not "Pytorch Caching memory pool ... in
kernel_0"), decompose's owners -- and counted in process_used.
Fixture: tests/fixtures/custom_pool."""
import re

from conftest import BUILD, dump_files, log_messages, process_dirs, read_dump

FIXTURE = BUILD / "tests" / "lib" / "custom_pool"


def test_a_collectors_own_pool_is_named_and_counted(cli, tmp_path):
    out = tmp_path / "out"
    p = cli(["--plugin-path", str(FIXTURE), "--device=cpu", "--events=alloc,free", "--analysis=leaks,decompose",
             "--output", str(out), "--", FIXTURE / "custom_pool_program"], cwd=tmp_path, check_rc=0)
    lines = p.stdout.splitlines()
    assert "custom_pool_program: done 1" in lines
    # leaks: the block kept from step 3 (steps 0 and 1 are warm-up).
    direct = [line for line in lines if line.startswith("Direct ")]
    assert len(direct) == 1, p.stdout
    assert re.fullmatch(r"Direct MYPOOL leak of 0\.011719 Mb\(s\) at 0x[0-9a-f]+ at step 3\.", direct[0]), direct
    assert "======= MYPOOL Gap Analysis of Device cpu =======" in lines
    assert "Pytorch" not in p.stdout and "CUSTOM_POOL" not in p.stdout + p.stderr
    # The summary's pool line and decompose's owner, under the pool's name.
    assert "  cpu/MYPOOL: peak 16.0 KiB, final 12.0 KiB" in lines, p.stdout
    owner = [line.split() for line in lines if line.strip().startswith("MYPOOL@blocks ")]
    assert owner == [["MYPOOL@blocks", "12288", "16384", "6"]], p.stdout
    # The CSV: Event Type MYPOOL; process_used moves with the pool's bytes.
    procdir, = process_dirs(out)
    rows = read_dump(dump_files(procdir)[0])
    pool = [r for r in rows if r["Event Type"] == "MYPOOL" and r["attr"].get("shadow") != "true"]
    assert [r["Event"] for r in pool].count("MALLOC") == 6 and [r["Event"] for r in pool].count("FREE") == 5
    prev = None
    for r in pool:
        used, process_used = int(r["attr"]["used"]), int(r["attr"]["process_used"])
        assert process_used >= used, r
        if prev is not None:
            delta = int(r["attr"]["size"]) * (1 if r["Event"] == "MALLOC" else -1)
            assert process_used - prev == delta, (r, prev)
        prev = process_used
    kept = next(r for r in pool if r["Event"] == "MALLOC" and r["attr"]["size"] == "12288")
    assert int(kept["attr"]["process_used"]) >= 16384


def test_a_collector_without_its_target_library_costs_only_itself(cli, tmp_path):
    """The collector's plugin shipped without its libmsms_*.so: the run goes
    on without that collector (the program runs, the host heap is
    recorded) and ends with 71, as for any plugin that cannot be loaded. It
    stopped the run before the program started (exit 2)."""
    import shutil
    lonely = tmp_path / "plugins"
    lonely.mkdir()
    shutil.copy(FIXTURE / "libmsmemscope_plugin_custom_pool.so", lonely)
    out = tmp_path / "out"
    p = cli(["--plugin-path", str(lonely), "--device=cpu", "--events=alloc,free", "--analysis=leaks",
             "--output", str(out), "--", FIXTURE / "custom_pool_program"], cwd=tmp_path)
    assert p.returncode == 71, p.stdout + p.stderr
    dropped = (f"collector 'custom_pool': its target library libmsms_custom_pool_hook.so was not found next to "
               f"{lonely / 'libmsmemscope_plugin_custom_pool.so'}; running without it")
    assert p.stderr.splitlines().count(f"msmemscope: error: {dropped}") == 1, p.stderr
    # Said before the process's log existed: the log has it too, before its
    # first line of its own.
    said = [m for _, m in log_messages(process_dirs(out)[0])]
    assert said.count(f"[error] {dropped}") == 1, said
    first_own = next(i for i, m in enumerate(said) if m.startswith("[info] profiling pid "))
    assert said.index(f"[error] {dropped}") < first_own, said
    assert "custom_pool_program: done 1" in p.stdout.splitlines(), p.stdout
    assert re.search(r"^  cpu/HOST: peak ", p.stdout, re.M), p.stdout
    assert "MYPOOL" not in p.stdout, p.stdout


SILENT = BUILD / "tests" / "lib" / "silent_collector"


def test_a_third_party_collector_that_cannot_run_without_the_cli_is_an_error(tmp_path):
    """Python API, no CLI (issue #29 item 7): a selected third-party collector
    whose target library interposes nothing would record nothing; start()
    says so, naming the library, instead of ignoring it."""
    import os
    import subprocess
    import sys
    script = tmp_path / "script.py"
    script.write_text(
        "import msmemscope\n"
        f"msmemscope.config(plugin_path=[{str(SILENT)!r}], device='cpu', events='alloc,free', analysis='',\n"
        f"                  output={str(tmp_path / 'out')!r})\n"
        "try:\n"
        "    msmemscope.start()\n"
        "except RuntimeError as e:\n"
        "    print('refused:', e)\n"
        "else:\n"
        "    print('started')\n"
        "    msmemscope.stop()\n")
    env = dict(os.environ)
    for k in ("LD_PRELOAD", "MSMEMSCOPE_SESSION", "MSMEMSCOPE_PLUGIN_PATH"):
        env.pop(k, None)
    env["PYTHONPATH"] = str(BUILD / "python")
    p = subprocess.run([sys.executable, str(script)], cwd=str(tmp_path), env=env, capture_output=True, text=True,
                       timeout=300)
    assert p.returncode == 0, p.stdout + p.stderr
    lib = SILENT / "libmsms_silent_hook.so"
    refused = [line for line in p.stdout.splitlines() if line.startswith(("refused:", "started"))]
    assert refused == [
        f"refused: msmemscope: the collector library {lib} exports no function to interpose; without the CLI it "
        "would record nothing: run the program under the CLI (msmemscope --plugin-path=... -- python ...)"], p.stdout
