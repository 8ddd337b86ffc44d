"""The SDK examples (sdk/examples/*) as a third party would use them: built
out of tree against an installed (and moved) msmemscope prefix with
find_package(msmemscope), then loaded by name through --plugin-path, the
MSMEMSCOPE_PLUGIN_PATH environment variable, YAML (plugins: search_paths /
options) and msmemscope.config(); and checked by the installed
msmemscope-conformance."""
import json
import os
import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from conftest import BUILD, dump_files, process_dirs, read_dump

EXAMPLES = ["peak_analyzer", "ndjson_sink", "pool_collector"]


def clean_env(extra=None):
    e = dict(os.environ)
    for k in ("LD_PRELOAD", "MSMEMSCOPE_HOME", "MSMEMSCOPE_PLUGIN_PATH"):
        e.pop(k, None)
    if extra:
        e.update(extra)
    return e


def run(cmd, cwd=None, env=None, timeout=600, check=True):
    p = subprocess.run([str(c) for c in cmd], cwd=cwd, env=env or clean_env(), capture_output=True, text=True,
                       timeout=timeout)
    if check:
        assert p.returncode == 0, f"{cmd}\nrc={p.returncode}\nstdout:\n{p.stdout}\nstderr:\n{p.stderr}"
    return p


class Sdk:
    def __init__(self, root):
        self.root = root
        staging = root / "staging"
        run(["cmake", "--install", BUILD, "--prefix", staging])
        self.prefix = root / "elsewhere" / "prefix"
        self.prefix.parent.mkdir()
        shutil.move(str(staging), str(self.prefix))
        self.cli = self.prefix / "bin" / "msmemscope"
        self.build = {}
        for name in EXAMPLES:
            # Build the copy that ships in the prefix, as a customer would.
            src = self.prefix / "share" / "msmemscope" / "examples" / name
            b = root / "build" / name
            run(["cmake", "-S", src, "-B", b, f"-DCMAKE_PREFIX_PATH={self.prefix}", "-DCMAKE_BUILD_TYPE=RelWithDebInfo"])
            run(["cmake", "--build", b, "-j2"])
            self.build[name] = b

    def paths(self):
        return [self.build[n] for n in EXAMPLES]


@pytest.fixture(scope="module")
def sdk(tmp_path_factory):
    return Sdk(tmp_path_factory.mktemp("sdk"))


def demo(sdk):
    return sdk.build["pool_collector"] / "mypool_demo"


def only_output(out):
    dirs = process_dirs(out)
    assert len(dirs) == 1, dirs
    return dirs[0]


def ndjson_lines(procdir, pattern="events_*.ndjson"):
    files = sorted(procdir.glob(pattern))
    assert len(files) == 1, list(procdir.iterdir())
    return [json.loads(line) for line in files[0].read_text().splitlines()]


def test_example_plugins_export_only_the_entry(sdk):
    for name, plugin in [("peak_analyzer", "my_peak"), ("ndjson_sink", "ndjson"), ("pool_collector", "my_pool")]:
        so = sdk.build[name] / f"libmsmemscope_plugin_{plugin}.so"
        assert so.is_file(), so
        p = run(["nm", "-D", "--defined-only", so])
        assert [line.split()[-1] for line in p.stdout.splitlines()] == ["msmemscope_plugin"]
    assert (sdk.build["pool_collector"] / "libmsms_my_pool_hook.so").is_file()


def test_example_unit_test_with_sdk_test_doubles(sdk):
    p = run(["ctest", "--test-dir", sdk.build["peak_analyzer"], "--output-on-failure"])
    assert "100% tests passed" in p.stdout


def test_installed_conformance_passes_the_examples(sdk):
    p = run([sdk.prefix / "bin" / "msmemscope-conformance"] + sdk.paths())
    assert p.stdout.splitlines()[-1] == "3 plugin(s): 3 passed, 0 failed"
    assert "FAIL" not in p.stdout


