"""What a Python process loads at its start under the CLI (issue #30): the
boot (msmemscope/_boot.py) imports the package in every Python process of a
run, before the program's first line. Only the session, what it starts and
the small describer and tracer load then; the API, hooks, watcher, --step-on's
module and
config()'s validator (with the CLI's libraries: boost, yaml-cpp, spdlog,
libdw) load when the program first uses them, as the same objects."""
import subprocess

from conftest import BUILD, run_cli

# Loaded at the start: the boot, the session and the collectors it starts.
BOOT = {"msmemscope", "msmemscope._after_import", "msmemscope._boot", "msmemscope._collect",
        "msmemscope._msmemscope", "msmemscope._paths", "msmemscope._session", "msmemscope._shared",
        "msmemscope.describe", "msmemscope.tracer"}
# Loaded when first used.
LATER = {"msmemscope._api", "msmemscope._hooks", "msmemscope.watcher", "msmemscope._cuda", "msmemscope._torch_cuda", "msmemscope._watch_protocol",
         "msmemscope._step_on", "msmemscope._msmemscope_config", "msmemscope.analyzer"}
HOST_LIBS = ("libboost_filesystem", "libyaml-cpp", "libspdlog", "libdw")

SHOW = ("import sys\n"
        "mods = sorted(m for m in sys.modules if m.startswith('msmemscope'))\n"
        "maps = open('/proc/self/maps').read()\n"
        "libs = sorted({l for l in %r if l in maps})\n"
        "print('MODS', ' '.join(mods))\n"
        "print('LIBS', ' '.join(libs) or '-')\n" % (HOST_LIBS,))


def shown(stdout):
    lines = dict(line.split(" ", 1) for line in stdout.splitlines() if line.startswith(("MODS ", "LIBS ")))
    return set(lines["MODS"].split()), lines["LIBS"].strip()


def test_the_start_loads_only_what_the_boot_needs(tmp_path):
    prog = tmp_path / "show.py"
    prog.write_text(SHOW)
    p = run_cli(["--device=cpu", "--call-stack=python", "--analysis=leaks,decompose", "--aggregate",
                 "--sinks=html", f"--output-path={tmp_path / 'out'}", "--", "/usr/bin/python3", prog],
                tmp_path, check_rc=0)
    mods, libs = shown(p.stdout)
    assert mods == BOOT, p.stdout
    assert libs == "-", f"config()'s libraries were loaded at the start: {libs}"


def test_step_on_loads_its_module_only_when_given(tmp_path):
    prog = tmp_path / "show.py"
    prog.write_text("def train():\n    pass\n" + SHOW)
    p = run_cli(["--device=cpu", "--step-on=__main__:train", "--aggregate", "--sinks=html",
                 f"--output-path={tmp_path / 'out'}", "--", "/usr/bin/python3", prog], tmp_path, check_rc=0)
    mods, _ = shown(p.stdout)
    assert mods == BOOT | {"msmemscope._step_on"}, p.stdout


def test_the_api_loads_when_used_as_the_same_objects(tmp_path):
    prog = tmp_path / "api.py"
    prog.write_text(
        "import sys, msmemscope\n"
        "assert not {m for m in %r if m in sys.modules}, sorted(sys.modules)\n"
        "from msmemscope import config, watcher\n"
        "import msmemscope._api as api, msmemscope._hooks as hooks\n"
        "assert config is api.config and msmemscope.config is api.config\n"
        # one use binds all of the API: a later msmemscope.stop() in a traced region imports nothing
        "assert {'start', 'stop', 'step', 'take_snapshot'} <= set(vars(msmemscope))\n"
        "assert msmemscope.RecordFunction is api.RecordFunction\n"
        "assert msmemscope.init_framework_hooks is hooks.init_framework_hooks\n"
        "assert watcher is sys.modules['msmemscope.watcher'] and msmemscope.watcher is watcher\n"
        "assert msmemscope.describe.describer and msmemscope.tracer.start\n"
        "assert msmemscope.check_leaks is sys.modules['msmemscope.analyzer'].check_leaks\n"
        "assert set(msmemscope.__all__) <= set(dir(msmemscope))\n"
        "ns = {}\n"
        "exec('from msmemscope import *', ns)\n"
        "assert set(msmemscope.__all__) <= set(ns), set(msmemscope.__all__) - set(ns)\n"
        "try:\n"
        "    msmemscope.no_such_name\n"
        "except AttributeError as e:\n"
        "    print('ERR', e)\n" % (LATER,))
    env = {"PYTHONPATH": str(BUILD / "python"), "PATH": "/usr/bin:/bin"}
    p = subprocess.run(["/usr/bin/python3", str(prog)], capture_output=True, text=True, env=env, timeout=120)
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip() == "ERR module 'msmemscope' has no attribute 'no_such_name'"


def test_config_loads_the_validator_and_refuses_as_the_cli_does(tmp_path):
    prog = tmp_path / "cfg.py"
    prog.write_text(
        "import sys, msmemscope\n"
        "assert 'msmemscope._msmemscope_config' not in sys.modules\n"
        "try:\n"
        "    msmemscope.config(device='cpu', events='alloc,nonsense')\n"
        "except ValueError as e:\n"
        "    print('ERR', e)\n"
        "print('LOADED', 'msmemscope._msmemscope_config' in sys.modules)\n")
    env = {"PYTHONPATH": str(BUILD / "python"), "PATH": "/usr/bin:/bin"}
    p = subprocess.run(["/usr/bin/python3", str(prog)], capture_output=True, text=True, env=env, timeout=120)
    assert p.returncode == 0, p.stderr
    cli = run_cli(["--device=cpu", "--events=alloc,nonsense", "--", "/bin/true"], tmp_path, check_rc=2)
    # The same rule and words, each named as its caller wrote it.
    allowed = "invalid value 'nonsense' (allowed: alloc, free, launch, access, traceback, none)"
    assert f"ERR msmemscope.config: events: {allowed}" in p.stdout.splitlines(), p.stdout
    assert "LOADED True" in p.stdout
    assert cli.stderr.strip() == f"msmemscope: error: --events: {allowed}"
