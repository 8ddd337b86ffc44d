"""Each msmemscope.config() call starts from the defaults, as upstream's code
does (COMPAT §8: ConfigManager::SetConfig builds the new configuration with
GetConfigAfterInit, from ClientParser::InitialConfig, keeping only output,
data_format and watch of the one before). Before, ours kept every key of
every earlier call.

1. A key an earlier call set and this call does not name goes back to its
   default, and a warning names it with the value it had.
2. output, data_format and watch are kept, and taken from the first call
   only: named in any later call (also when the first did not set them),
   they are ignored with a warning, as upstream's config() ignores them.
3. Between two ranges the keys the session fixed keep its values (the reset
   does not trip the rule that refuses a change of analysis or device); a
   range key whose default needs other collectors than the session runs is
   refused, naming that key as the one left out. A range key going back
   to a value that does what the one before did is no change (no warning,
   no START_TRACE Attr).
4. Under the CLI the command line's options apply: a config() call resets
   none of them (ours differs from upstream's here: config()'s values are
   checked, not used)."""
import subprocess
import textwrap

from conftest import CLI, clean_env, dump_files, parse_attr, process_dirs, read_dump

PY = "/usr/bin/python3"
ONCE_WHY = "output, data_format and watch are taken only from the first config() call, as upstream's config() does"
WHY = ("each config() call starts from the defaults, keeping only output, data_format and watch, as upstream's "
       "config() does")