def test_plugin_path_on_the_command_line(sdk, tmp_path):
    out = tmp_path / "out"
    args = [sdk.cli] + [f"--plugin-path={d}" for d in sdk.paths()] + [
        "--device=cpu", "--events=alloc,free", "--analysis=my_peak", "--sinks=ndjson",
        "--plugin-option=my_peak.unit=B", f"--output={out}", "--", demo(sdk)]
    p = run(args, cwd=tmp_path)
    assert "mypool_demo: done" in p.stdout
    steps = [line.strip() for line in p.stdout.splitlines() if line.strip().startswith("my_peak: step ")]
    # weights 8192 B live throughout; activations 1024*s + 2048 in step s.
    for s in (1, 2, 3):
        line = next(x for x in steps if x.startswith(f"my_peak: step {s}: "))
        assert "mypool@weights 8192 B" in line, line
        assert f"mypool@activations {1024 * s + 2048} B" in line, line
    procdir = only_output(out)
    rows = read_dump(dump_files(procdir)[0])
    # The collector's blocks: Event Type PTA on device cpu, with its owner.
    pool = [r for r in rows if r["Event Type"] == "PTA"]
    mallocs = [r for r in pool if r["Event"] == "MALLOC"]
    assert [(r["attr"]["owner"], r["attr"]["size"]) for r in mallocs] == [
        ("mypool@weights", "8192"),
        ("mypool@activations", "1024"), ("mypool@activations", "2048"),
        ("mypool@activations", "2048"), ("mypool@activations", "2048"),
        ("mypool@activations", "3072"), ("mypool@activations", "2048")]
    assert len([r for r in pool if r["Event"] == "FREE"]) == 7
    assert all(r["Device Id"] == "cpu" for r in pool)
    # ndjson: one object per event, the same events as the CSV, in order.
    objs = ndjson_lines(procdir)
    assert [o["id"] for o in objs] == [int(r["ID"]) for r in rows]
    first = next(o for o in objs if o["event"] == "MALLOC" and o["type"] == "PTA")
    assert first["attrs"]["owner"] == "mypool@weights" and first["size"] == 8192 and first["device"] == "cpu"


def test_environment_variable_and_first_option_shorthand(sdk, tmp_path):
    out = tmp_path / "out"
    env = clean_env({"MSMEMSCOPE_PLUGIN_PATH": ":".join(str(d) for d in sdk.paths())})
    p = run([sdk.cli, "--device=cpu", "--events=alloc,free", "--analysis=my_peak:1", "--sinks=ndjson",
             f"--output={out}", "--", demo(sdk)], cwd=tmp_path, env=env)
    steps = [line.strip() for line in p.stdout.splitlines() if line.strip().startswith("my_peak: step ")]
    assert steps, p.stdout
    # top=1 (the ':' argument sets the first option): one owner per step.
    assert all(line.count(",") == 0 for line in steps), steps
    assert ndjson_lines(only_output(out))


def test_yaml_search_paths_and_options(sdk, tmp_path):
    out = tmp_path / "out"
    # Relative search paths are relative to the YAML file.
    links = tmp_path / "conf"
    links.mkdir()
    for name, d in sdk.build.items():
        os.symlink(d, links / name)
    cfg = links / "profile.yaml"
    cfg.write_text(textwrap.dedent(f"""\
        device: cpu
        events: [alloc, free]
        analysis: my_peak
        sinks: ndjson
        output: {out}
        plugins:
          search_paths: [peak_analyzer, ndjson_sink, pool_collector]
          options:
            my_peak: {{top: 2, unit: KiB}}
            ndjson: {{file: run.ndjson, stacks: true}}
        """))
    p = run([sdk.cli, f"--config={cfg}", "--", demo(sdk)], cwd=tmp_path)
    steps = [line.strip() for line in p.stdout.splitlines() if line.strip().startswith("my_peak: step ")]
    # The host heap (malloc under the pool) outweighs the pool's own owners;
    # with top 2 the weights come second and activations are cut.
    line = next(x for x in steps if x.startswith("my_peak: step 1: "))
    assert re.fullmatch(r"my_peak: step 1: HOST \d+\.\d KiB, mypool@weights 8\.0 KiB", line), line
    objs = ndjson_lines(only_output(out), "run.ndjson")
    assert all("c_stack" in o and "py_stack" in o for o in objs)


def test_bad_option_is_refused_with_its_name(sdk, tmp_path):
    p = run([sdk.cli, f"--plugin-path={sdk.build['peak_analyzer']}", "--device=cpu", "--analysis=my_peak",
             "--plugin-option=my_peak.unit=GiB", "--", "/bin/true"], cwd=tmp_path, check=False)
    assert p.returncode == 2
    assert ("msmemscope: error: --plugin-option: my_peak.unit: invalid value 'GiB' (allowed: B, KiB, MiB)"
            in p.stderr.splitlines()), p.stderr
    p = run([sdk.cli, f"--plugin-path={sdk.build['peak_analyzer']}", "--device=cpu", "--analysis=my_peak:0",
             "--", "/bin/true"], cwd=tmp_path, check=False)
    assert p.returncode == 2
    assert "my_peak.top: value 0 out of range (allowed: 1..1000)" in p.stderr, p.stderr


