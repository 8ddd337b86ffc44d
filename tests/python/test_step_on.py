"""--step-on (issue #27 item 6): a program that never calls optimizer.step()
or msmemscope.step() gets steps from the functions it names — every return
of the outermost call ends one — from the command line or the YAML profile,
so an inference loop's growing cache is reported by the per-step leak
analysis with its line, without editing the script.
"""
import re

import pytest

from conftest import CLI, SOURCE, dump_files, process_dirs, run_cli

pytest.importorskip("torch")
PY = "/usr/bin/python3"
PROGS = SOURCE / "tests" / "programs" / "python" / "step_on"
LEAK = r"^Direct Pytorch Caching memory pool leak of 0\.001953 Mb\(s\) at 0x[0-9a-f]+ in kernel_\d+ at step (\d+)\.$"


def env():
    return {"PYTHONPATH": "", "LD_PRELOAD": "", "PATH": "/usr/bin:/bin"}


def step_rows(out):
    """The SYSTEM STEP rows' names of the run's one process."""
    (d,) = process_dirs(out)
    (dump,) = dump_files(d)
    names = []
    with open(dump) as f:
        for line in f:
            if ",SYSTEM,STEP," in line:
                names.append(line.split(",")[3])
    return names


def test_inference_cache_leak_is_reported_with_its_line(tmp_path):
    p = run_cli(["--device=cpu", "--analysis=leaks", "--call-stack=python", "--step-on=__main__:generate_token",
                 "--output=out", "--", PY, PROGS / "infer_cache.py", "6"], tmp_path, env=env(), check_rc=0)
    assert "tokens 6" in p.stdout
    assert step_rows(tmp_path / "out") == ["1", "2", "3", "4", "5", "6"]
    # one cache entry per token; steps 0 and 1 are warm-up: the entries of
    # tokens 3..6 (allocated in steps 2..5) are the leaks, 2 KiB each
    assert [int(s) for s in re.findall(LEAK, p.stdout, re.M)] == [2, 3, 4, 5], p.stdout
    site = re.search(r"^    4 block\(s\), 8192 bytes \(steps 2-5\): allocated by: operator "
                     r"torch\._ops\.aten\.clone\.default, called from (\S+)\((\d+)\): generate_token$", p.stdout, re.M)
    assert site, p.stdout
    assert site.group(1).endswith("infer_cache.py") and site.group(2) == "16"


def test_without_step_on_the_loop_has_no_steps(tmp_path):
    p = run_cli(["--device=cpu", "--analysis=leaks", "--output=out", "--", PY, PROGS / "infer_cache.py", "6"],
                tmp_path, env=env(), check_rc=0)
    assert step_rows(tmp_path / "out") == []
    assert not re.search(LEAK, p.stdout, re.M)


def test_yaml_profile_names_the_step_function(tmp_path):
    (tmp_path / "p.yaml").write_text("device: cpu\nanalysis: leaks\nstep_on: __main__:generate_token\n")
    p = run_cli(["--config", tmp_path / "p.yaml", "--output=out", "--", PY, PROGS / "infer_cache.py", "6"],
                tmp_path, env=env(), check_rc=0)
    assert step_rows(tmp_path / "out") == ["1", "2", "3", "4", "5", "6"]
    assert len(re.findall(LEAK, p.stdout, re.M)) == 4


@pytest.mark.parametrize("spec", ["kvlib:Decoder.step", "kvlib.generate_token"])
def test_a_library_function_or_method(tmp_path, spec):
    # kvlib is imported by the program after the boot: wrapped on import;
    # Decoder.step calls itself once for the first token (one step, not two)
    p = run_cli(["--device=cpu", "--analysis=", f"--step-on={spec}", "--output=out", "--", PY,
                 PROGS / "infer_module.py", "5"], tmp_path, env=dict(env(), PYTHONPATH=str(PROGS)), check_rc=0)
    assert "tokens 6" in p.stdout
    assert step_rows(tmp_path / "out") == ["1", "2", "3", "4", "5"]


def test_a_function_that_does_not_exist_is_named(tmp_path):
    p = run_cli(["--device=cpu", "--analysis=", "--step-on=kvlib:Decoder.nope", "--output=out", "--", PY,
                 PROGS / "infer_module.py", "2"], tmp_path, env=dict(env(), PYTHONPATH=str(PROGS)), check_rc=0)
    assert ("msmemscope: warning: --step-on: 'kvlib:Decoder.nope' is not a function of module kvlib; "
            "no steps from it\n") in p.stderr
    assert step_rows(tmp_path / "out") == []


@pytest.mark.parametrize("value", ["generate", "a.b:", "1a.b:c", "a..b:c", "a.b:c d"])
def test_bad_values_are_refused(tmp_path, value):
    p = run_cli(["--device=cpu", f"--step-on={value}", "--", "/bin/true"], tmp_path, env=env())
    assert p.returncode == 2
    assert p.stderr.endswith(f"msmemscope: error: --step-on: invalid value '{value}' (allowed: module:function or "
                             "module:Class.method, e.g. --step-on=__main__:generate_token)\n"), p.stderr