def run(tmp_path, body, cli=None):
    script = tmp_path / "script.py"
    script.write_text(textwrap.dedent(body))
    cmd = [PY, str(script)]
    if cli is not None:
        cmd = [str(CLI)] + cli + [f"--output={tmp_path / 'out'}", "--"] + cmd
    p = subprocess.run(cmd, cwd=str(tmp_path), env=clean_env(), capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, f"stdout:\n{p.stdout}\nstderr:\n{p.stderr}"
    return p, script


def warned(p):
    return [line[len("WARN "):] for line in p.stdout.splitlines() if line.startswith("WARN ")]


def mallocs_of(tmp_path, size):
    (procdir,) = process_dirs(tmp_path / "out")
    rows = read_dump(dump_files(procdir)[0])
    return [r for r in rows if r["Event"] == "MALLOC" and parse_attr(r["Attr"]).get("size") == str(size)]


# Records the warnings of the calls it wraps, one "WARN text" line each.
RECORD = """\
import contextlib, warnings
import msmemscope

@contextlib.contextmanager
def recorded():
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        yield
    for x in w:
        print("WARN", x.message)
"""


def test_a_key_the_next_call_does_not_name_goes_back_to_its_default(tmp_path):
    # Before: no warning, and call_stack="python" stayed on (every MALLOC
    # had its Python line), where upstream's second config() turns it off.
    p, script = run(tmp_path, RECORD + """\
msmemscope.config(device="cpu", events="alloc,free", call_stack="python", analysis="", output="out")
with recorded():
    msmemscope.config(device="cpu", events="alloc,free", analysis="")
msmemscope.start()
a = bytearray(300000); del a
msmemscope.stop()
""")
    assert warned(p) == [f"msmemscope.config: call_stack='python' from an earlier config() call is reset to its "
                         f"default: {WHY}; name it again in this call to keep it"], p.stdout
    assert [r["Call Stack(Python)"] for r in mallocs_of(tmp_path, 300001)] == [""]


def test_several_keys_reset_are_named_in_one_warning(tmp_path):
    p, script = run(tmp_path, RECORD + """\
msmemscope.config(device="cpu", events="alloc,free", analysis="", log_level="error")
with recorded():
    msmemscope.config(level="op")
""")
    assert warned(p) == [f"msmemscope.config: device='cpu', events='alloc,free', analysis='', log_level='error' "
                         f"from an earlier config() call are reset to their defaults: {WHY}; name them again in "
                         "this call to keep them"], p.stdout


def test_output_data_format_and_watch_are_kept(tmp_path):
    # A call that does not name them resets none of them (no warning), and
    # they stay set once: a later different value is ignored, as before.
    p, script = run(tmp_path, RECORD + """\
msmemscope.config(device="cpu", output="out", data_format="db", watch="op1,op2")
with recorded():
    msmemscope.config(device="cpu")
print("--")
with recorded():
    msmemscope.config(device="cpu", output="other", data_format="csv", watch="op3")
""")
    assert p.stdout.split("--\n")[0] == "", p.stdout
    assert warned(p) == [
        f"msmemscope.config: output='other', data_format='csv', watch='op3' are ignored: {ONCE_WHY} (output keeps "
        "'out', data_format keeps 'db', watch keeps 'op1,op2'); give them in the first config() call"], p.stdout


def test_set_once_keys_first_given_in_a_later_call_are_ignored(tmp_path):
    # Upstream's config() takes output, data_format and watch from its first
    # call only (configPolicyTable once isEffective), also when that call did
    # not set them. Before: the later call's output was taken, without a word,
    # and the files went to "late" where upstream writes memscopeDumpResults.
    p, script = run(tmp_path, RECORD + """\
msmemscope.config(device="cpu", events="alloc,free", analysis="")
with recorded():
    msmemscope.config(device="cpu", events="alloc,free", analysis="", output="late", data_format="db")
print("--")
with recorded():
    msmemscope.config(device="cpu", events="alloc,free", analysis="", output_path="late")
msmemscope.start()
a = bytearray(300000); del a
msmemscope.stop()
""")
    assert warned(p) == [
        f"msmemscope.config: output='late', data_format='db' are ignored: {ONCE_WHY} (output keeps its default, "
        "data_format keeps its default); give them in the first config() call",
        f"msmemscope.config: output_path='late' is ignored: {ONCE_WHY} (output_path keeps its default); give it "
        "in the first config() call"], p.stdout
    assert not (tmp_path / "late").exists()
    (procdir,) = process_dirs(tmp_path / "memscopeDumpResults")
    assert len(dump_files(procdir)) == 1  # csv, the default data_format


def test_a_set_once_key_after_the_session_opened_is_ignored_not_refused(tmp_path):
    # Before: a RuntimeError ("'output' cannot change once the collection
    # session has started"), where upstream's config() ignores it with a
    # warning since its first call took effect.
    p, script = run(tmp_path, RECORD + """\
msmemscope.config(device="cpu", events="alloc,free", analysis="")
msmemscope.start(); msmemscope.stop()
with recorded():
    msmemscope.config(events="alloc,free", watch="op1")
""")
    assert warned(p) == [f"msmemscope.config: watch='op1' is ignored: {ONCE_WHY} (watch keeps its default); give "
                         "it in the first config() call"], p.stdout + p.stderr


def test_a_range_key_back_to_the_value_it_had_is_no_change(tmp_path):
    # events and level were set to what their defaults do: the second call
    # leaving them out changes nothing. Before: a warning that they were
    # reset, and the second range's START_TRACE carried Attr
    # events:alloc|free|launch as if they had changed.
    p, script = run(tmp_path, RECORD + """\
msmemscope.config(device="cpu", events="alloc,free,launch", level="op", analysis="", output="out")
msmemscope.start(); msmemscope.stop()
with recorded():
    msmemscope.config(device="cpu", analysis="")
    msmemscope.config(device="cpu", analysis="", call_stack="")
msmemscope.start(); msmemscope.stop()
""")
    assert warned(p) == [], p.stdout
    (procdir,) = process_dirs(tmp_path / "out")
    starts = [r for r in read_dump(dump_files(procdir)[0]) if r["Event"] == "SYSTEM" and
              r["Event Type"] == "START_TRACE"]
    assert [r["Attr"] for r in starts] == ["", ""]


def test_between_ranges_the_keys_the_session_fixed_keep_its_values(tmp_path):
    # device and analysis are fixed once the session opened (a change is a
    # RuntimeError): a call that does not name them keeps them, and is not
    # refused; the range key it leaves out (events) goes back to its default.
    p, script = run(tmp_path, RECORD + """\
msmemscope.config(device="cpu", events="alloc,free", analysis="leaks", output="out")
msmemscope.start(); msmemscope.stop()
with recorded():
    msmemscope.config(call_stack="python")
msmemscope.start()
a = bytearray(300000); del a
msmemscope.stop()
""")
    assert warned(p) == [f"msmemscope.config: events='alloc,free' from an earlier config() call is reset to its "
                         f"default: {WHY}; name it again in this call to keep it"], p.stdout
    assert [r["Call Stack(Python)"] for r in mallocs_of(tmp_path, 300001)] == [f"{script}(16): <module>"]


def test_a_reset_the_session_cannot_run_is_refused_naming_the_key_left_out(tmp_path):
    # events="launch" alone runs no host heap collector; its default
    # (alloc,free,launch) needs one. Before: the call was taken, events kept.
    p, script = run(tmp_path, RECORD + """\
msmemscope.config(device="cpu", events="launch", analysis="", output="out")
msmemscope.start(); msmemscope.stop()
try:
    msmemscope.config(call_stack="python")
except RuntimeError as e:
    print("ERR", e)
msmemscope.config(events="launch", call_stack="python")
print("named again: taken")
""")
    assert p.stdout.startswith(
        "ERR msmemscope.config: 'events' cannot go back to its default between ranges (this call does not name "
        "it, and each config() call starts from the defaults, keeping only output, data_format and watch, as "
        "upstream's config() does): its default needs the collectors hal, host_heap, mstx, and the session runs "
        f"mstx, installed when msmemscope.start() at {script}:12 opened it (name events='launch' again in this "
        "call to keep it)\n"
        "named again: taken\n"), p.stdout + p.stderr


def test_under_the_cli_its_options_survive_a_config_call(tmp_path):
    # Upstream's config() under its CLI resets the CLI's call stack to the
    # default; ours does not use config()'s values under the CLI at all, so
    # the command line's --call-stack stays, and nothing is said of a reset
    # (only that config()'s values are not used).
    p, script = run(tmp_path, RECORD + """\
with recorded():
    msmemscope.config(device="cpu", events="alloc,free", analysis="leaks")
    msmemscope.config(level="op")
a = bytearray(300000); del a
""", cli=["--device=cpu", "--events=alloc,free", "--analysis=", "--call-stack=python"])
    assert warned(p) == ["msmemscope.config: running under the msmemscope command line, whose options apply; "
                         "the values given here were checked but are not used"], p.stdout
    assert [r["Call Stack(Python)"] for r in mallocs_of(tmp_path, 300001)] == [f"{script}(14): <module>"]


def test_a_key_left_at_what_its_default_does_is_not_said_to_be_reset(tmp_path):
    # Before: analysis='leaks' (the default) left out of the next call was
    # "reset to its default", and the user told to name it again to keep it:
    # nothing changes. A value that does differ from its default is still
    # named; plugin_time_budget, whose effect the validator's answer does
    # not show, is always named.
    p, script = run(tmp_path, RECORD + """\
msmemscope.config(device="cpu", analysis="leaks", log_level="info", default_suppressions=True)
with recorded():
    msmemscope.config(device="cpu")
print("--")
msmemscope.config(device="cpu", analysis="leaks,decompose", plugin_time_budget="60")
with recorded():
    msmemscope.config(device="cpu")
""")
    first, second = p.stdout.split("--\n")
    assert warned(p) == [f"msmemscope.config: analysis='leaks,decompose', plugin_time_budget='60' from an earlier "
                         f"config() call are reset to their defaults: {WHY}; name them again in this call to keep "
                         "them"], p.stdout
    assert "WARN" not in first, p.stdout