def test_python_config_selects_the_plugins_by_name(sdk, tmp_path):
    env = clean_env({"MSMEMSCOPE_PLUGIN_PATH": ":".join(str(d) for d in sdk.paths())})
    probe = run([sys.executable, "-c", "import msmemscope"], env=env, check=False)
    if probe.returncode != 0:
        why = probe.stderr.strip().splitlines()[-1] if probe.stderr.strip() else "no message"
        pytest.skip(f"the msmemscope Python package is not importable here (bindings not built?): {why}")
    out = tmp_path / "out"
    script = tmp_path / "use_plugins.py"
    script.write_text(textwrap.dedent(f"""\
        import msmemscope
        assert "my_peak" in msmemscope.list_analyzers(), msmemscope.list_analyzers()
        msmemscope.config(device="cpu", events="alloc,free", analysis="my_peak", sinks="ndjson",
                          output={str(out)!r})
        try:
            msmemscope.config(analysis="no_such_peak")
        except ValueError as e:
            print("refused:", e)
        msmemscope.start()
        blocks = [bytearray(4096) for _ in range(8)]
        msmemscope.step()
        del blocks
        msmemscope.stop()
        print("script done")
        """))
    p = run([sys.executable, script], env=env, cwd=tmp_path)
    assert "script done" in p.stdout
    assert "refused:" in p.stdout and "unknown analyzer 'no_such_peak'" in p.stdout, p.stdout
    procdir = only_output(out)
    objs = ndjson_lines(procdir)
    assert any(o["event"] == "SYSTEM" and o["type"] == "STEP" for o in objs)


def test_third_party_profile_loads_the_example_analyzer(sdk, tmp_path):
    """configs/third-party-plugin.yaml, as shipped, against the example built
    where its comment says (sdk/examples/peak_analyzer/build, relative to
    the file)."""
    from conftest import SOURCE
    tree = tmp_path / "tree"
    (tree / "configs").mkdir(parents=True)
    shutil.copy(SOURCE / "configs" / "third-party-plugin.yaml", tree / "configs")
    (tree / "sdk" / "examples" / "peak_analyzer").mkdir(parents=True)
    os.symlink(sdk.build["peak_analyzer"], tree / "sdk" / "examples" / "peak_analyzer" / "build")
    out = tmp_path / "out"
    p = run([sdk.cli, f"--config={tree / 'configs' / 'third-party-plugin.yaml'}", f"--output={out}", "--",
             demo(sdk)], cwd=tmp_path)
    steps = [line.strip() for line in p.stdout.splitlines() if line.strip().startswith("my_peak: step ")]
    assert steps, p.stdout
    # top: 3 and unit: KiB from the profile's plugins.options.
    assert all(line.count(",") <= 2 and "KiB" in line for line in steps), steps
    cfg = json.loads((only_output(out) / "config.json").read_text())
    assert "my_peak" in json.dumps(cfg)


def python_env(sdk, extra=None):
    """The installed (and moved) package, not the build tree's."""
    env = clean_env(extra)
    env["PYTHONPATH"] = str(sdk.prefix / "python")
    return env


def test_installed_python_package_finds_its_prefix_and_plugins(sdk, tmp_path):
    out = tmp_path / "out"
    script = tmp_path / "installed.py"
    script.write_text(textwrap.dedent(f"""\
        import os, msmemscope
        from msmemscope import _session
        assert os.path.dirname(os.path.dirname(msmemscope.__file__)) == {str(sdk.prefix / 'python')!r}, msmemscope.__file__
        assert _session.PREFIX == {str(sdk.prefix)!r}, _session.PREFIX
        assert "leaks" in msmemscope.list_analyzers(), msmemscope.list_analyzers()
        assert "my_peak" not in msmemscope.list_analyzers()
        try:
            msmemscope.config(plugin_options={{"my_peak": {{"unit": "B"}}}})
        except ValueError as e:
            print("refused:", e)
        try:
            msmemscope.config(plugin_path={str(tmp_path / 'no_such_folder')!r})
        except ValueError as e:
            print("refused:", e)
        # (output in the first call that takes effect: as upstream's
        # config(), a later call's output is ignored)
        msmemscope.config(plugin_path=[{str(sdk.build['peak_analyzer'])!r}, {str(sdk.build['ndjson_sink'])!r}],
                          plugin_options={{"my_peak": {{"unit": "B", "top": 2}}}}, output={str(out)!r})
        try:
            msmemscope.config(plugin_options={{"my_peak.unit": "GiB"}})
        except ValueError as e:
            print("refused:", e)
        msmemscope.config(device="cpu", events="alloc,free", analysis="my_peak", sinks="ndjson")
        msmemscope.start()
        blocks = [bytearray(4096) for _ in range(8)]
        msmemscope.step()
        del blocks
        msmemscope.stop()
        print("script done")
        """))
    p = run([sys.executable, script], env=python_env(sdk), cwd=tmp_path)
    assert "script done" in p.stdout, p.stdout + p.stderr
    refused = [line for line in p.stdout.splitlines() if line.startswith("refused: ")]
    assert refused == [
        "refused: msmemscope.config: plugin_options: options for unknown plugin 'my_peak'",
        f"refused: msmemscope.config: plugin_path: '{tmp_path / 'no_such_folder'}' does not exist",
        "refused: msmemscope.config: plugin_options: my_peak.unit: invalid value 'GiB' (allowed: B, KiB, MiB)",
    ], p.stdout
    # The host the package spawned was the installed one, with the plugins.
    objs = ndjson_lines(only_output(out))
    assert any(o["event"] == "SYSTEM" and o["type"] == "STEP" for o in objs)


