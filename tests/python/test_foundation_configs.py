"""Every YAML profile in configs/ loads and validates (run against /bin/true)."""
from pathlib import Path

import pytest

from conftest import SOURCE, run_cli

# third-party-plugin.yaml needs the SDK's example analyzer built first; it
# is run against that build in test_sdk_examples.py.
CONFIGS = sorted(p for p in (SOURCE / "configs").glob("*.yaml") if p.name != "third-party-plugin.yaml")


def test_there_are_profiles():
    assert len(CONFIGS) >= 5


@pytest.mark.parametrize("path", CONFIGS, ids=[p.name for p in CONFIGS])
def test_profile_loads_and_runs(path, tmp_path):
    p = run_cli(["--config", path, f"--output={tmp_path}/out", "--", "/bin/true"], cwd=tmp_path)
    stderr = p.stderr
    # An npu/cuda profile on a machine without that driver: the run is said to
    # have collected nothing (issue #19 item 6), with the fix.
    nothing = "msmemscope: error: nothing was collected: no process recorded any memory\n"
    if p.returncode == 70 and nothing in stderr:
        assert "driver" in stderr and "run with --device=cpu" in stderr, stderr
        stderr = stderr.replace(nothing, "")
    else:
        assert p.returncode == 0, p.stderr
    assert "error" not in stderr.replace("log_level: error", ""), p.stderr


def test_yaml_errors_name_file_line_and_key(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("device: cpu\nevnts: [alloc]\nlevel: 3\n")
    p = run_cli(["--config", bad, "--", "/bin/true"], cwd=tmp_path, check_rc=2)
    assert p.stderr.splitlines()[0] == f"msmemscope: error: {bad}:2: unknown key 'evnts'; did you mean 'events'?"
    p = run_cli(["--config", tmp_path / "missing.yaml", "--", "/bin/true"], cwd=tmp_path, check_rc=2)
    assert f"msmemscope: error: {tmp_path}/missing.yaml: cannot read the file\n" in p.stderr
    bad.write_text("level: 3\n")
    p = run_cli(["--config", bad, "--", "/bin/true"], cwd=tmp_path, check_rc=2)
    assert f"msmemscope: error: {bad}:1: level: invalid value '3' (allowed: op, kernel, op,kernel; 0 = op, 1 = kernel)\n" in p.stderr


def test_command_line_overrides_yaml(tmp_path):
    y = tmp_path / "p.yaml"
    y.write_text("device: gpu\n")
    # the bad YAML value is overridden by the command line, so no error
    p = run_cli(["--config", y, "--device=cpu", "--analysis=", f"--output={tmp_path}/o", "--", "/bin/true"],
                cwd=tmp_path, check_rc=0)


def test_command_line_overrides_yaml_exact_values(tmp_path):
    """What the run used (its config.json): each option the command line gives is the
    command line's value, whole (a call stack or a plugin option is replaced, not merged);
    each the YAML alone gives is the YAML's."""
    import json
    y = tmp_path / "p.yaml"
    y.write_text("device: gpu\ncall_stack: c:5\nlevel: kernel\nevents: [alloc, launch]\nanalysis: leaks\n"
                 "plugins:\n  options:\n    leaks: {max_lines: 7, start_index: 2}\n")
    run_cli(["--config", y, "--device=cpu", "--call-stack=python:3", "--analysis=",
             "--plugin-option=leaks.max_lines=9", f"--output={tmp_path}/o", "--", "/bin/true"],
            cwd=tmp_path, check_rc=0)
    (cfg,) = sorted((tmp_path / "o").glob("msmemscope_*/config.json"))
    c = json.loads(cfg.read_text())
    assert c["device"] == ["cpu"]                 # command line
    assert c["call_stack"] == {"python": 3}       # command line, not merged with the YAML's c:5
    assert c["analysis"] == []                    # command line
    assert c["level"] == "kernel"                 # YAML only
    assert c["written_events"] == ["alloc", "launch"]  # YAML only (what --events writes)
    assert c["plugin_options"]["leaks"]["max_lines"] == "9"    # command line
    assert c["plugin_options"]["leaks"]["start_index"] == "2"  # YAML only
