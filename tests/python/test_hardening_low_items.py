"""#29 item 9: the low items of the second hardening round, each with a test
that fails without its fix (one test per item; the file is shared by them)."""
import os
import subprocess
import sys
import textwrap

from conftest import BUILD


def _py(body, tmp_path, env=None):
    e = dict(os.environ)
    e.pop("LD_PRELOAD", None)
    e.pop("MSMEMSCOPE_SESSION", None)
    e["PYTHONPATH"] = str(BUILD / "python")
    e.update(env or {})
    return subprocess.run([sys.executable, "-c", textwrap.dedent(body)], cwd=str(tmp_path), env=e,
                          capture_output=True, text=True, timeout=300)


def test_python_plugin_options_accept_a_list_as_yaml_does(tmp_path):
    # YAML's plugins.options takes a list (its items joined by ','); config()
    # raised TypeError on the same value.
    p = _py("""
        import msmemscope, msmemscope._session as s
        msmemscope.config(plugin_options={"memory_viz": {"max_trace_entries": [1000]}})
        print(s._check_plugin_options({"frag": {"pools": ["PTA", "HOST"]}, "frag.steps": (1, 2)}))
        print([o for o in s._cli_options() if o.startswith("--plugin-option")])
        try:
            s._check_plugin_options({"frag": {"pools": [["PTA"]]}})
        except TypeError as e:
            print("nested:", e)
    """, tmp_path)
    assert p.returncode == 0, p.stderr
    lines = p.stdout.splitlines()
    assert lines[0] == "{'frag': {'pools': 'PTA,HOST', 'steps': '1,2'}}"
    assert lines[1] == "['--plugin-option=memory_viz.max_trace_entries=1000']"
    assert lines[2].startswith("nested: msmemscope.config: plugin_options: 'frag.pools[0]' must be a str, int or "
                               "bool, got list"), lines[2]