def test_cli_plugin_path_and_options_reach_a_python_target(sdk, tmp_path):
    """msmemscope.config() inside a program the CLI runs knows the CLI's
    plugin folders and options: naming the CLI's plugin checks out."""
    out = tmp_path / "out"
    script = tmp_path / "under_cli.py"
    script.write_text(textwrap.dedent("""\
        import warnings
        import msmemscope
        from msmemscope import _session
        print("options:", _session._plugin_options)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            msmemscope.config(device="cpu", analysis="my_peak")
            try:
                msmemscope.config(plugin_options={"my_peak": {"unit": "GiB"}})
            except ValueError as e:
                print("refused:", e)
        print("script done")
        """))
    p = run([sdk.cli, f"--plugin-path={sdk.build['peak_analyzer']}", "--device=cpu", "--events=alloc,free",
             "--analysis=my_peak", "--plugin-option=my_peak.unit=B", f"--output={out}", "--", sys.executable,
             script], env=python_env(sdk), cwd=tmp_path)
    assert "script done" in p.stdout, p.stdout + p.stderr
    assert "options: {'my_peak': {'unit': 'B'}}" in p.stdout, p.stdout
    assert ("refused: msmemscope.config: plugin_options: my_peak.unit: invalid value 'GiB' (allowed: B, KiB, MiB)"
            in p.stdout), p.stdout
    assert any(line.strip().startswith("my_peak: step") or line.strip().startswith("my_peak:")
               for line in p.stdout.splitlines()), p.stdout


def test_third_party_collector_runs_under_the_python_api(sdk, tmp_path):
    """Without the CLI (issue #29 item 7): msmemscope.start() loads the
    example collector's hook library from plugin_path and patches the pool's
    callers (a library the script loads afterwards), so its blocks reach the
    host, as under the CLI's LD_PRELOAD; the pool itself still works."""
    src = sdk.prefix / "share" / "msmemscope" / "examples" / "pool_collector"
    pool = sdk.build["pool_collector"]
    user_c = tmp_path / "user.c"
    user_c.write_text(textwrap.dedent("""\
        #include "mypool.h"
        #include <string.h>
        static void* kept;
        int use_pool(void) {
            kept = mypool_alloc(4096, "kept");
            void* t = mypool_alloc(1000, "temp");
            if (!kept || !t) return 0;
            memset(t, 1, 1000);
            mypool_free(t);
            return 1;
        }
        """))
    lib = tmp_path / "libuser.so"
    run(["cc", "-shared", "-fPIC", "-o", lib, user_c, f"-I{src}", f"-L{pool}", "-lmypool", f"-Wl,-rpath,{pool}"])
    out = tmp_path / "out"
    script = tmp_path / "api_collector.py"
    script.write_text(textwrap.dedent(f"""\
        import ctypes, msmemscope
        msmemscope.config(plugin_path=[{str(pool)!r}], device="cpu", events="alloc,free", analysis="",
                          output={str(out)!r})
        msmemscope.start()
        print("use_pool", ctypes.CDLL({str(lib)!r}).use_pool())
        msmemscope.stop()
        print("script done")
        """))
    p = run([sys.executable, script], env=python_env(sdk), cwd=tmp_path)
    assert "use_pool 1" in p.stdout and "script done" in p.stdout, p.stdout + p.stderr
    rows = read_dump(dump_files(only_output(out))[0])
    pool_rows = [r for r in rows if r["Event Type"] == "PTA"]
    mallocs = [(r["attr"]["owner"], r["attr"]["size"]) for r in pool_rows if r["Event"] == "MALLOC"]
    assert mallocs == [("mypool@kept", "4096"), ("mypool@temp", "1000")], pool_rows
    temp = next(r["Ptr"] for r in pool_rows if r["Event"] == "MALLOC" and r["attr"]["owner"] == "mypool@temp")
    assert [r for r in pool_rows if r["Event"] == "FREE" and r["Ptr"] == temp and r["attr"].get("shadow") != "true"]
