"""Configuration and the collection session of this process.

Two ways to run (DESIGN §1):

* under the CLI (``msmemscope [options] python3 train.py``): the agent was
  preloaded and attached by the CLI (``MSMEMSCOPE_SESSION`` is set); this
  module only drives it (start/stop/step) and adds the Python-side
  collectors (Python trace, PyTorch operators and CPU tensor storage);
* plain ``python3 train.py``: the first call that needs a session spawns a
  host process (``msmemscope --serve-session=DIR --parent-pid=PID ...``),
  loads the agent into this process, attaches it, and installs the heap
  hooks by GOT patching (no ``LD_PRELOAD`` needed; a ``LD_PRELOAD`` of the
  hook libraries the upstream way is detected and used as is).
"""
from __future__ import annotations

import atexit
import os
import sys
import threading
import time
import warnings
from typing import Dict, List, Optional

from . import _paths, _shared
from ._shared import ext as _ext  # the native extension (a broken build fails in _shared)

PREFIX = _paths.PREFIX
CLI = _paths.HOST  # the host binary (bin/msmemscope is the script that execs it)
AGENT = os.path.join(PREFIX, "lib", "msmemscope", "libmsmemscope_agent.so")
PACKAGE_DIR = _shared.PACKAGE_DIR


def _load_agent() -> None:
    """Finds or loads the agent, and gives it this interpreter's Python
    stack for out-of-memory failures: the agent takes the C and the Python
    stack at every failure whatever call_stack says, as upstream does, and
    asks for it at a failure only (bindings/src/py_trace.h)."""
    _ext.load_agent(AGENT)
    _ext.oom_stacks_install([PACKAGE_DIR + os.sep])

# Python keyword -> CLI option (canonical name). Aliases as upstream.
KEYS: Dict[str, str] = {
    "device": "device",
    "level": "level",
    "events": "events",
    "call_stack": "call-stack",
    "analysis": "analysis",
    "watch": "watch",
    "data_format": "data-format",
    "format": "data-format",
    "output": "output",
    "output_path": "output",
    "sinks": "sinks",
    "steps": "steps",
    "collect_mode": "collect-mode",
    "log_level": "log-level",
    "aggregate": "aggregate",
    "suppress": "suppress",
    "default_suppressions": "default-suppressions",
    "plugin_time_budget": "plugin-time-budget",
}
# What each key accepts (for type errors; value errors come from the C++
# validator, word for word what the CLI says).
ALLOWED: Dict[str, str] = {
    "device": "npu, npu:{0..31}, cpu, cuda, cuda:{0..31}; several separated by ','",
    "level": "0, op, 1, kernel",
    "events": "alloc, free, launch, access, traceback; several separated by ','",
    "call-stack": "c, python, each with an optional :depth 0..1000, e.g. c:20,python:10",
    "analysis": "analyzer names, e.g. leaks, inefficient, decompose, oom[:K]; '' for none",
    "watch": "[start[:outN],]end[,full-content]",
    "data-format": "csv, db",
    "output": "a folder path",
    "sinks": "sink names, e.g. trace,html",
    "steps": "at most 5 step numbers, e.g. 1,2,3",
    "collect-mode": "immediate, deferred",
    "log-level": "info, warn, error",
    "aggregate": "True, False (or 'true', 'false')",
    "suppress": "a suppression file path, or a list of paths",
    "default-suppressions": "True, False (or 'true', 'false')",
    "plugin-time-budget": "seconds for one plugin call, optionally ',' and seconds for finish(), e.g. '60,600'",
}
ONCE = ("output", "data-format", "watch")
# Keys whose value is a comma-separated list: a Python list (or tuple) of its
# items is taken too, as in the YAML profile; steps and level also take ints.
LISTS = ("device", "level", "events", "call-stack", "analysis", "sinks", "steps")
INT_ITEMS = ("steps", "level")
# Keys whose value is a truth value: the strings the command line's
# validator takes for it (framework/host/config/options.cpp parse_bool).
_TRUTH = {"true": "true", "1": "true", "yes": "true", "on": "true",
          "false": "false", "0": "false", "no": "false", "off": "false"}
BOOLS: Dict[str, Dict[str, str]] = {"aggregate": _TRUTH, "default-suppressions": _TRUTH}

_lock = threading.RLock()
_values: Dict[str, str] = _shared.values  # changed in place only: the collectors read it there
_origins: Dict[str, str] = {}


def _builtin_library(lib: str) -> bool:
    """A target library of msmemscope's own collectors (installed with it)."""
    own = os.path.realpath(os.path.join(PREFIX, "lib", "msmemscope")) + os.sep
    return os.path.realpath(lib).startswith(own)


def _cli_plugin_settings():
    """The command line's plugin folders and options, when the CLI started
    this program (it exports them: framework/host/plugin_cli.h)."""
    paths = [p for p in os.environ.get("MSMEMSCOPE_CLI_PLUGIN_PATHS", "").split(":") if p]
    options: Dict[str, Dict[str, str]] = {}
    for line in os.environ.get("MSMEMSCOPE_CLI_PLUGIN_OPTIONS", "").split("\n"):
        name, dot, rest = line.partition(".")
        key, eq, value = rest.partition("=")
        if dot and eq:
            options.setdefault(name, {})[key] = value
    return paths, options


_plugin_paths: List[str]
_plugin_options: Dict[str, Dict[str, str]]
_plugin_paths, _plugin_options = _cli_plugin_settings()
_session: Optional["Session"] = None
_warned_cli = False
# Whether a config() call has taken effect: from then on output, data_format
# and watch are set (to a value or their default) and later calls ignore
# them, as upstream's config() does (isEffective, configPolicyTable).
_configured = False
# The folder current when config() first set output: a relative output names
# a folder there (upstream resolves it at config(), ParseOutputPath), also
# when the program changes its folder before start() (Hydra's @hydra.main).
_output_base: Optional[str] = None


# config()'s aliases that the command line has too: the host's messages name
# the key the program used (api_words.h in the host).
_CLI_ALIASES = {"format": "format", "output_path": "output-path"}


def _cli_options() -> List[str]:
    # --aggregate is a flag on the command line (no value).
    flags = [f"--{k}" for k, v in sorted(_values.items()) if k == "aggregate" and v == "true"]
    return ([f"--{_CLI_ALIASES.get(_origins.get(k, ''), k)}={v}" for k, v in sorted(_values.items())
             if k != "aggregate"] + flags +
            [f"--plugin-path={p}" for p in _plugin_paths] +
            [f"--plugin-option={n}.{k}={v}" for n, kv in sorted(_plugin_options.items()) for k, v in sorted(kv.items())])


def under_cli() -> bool:
    """True when this process runs under the msmemscope CLI (directly or as a
    descendant of its target): the CLI's session is joined, never a second
    one opened. The CLI's agent is preloaded, or loaded here when the
    process lost it (a script that set its own LD_PRELOAD)."""
    return bool(os.environ.get("MSMEMSCOPE_SESSION")) or _shared.attached  # or msmemscope --attach's


def _agent_preloaded() -> bool:
    try:
        with open("/proc/self/maps") as f:
            return "libmsmemscope_agent.so" in f.read()
    except OSError:
        return False


def _not_followed() -> bool:
    root = os.environ.get("MSMEMSCOPE_ROOT_PID", "")
    import re
    off = re.search(r"(^|[;, ])follow_fork=(0|f)", os.environ.get("MSMEMSCOPE_AGENT_OPTS", ""))
    return bool(off) and root != str(os.getpid())


def config_module():
    """The CLI's validator and plugin registry (the extension
    _msmemscope_config), loaded at the first config() or plugin listing with
    the hooks off: loading it (boost, yaml-cpp, spdlog, libdw, their static
    data) is the profiler's own memory, not the program's at that line."""
    name = f"{__package__}._msmemscope_config"
    module = sys.modules.get(name)
    if module is None:
        import importlib
        module = _ext.without_hooks(lambda: importlib.import_module(name))
    return module


def validate(values: Dict[str, str], plugin_paths: Optional[List[str]] = None,
             plugin_options: Optional[Dict[str, Dict[str, str]]] = None) -> dict:
    try:
        return config_module().validate_config(values, {k: _origins.get(k, k.replace("-", "_")) for k in values},
                                                  PREFIX, _plugin_paths if plugin_paths is None else plugin_paths,
                                                  _plugin_options if plugin_options is None else plugin_options,
                                                  "plugin_options")
    except ValueError as e:
        raise ValueError(f"msmemscope.config: {e}") from None


PLUGIN_PATH_ALLOWED = "a folder path, or a list of folder paths"
PLUGIN_OPTIONS_ALLOWED = ("a dict {plugin: {option: value}} or {'plugin.option': value}; values str, int or bool, "
                          "or a list of them")


def _check_plugin_path(value: object) -> List[str]:
    items = list(value) if isinstance(value, (list, tuple)) else [value]
    out = []
    for p in items:
        if not isinstance(p, (str, os.PathLike)) or not os.fspath(p):
            raise TypeError(f"msmemscope.config: 'plugin_path' must be {PLUGIN_PATH_ALLOWED}, got "
                            f"{type(p).__name__} {p!r}")
        path = os.path.abspath(os.fspath(p))
        # As the command line's --plugin-path checks it.
        if not os.path.exists(path):
            raise ValueError(f"msmemscope.config: plugin_path: '{os.fspath(p)}' does not exist")
        if not os.path.isdir(path):
            raise ValueError(f"msmemscope.config: plugin_path: '{os.fspath(p)}' is not a folder")
        out.append(path)
    return out


def _suppress_files(key: str, value: object) -> str:
    """suppress=: one path or a list of paths (str or os.PathLike), made
    absolute here, against the folder current at config() time, as the
    command line resolves --suppress against its own."""
    items = list(value) if isinstance(value, (list, tuple)) else [value]
    out = []
    for p in items:
        if not isinstance(p, (str, os.PathLike)):
            raise TypeError(f"msmemscope.config: '{key}' must be {ALLOWED['suppress']}, got {type(p).__name__}")
        text = os.fspath(p)
        # The validator names an empty value; a comma would split one path in two.
        out.append(os.path.abspath(text) if text.strip() else text)
    return ",".join(out)


def _option_text(where: str, v: object, in_list: bool = False) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (str, int)):
        return str(v)
    if isinstance(v, (list, tuple)) and not in_list:
        # A list, as YAML's plugins.options accepts one: its items joined by ','.
        return ",".join(_option_text(f"{where}[{i}]", x, True) for i, x in enumerate(v))
    raise TypeError(f"msmemscope.config: plugin_options: '{where}' must be a str, int or bool, got "
                    f"{type(v).__name__} (allowed: {PLUGIN_OPTIONS_ALLOWED})")


def _check_plugin_options(value: object) -> Dict[str, Dict[str, str]]:
    if not isinstance(value, dict):
        raise TypeError(f"msmemscope.config: 'plugin_options' must be {PLUGIN_OPTIONS_ALLOWED}, got "
                        f"{type(value).__name__}")
    out: Dict[str, Dict[str, str]] = {}
    for name, v in value.items():
        if not isinstance(name, str) or not name:
            raise TypeError(f"msmemscope.config: plugin_options: key {name!r} is not a plugin name "
                            f"(allowed: {PLUGIN_OPTIONS_ALLOWED})")
        if isinstance(v, dict):
            for k, x in v.items():
                if not isinstance(k, str) or not k:
                    raise TypeError(f"msmemscope.config: plugin_options: '{name}': option {k!r} is not a name "
                                    f"(allowed: {PLUGIN_OPTIONS_ALLOWED})")
                out.setdefault(name, {})[k] = _option_text(f"{name}.{k}", x)
        else:
            plugin, dot, key = name.partition(".")
            if not dot or not plugin or not key:
                raise ValueError(f"msmemscope.config: plugin_options: invalid key '{name}' "
                                 f"(allowed: {PLUGIN_OPTIONS_ALLOWED})")
            out.setdefault(plugin, {})[key] = _option_text(name, v)
    return out


def configure(kwargs: Dict[str, object]) -> None:
    global _warned_cli, _plugin_paths, _plugin_options, _output_base, _configured
    with _lock:
        kwargs = dict(kwargs)
        new_paths = list(_plugin_paths)
        new_options = {n: dict(kv) for n, kv in _plugin_options.items()}
        if "plugin_path" in kwargs:
            new_paths = _check_plugin_path(kwargs.pop("plugin_path"))
        if "plugin_options" in kwargs:
            for n, kv in _check_plugin_options(kwargs.pop("plugin_options")).items():
                new_options.setdefault(n, {}).update(kv)
        plugins_changed = new_paths != _plugin_paths or new_options != _plugin_options
        new = _values_kept_by_a_new_call()
        origins = {}
        ignored = []  # (key as named, canonical key, value) of set-once keys given too late
        for key, value in kwargs.items():
            canon = KEYS.get(key)
            if canon is None:
                import difflib
                guess = difflib.get_close_matches(key, list(KEYS) + ["plugin_path", "plugin_options"], n=1)
                hint = f"; did you mean '{guess[0]}'?" if guess else ""
                raise TypeError(f"msmemscope.config: unknown key '{key}'{hint} "
                                f"(allowed: {', '.join(k for k in KEYS)}, plugin_path, plugin_options)")
            if canon in LISTS and isinstance(value, (list, tuple)):
                for i, v in enumerate(value):
                    if not (isinstance(v, str) or (canon in INT_ITEMS and type(v) is int)):
                        raise TypeError(f"msmemscope.config: '{key}' must be a string or a list of strings; "
                                        f"{key}[{i}] is {type(v).__name__} {v!r} (allowed: {ALLOWED[canon]})")
                # analysis=["leaks", "decompose"] as the YAML list, or the
                # command line's comma-separated value
                value = ",".join(str(v) for v in value)
            if canon in BOOLS:
                if isinstance(value, bool):
                    value = "true" if value else "false"
                elif not isinstance(value, str):
                    raise TypeError(f"msmemscope.config: '{key}' must be True or False (or a string: 'true', "
                                    f"'false'), got {type(value).__name__}")
                else:
                    # the spellings the command line takes (parse_bool), as one: the
                    # CLI's --aggregate is a flag given for "true" only
                    value = BOOLS[canon].get(value, value)
            if canon == "suppress":
                value = _suppress_files(key, value)
            if not isinstance(value, str):
                what = "a string or a list of strings" if canon in LISTS else "a string"
                raise TypeError(f"msmemscope.config: '{key}' must be {what}, got {type(value).__name__} "
                                f"(allowed: {ALLOWED[canon]})")
            if canon in ONCE and _configured:
                # Set once, by the first config() call, as upstream's (its
                # configPolicyTable once isEffective): the same value again
                # changes nothing, so nothing is said of it.
                if _values.get(canon) != value:
                    ignored.append((key, canon, value))
                continue
            new[canon] = value
            origins[canon] = key
        dropped = [k for k in _values if k not in new]
        reset = [k for k in dropped if not _changes_nothing(k, new, new_paths, new_options)]
        saved = dict(_origins)
        _origins.update(origins)
        try:
            checked = validate(new, new_paths, new_options)
        except ValueError:
            _origins.clear()
            _origins.update(saved)
            raise
        if _session is not None and not _session.cli:
            # (output, data_format and watch after a config() call that took
            # effect were ignored above; set now by the first call, after a
            # start() that opened the session with their defaults: refused as
            # any other change)
            changed = [k for k in new if _values.get(k) != new[k] and
                       not _changes_nothing(k, new, new_paths, new_options)] + reset
            if plugins_changed:
                changed.append("plugin_path" if new_paths != _plugin_paths else "plugin_options")
            fixed = [k for k in changed if k not in RANGE_KEYS]
            why = "" if fixed else _why_not_between_ranges(changed, checked, origins, new, reset)
            if fixed or why:
                _origins.clear()
                _origins.update(saved)
            if fixed:
                k = fixed[0]
                opened = f": {_opened_by} opened it" if _opened_by else ""
                used = {"output": "output", "data-format": "data_format"}.get(k)
                if used and _session.config and _session.config.get(used):
                    opened += (f" with {used} '{_session.config[used]}'" if opened else
                               f": it uses {used} '{_session.config[used]}'")
                reason = WHY_FIXED.get(k, "")
                raise RuntimeError(f"msmemscope.config: '{origins.get(k, k.replace('-', '_'))}' cannot change once "
                                   f"the collection session has started{opened}{reason} (config() must come before "
                                   f"the first start(), step(), take_snapshot() or tracer.start(); "
                                   f"{_RANGE_KEYS_TEXT} may change between ranges)")
            if why:
                raise RuntimeError(why)
            if changed:
                # Applied at the next start() (the agent's options, and the
                # rows the host writes from that range's START_TRACE on).
                _session.pending = checked
                # What the host said of the first values at the session's
                # start, said of the new ones here (config()'s words).
                said = tuple(origins.get(k, k.replace("-", "_")) for k in changed)
                for w in checked.get("warnings", []):
                    if w.startswith(said):
                        warnings.warn(f"msmemscope.config: {w}", stacklevel=3)
                if _ext.collecting():
                    names = ", ".join(f"'{origins.get(k, k.replace('-', '_'))}'" for k in changed)
                    warnings.warn(f"msmemscope.config: collection is on; the new {names} take"
                                  f"{'s' if len(changed) == 1 else ''} effect at the next msmemscope.start()",
                                  stacklevel=3)
        if "output" in new and "output" not in _values and _output_base is None:
            try:
                _output_base = os.getcwd()
            except OSError:  # a folder removed under the program: start() says so
                pass
        if ignored and not under_cli():
            _warn_set_once_ignored(ignored)
        if reset and not under_cli():
            _warn_reset(reset)
        for k in dropped:
            _origins.pop(k, None)
        _values.clear()
        _values.update(new)
        _plugin_paths = new_paths
        _plugin_options = new_options
        _configured = True
        if under_cli() and not _warned_cli and (kwargs or plugins_changed):
            _warned_cli = True
            warnings.warn("msmemscope.config: running under the msmemscope command line, whose options apply; "
                          "the values given here were checked but are not used", stacklevel=3)


def _values_kept_by_a_new_call() -> Dict[str, str]:
    """What a config() call starts from: the defaults, as upstream's does
    (ConfigManager::GetConfigAfterInit starts from ClientParser::
    InitialConfig), keeping only output, data_format and watch, which take
    effect the first time they are set. Once the session has opened, the
    keys it fixed (all but RANGE_KEYS) keep its values too: a reset would be
    a change it cannot make (WHY_FIXED), and they stay what the session
    runs with, so nothing the user can see is lost. plugin_path and
    plugin_options (ours; upstream has no plugins) add up across calls."""
    kept = {k: v for k, v in _values.items() if k in ONCE}
    if _session is not None and not _session.cli:
        kept.update({k: v for k, v in _values.items() if k not in RANGE_KEYS})
    return kept


def _changes_nothing(key: str, new: Dict[str, str], paths: List[str],
                     options: Dict[str, Dict[str, str]]) -> bool:
    """Whether this call's value of a key (its default, when the call does
    not name it) does what the value before it did: events=
    'alloc,free,launch' going back to its default, call_stack='' named where
    none was set, analysis='leaks' (the default) left out of a later call.
    Then it is no change (for a range key, no START_TRACE Attr for the next
    range) and nothing to warn of. A range key is judged by what the agent
    and the written rows get; any other key by the validator's whole answer
    (its "json" is the resolved configuration), except the keys whose effect
    is not in it (ANSWER_BLIND), whose every change is taken as one."""
    if key in ANSWER_BLIND:
        return False
    before = {k: v for k, v in new.items() if k != key}
    if key in _values:
        before[key] = _values[key]
    try:
        was, now = validate(before, paths, options), validate(new, paths, options)
    except ValueError:  # the call's own error is raised where it is checked
        return False
    fields = ("agent_options", "written_events") if key in RANGE_KEYS else [f for f in was if f != "warnings"]
    return all(was.get(f) == now.get(f) for f in fields)


def _warn_set_once_ignored(ignored: List[tuple]) -> None:
    """Says which output, data_format and watch values this call ignored
    (a config() call before it took effect, and they are set once), what
    each stays, and where to give them: a program that set output in a
    later call would otherwise look for its files in the wrong folder."""
    named = ", ".join(f"{key}='{value}'" for key, _, value in ignored)
    stays = ", ".join(f"{key} keeps '{_values[canon]}'" if canon in _values else f"{key} keeps its default"
                      for key, canon, _ in ignored)
    warnings.warn(f"msmemscope.config: {named} {'is' if len(ignored) == 1 else 'are'} ignored: output, data_format "
                  f"and watch are taken only from the first config() call, as upstream's config() does ({stays}); "
                  f"give {'it' if len(ignored) == 1 else 'them'} in the first config() call", stacklevel=4)


def _warn_reset(reset: List[str]) -> None:
    """Says which values of earlier config() calls this call set back to
    their defaults (it did not name them): a program written for a
    config() that keeps them would lose them without a word."""
    named = ", ".join(f"{_origins.get(k, k.replace('-', '_'))}='{_values[k]}'" for k in reset)
    one = len(reset) == 1
    warnings.warn(f"msmemscope.config: {named} from an earlier config() call {'is' if one else 'are'} reset to "
                  f"{'its default' if one else 'their defaults'}: each config() call starts from the defaults, "
                  "keeping only output, data_format and watch, as upstream's config() does; name "
                  f"{'it' if one else 'them'} again in this call to keep {'it' if one else 'them'}", stacklevel=4)


# What config() may change between two ranges (after stop(), before the next
# start()), as upstream's config() applies them to its next events (its
# ConfigManager::SetConfig: call_stack, level, events; device and analysis
# too, which ours cannot: WHY_FIXED): the agent's options, and the rows
# written from the next range's START_TRACE on. The others are the host's,
# fixed when the session opens (its analyzers, devices, sinks, steps, files).
RANGE_KEYS = ("events", "call-stack", "level")
# The keys whose effect the validator's answer does not show (the host reads
# plugin_time_budget itself): a change of theirs is always one.
ANSWER_BLIND = ("plugin-time-budget",)
_RANGE_KEYS_TEXT = "events, call_stack and level"
WHY_FIXED: Dict[str, str] = {
    "device": "; the host keeps the devices' events it opened with for the whole session (a block freed in a later "
              "range pairs with its MALLOC on its device), and their collectors were installed then",
    "analysis": "; the analyses run in the host process over the whole session, from its first event, so that "
                "no block is judged on part of its life",
    "sinks": "; the host opened the output files when the session opened",
    "steps": "; the host selects the steps over the whole session",
    "aggregate": "; the host chose how to keep the rows when the session opened",
    "collect-mode": "; start() and stop() are the ranges of an API session",
}


def _why_not_between_ranges(changed: List[str], checked: dict, origins: Dict[str, str],
                            new: Dict[str, str], reset: List[str]) -> str:
    """Why a change of the range keys cannot apply to the next range ("" when
    it can): it would need other collectors than those installed when the
    session opened (events="launch" alone leaves the host heap's out)."""
    old = _session.config or {}
    if checked.get("collectors") == old.get("collectors") and checked.get("backend") == old.get("backend"):
        return ""
    k = changed[0]
    name = origins.get(k, k.replace("-", "_"))
    opened = f"{_opened_by} opened it" if _opened_by else "it opened"
    was = ", ".join(old.get("collectors") or []) or "none"
    now = ", ".join(checked.get("collectors") or []) or "none"
    if reset and _fits_the_session(dict(new, **{r: _values[r] for r in reset}), old):
        # The keys named are fine: the defaults of those this call left out
        # are what the session cannot run.
        names = ", ".join(f"'{_origins.get(r, r.replace('-', '_'))}'" for r in reset)
        kept = ", ".join(f"{_origins.get(r, r.replace('-', '_'))}='{_values[r]}'" for r in reset)
        its, it = ("its", "it") if len(reset) == 1 else ("their", "them")
        return (f"msmemscope.config: {names} cannot go back to {its} default{'s' * (its == 'their')} between "
                f"ranges (this call does not name {it}, and each config() call starts from the defaults, keeping "
                f"only output, data_format and watch, as upstream's config() does): {its} default"
                f"{' needs' if its == 'its' else 's need'} the collectors {now}, and the session runs {was}, "
                f"installed when {opened} (name {kept} again in this call to keep {it})")
    return (f"msmemscope.config: '{name}' cannot change to '{new.get(k, '')}' between ranges: it needs the "
            f"collectors {now}, and the session runs {was}, installed when {opened} (a process has one session: "
            f"set '{name}' before the first start())")


def _fits_the_session(values: Dict[str, str], opened_with: dict) -> bool:
    """Whether these values need the collectors the session installed."""
    try:
        checked = validate(values)
    except ValueError:
        return False
    return (checked.get("collectors") == opened_with.get("collectors") and
            checked.get("backend") == opened_with.get("backend"))


def current_config() -> dict:
    """The effective configuration (validated), as the CLI would see it."""
    with _lock:
        return validate(dict(_values))


class Session:
    """This process's capture stream and, in Python mode, its host process."""

    def __init__(self) -> None:
        self.cli = under_cli()
        self.host: Optional[subprocess.Popen] = None
        self.lifeline: Optional[subprocess.Popen] = None
        self.dir = ""
        self.watch_token = ""  # watch staging files' token (watcher.py); the CLI's is in the environment
        self.closed = False
        self.pid = os.getpid()
        self.end_at_exit = False  # the end of the session is left to exit() (shutdown())
        self.process_dir = ""  # this process's output folder, as the host named it
        self._ready = -1  # the host's ready pipe, kept for its "finished" line (finish())
        self._host_cwd = ""  # the host's working folder, where the folder paths it says start
        self.finished_by = ""  # "msmemscope.finish() at FILE:LINE" once finish() ended the session
        # config() between ranges (RANGE_KEYS): the validated configuration
        # the next start() applies (take_pending)
        self.pending: Optional[dict] = None
        self._missing_drivers: List[tuple] = []
        if self.cli:
            preloaded = _agent_preloaded()
            # Not preloaded (the program's own LD_PRELOAD replaced the CLI's):
            # loading the agent attaches it to the CLI's session (it reads
            # MSMEMSCOPE_SESSION), and the heap hooks go in by GOT patching.
            _load_agent()
            if not _ext.attached():
                if _not_followed():
                    raise RuntimeError("msmemscope: this process is not profiled (--follow-fork=false profiles only "
                                       "the program the CLI started)")
                raise RuntimeError("msmemscope: running under the CLI but its agent is not attached in this process "
                                   "(its messages are above)")
            self.config = None
            if not preloaded and (_ext.wants("alloc") or _ext.wants("free")):
                hook = os.path.join(PREFIX, "lib", "msmemscope", "agent", "libmsms_host_heap_hook.so")
                if os.path.exists(hook) and os.path.basename(hook) not in os.environ.get("LD_PRELOAD", ""):
                    try:
                        _ext.install_heap_hooks(hook, "_msmemscope")
                    except RuntimeError as e:
                        warnings.warn(f"msmemscope: host heap hooks not installed in this process: {e}")
            return
        # the standalone session's modules, not imported under the CLI
        # (Python's start there is the user's: issue #30)
        import secrets
        import subprocess
        import tempfile

        cfg = current_config()
        self.config = cfg
        # As root: refused unless root's own (#29), before anything is created.
        _paths.checked_host()
        _paths.checked(AGENT, "the msmemscope agent")
        out = cfg["output"]
        # The host runs in the folder config() named output from, so that it
        # resolves a relative output there and says the folder as before.
        base = _output_base if _output_base is not None and "output" in _values else os.getcwd()
        where = os.path.join(base, out)
        try:
            os.makedirs(where, exist_ok=True)
        except OSError as e:
            raise RuntimeError(f"msmemscope: output: cannot create or write '{out}': {e.strerror}") from None
        if not os.access(where, os.W_OK):
            raise RuntimeError(f"msmemscope: output: cannot create or write '{out}': not writable")
        # A fresh folder only this user can enter (0700, a new name each
        # time): nothing planted beforehand is read as a capture (#16).
        self.dir = os.path.abspath(tempfile.mkdtemp(prefix=f".msmemscope_session_py_{os.getpid()}_", dir=where))
        if not os.path.exists(CLI):
            raise RuntimeError(f"msmemscope: the host binary is missing: {CLI}")
        env = dict(os.environ)
        for k in ("LD_PRELOAD", "MSMEMSCOPE_SESSION", "MSMEMSCOPE_AGENT_OPTS"):
            env.pop(k, None)
        env["MSMEMSCOPE_HOME"] = PREFIX
        # The host moves only watch staging files carrying this token (watcher.py).
        self.watch_token = secrets.token_hex(16)
        env["MSMEMSCOPE_WATCH_TOKEN"] = self.watch_token
        # The host serves until its "parent" is gone. That parent is a
        # lifeline process that ends when this process closes its pipe: at
        # exit (then we wait for the host to finish every file) or when this
        # process dies in any way (the pipe closes with it).
        self.lifeline = subprocess.Popen(["cat"], stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, env=env,
                                         close_fds=True)
        # The host says on this pipe when it serves a capture (or why not),
        # and when it has written its files (finish()).
        ready_r, ready_w = os.pipe()
        self._host_cwd = base
        args = [CLI, f"--serve-session={self.dir}", f"--parent-pid={self.lifeline.pid}",
                f"--ready-fd={ready_w}"] + _cli_options()
        try:
            self.host = subprocess.Popen(args, env=env, close_fds=True, stdin=subprocess.DEVNULL,
                                         pass_fds=(ready_w,), cwd=base)
        finally:
            os.close(ready_w)
        try:
            # Spawned before the agent is loaded: the children inherit no hooks.
            _load_agent()
            # Before attach: what loading the tool and setting os.environ
            # allocate (and free of the environment built before start())
            # is the package's, not the program's.
            self._install_native_hooks(cfg, mstx=True)
            # The session ends at exit() with the exit status (shutdown());
            # registered before the attach: after the agent's at exit.
            self.end_at_exit = _ext.end_at_exit(self.dir, self.lifeline.stdin.fileno(), self.lifeline.pid,
                                                self.host.pid, *self._stop_wait(), cfg["output"])
            rc = _ext.attach(self.dir, cfg["agent_options"])
            if rc != 0:
                self.shutdown()
                raise RuntimeError(f"msmemscope: cannot open the capture in {self.dir}: {os.strerror(rc)}")
            self._wait_until_served(ready_r)
            self._ready, ready_r = ready_r, -1
        finally:
            if ready_r >= 0:
                os.close(ready_r)
        # os._exit(N): the agent's _exit writes the end record (N) first.
        _ext.install_exit_hooks("_msmemscope")
        try:
            self._install_native_hooks(cfg, mstx=False)
        except RuntimeError:
            self.shutdown()  # a collector that cannot run: no half-recorded session
            raise
        _watch_uncaught()

    # How long start() waits for the host to take this process's capture.
    SERVE_TIMEOUT_S = 60.0

    def _wait_until_served(self, fd: int) -> None:
        """Waits until the host's pipeline runs for this process's capture
        (plugins loaded, sinks open): the host's start-up then does not run
        beside the user's first measured work, and a host that cannot serve
        is reported here instead of losing the whole recording."""
        import select
        import shutil
        prefix = f"{os.getpid()}."
        deadline = time.monotonic() + self.SERVE_TIMEOUT_S
        buf = b""
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                warnings.warn(f"msmemscope: the host process has not taken this process's capture after "
                              f"{self.SERVE_TIMEOUT_S:.0f} s; recording goes on and it reads the capture "
                              f"when it can", stacklevel=4)
                return
            readable, _, _ = select.select([fd], [], [], left)
            if not readable:
                continue
            data = os.read(fd, 4096)
            if not data:
                code = self.host.wait() if self.host is not None else None
                self.shutdown()
                shutil.rmtree(self.dir, ignore_errors=True)  # nobody else will
                raise RuntimeError(f"msmemscope: the host process ended (exit code {code}) before it served this "
                                   f"process; its messages are above")
            buf += data
            *lines, buf = buf.split(b"\n")
            for raw in lines:
                line = raw.decode("utf-8", "replace")
                if line.startswith("serving " + prefix):
                    folder = line.partition("\t")[2]
                    self.process_dir = os.path.join(self._host_cwd, folder) if folder else ""
                    self._warn_missing_drivers()
                    return
                if line.startswith("nodriver "):
                    lib, _, text = line[len("nodriver "):].partition("\t")
                    self._missing_drivers.append((lib, text))
                if line.startswith("failed " + prefix):
                    why = line.split(": ", 1)[1] if ": " in line else line
                    self.shutdown()
                    raise RuntimeError(f"msmemscope: the host process cannot serve this process: {why}")

    def _warn_missing_drivers(self) -> None:
        """The host found no driver for a requested device (the default npu
        on a machine without Ascend software): said at start(), where a
        notebook shows it, not only in the host's report at the end. A
        driver this process has already loaded (from its own RUNPATH) is
        there after all."""
        if not self._missing_drivers:
            return
        try:
            with open("/proc/self/maps") as f:
                maps = f.read()
        except OSError:
            maps = ""
        where = _program_frame()
        for lib, text in self._missing_drivers:
            if "/" + lib not in maps:
                if where is None:
                    warnings.warn("msmemscope: " + text)
                else:  # at the program's line that opened the session
                    warnings.warn_explicit("msmemscope: " + text, UserWarning, where.f_code.co_filename,
                                           where.f_lineno, module=where.f_globals.get("__name__"))

    def _install_native_hooks(self, cfg: dict, mstx: bool) -> None:  # noqa: C901
        """The heap hooks (mstx=False, once attached) or the mstx tool
        (mstx=True, before attach)."""
        preload = os.environ.get("LD_PRELOAD", "")
        for lib in cfg["agent_libraries"]:
            name = os.path.basename(lib)
            if name in preload:
                continue  # preloaded the upstream way: the hooks are already interposed
            if "host_heap" in name and not mstx:
                _ext.install_heap_hooks(lib, "_msmemscope")
            elif "mstx_hook" in name and mstx:
                # mstx loads its tool through MSTX_INJECTION_PATH (the tool's
                # constructor sets it, as under the CLI); os.environ is told
                # too, so children started with a copy of it inherit it.
                os.environ["MSTX_INJECTION_PATH"] = _ext.install_mstx_tool(lib) or lib
            elif not mstx:
                # A collector's hooks: a built-in device collector's (hal,
                # kernel_launch, cuda: the runtime a program such as
                # torch_npu has loaded before start()) or a third-party one's
                # (issue #29 item 7). Its exported functions replace the
                # runtime's in the callers' GOT slots of every loaded object,
                # and of objects loaded later (the dlopen hook), as the CLI's
                # LD_PRELOAD would interpose them.
                what = "the collector library " + lib
                try:
                    # the loader's blocks for it are the profiler's, not the
                    # program's (they were a block "before collection started")
                    names = _ext.without_hooks(lambda: _ext.install_collector_library(lib, "_msmemscope"))
                except RuntimeError as e:
                    raise RuntimeError(f"msmemscope: {what} cannot be loaded without the CLI: {e}") from None
                if not names:
                    raise RuntimeError(f"msmemscope: {what} exports no function to interpose; "
                                       "without the CLI it would record nothing: run the program under the CLI "
                                       "(msmemscope --plugin-path=... -- python ...)")
                if "cuGetProcAddress" in names:
                    self._warn_cuda_loaded()

    def _warn_cuda_loaded(self) -> None:
        """A CUDA runtime (libcudart: cudaMalloc, PyTorch) looks up the
        driver's functions once (cuGetProcAddress) and calls them through
        those pointers, which no GOT slot holds: when the driver was loaded
        before the hooks went in, what the runtime allocates is not recorded
        (the driver API called directly, and a runtime started later, are).
        Said at start(), where the program can still be changed."""
        try:
            with open("/proc/self/maps") as f:
                loaded = "/libcuda.so" in f.read()
        except OSError:
            loaded = False
        if not loaded:
            return
        text = ("msmemscope: the CUDA driver (libcuda.so.1) was loaded before msmemscope.start(): device memory that "
                "a CUDA runtime (cudaMalloc, PyTorch) allocates through the driver functions it looked up before "
                "start() is not recorded without the CLI; to record it, start the collection before the first CUDA "
                "call, or run the program under the CLI (msmemscope --device=cuda -- python ...)")
        where = _program_frame()
        if where is None:
            warnings.warn(text)
        else:
            warnings.warn_explicit(text, UserWarning, where.f_code.co_filename, where.f_lineno,
                                   module=where.f_globals.get("__name__"))

    def shutdown(self, at_exit: bool = False, going_on: bool = False) -> None:
        """Ends the session. At the interpreter's exit (at_exit) only
        collection ends here, and the stream is left to exit(): the agent
        ends it with the status CPython gives exit() after finalizing
        (sys.exit(N), sys.exit("msg"), a normal end, an uncaught
        exception), then the extension releases the capture and waits for
        the host (end_at_exit); the same in a forked child, whose stream
        the agent ends at its exit. An uncaught KeyboardInterrupt ends the
        process by SIGINT, with no exit(): its end is written here.
        going_on: finish(), the process goes on; its stream ends as a
        detach's (the host says "detached")."""
        if self.closed:
            return
        self.closed = True
        if self.cli:
            return
        kind, code = _how_python_ends()
        if at_exit and kind != _END_SIGNAL and (self.end_at_exit or os.getpid() != self.pid) and \
                _ext.stop_at_exit():
            # The end is exit()'s (module.cpp end_session_at_exit), which says
            # a host killed by then; one killed already is reaped at the
            # finalization (Popen.__del__), before exit() could read how it
            # ended: said now.
            if self.host is not None and os.getpid() == self.pid and self.host.poll() is not None:
                self._say_if_killed(self.host.returncode)
            return
        _ext.end_at_exit_disarm()
        if going_on:
            _ext.detach_running()
        else:
            _ext.detach(kind, code)
        # The host sees the stream complete when this process's lock on the
        # capture file goes (descriptor and mappings): release them now so
        # that we can wait for the host to write every file.
        _ext.release_capture(self.dir)
        if self.lifeline is not None:
            try:
                self.lifeline.stdin.close()
            except OSError:
                pass
            self.lifeline.wait()
        if self.host is not None:
            self._wait_for_host()

    def finish(self) -> str:
        """Ends the session now, while the program goes on (a notebook's
        kernel): the host writes every file and reports, and this returns
        once it has, with the process folder. Nothing is recorded after it;
        start() and step() refuse (one session a process)."""
        if self.cli:
            raise RuntimeError("msmemscope.finish(): this process runs under the msmemscope command line, whose "
                               "session ends with the program (its files are written then)")
        if not self.closed:
            where = _program_line()
            self.finished_by = "msmemscope.finish()" + (f" at {where}" if where else "")
            from . import _collect
            _collect.disable_all()
            self.shutdown(going_on=True)
            self._take_final_folder()
        return self.process_dir

    def _take_final_folder(self) -> None:
        """The host's "finished PID.N.msmcap<TAB>FOLDER" line, written once
        every file of this process is: the folder as it is named then (a
        rank that came from torch.distributed after the folder was made
        renames it at the end: README "Ranks without RANK"). Nothing waits
        for it: a host still writing (past MSMEMSCOPE_STOP_WAIT_S) has not
        said it yet, and the folder keeps the name it had at start()."""
        fd, self._ready = self._ready, -1
        if fd < 0:
            return
        import select
        data = b""
        try:
            if os.getpid() == self.pid:  # a forked child's copy of the pipe is not its own
                while select.select([fd], [], [], 0)[0]:
                    chunk = os.read(fd, 65536)
                    if not chunk:
                        break
                    data += chunk
        except OSError:
            pass
        finally:
            os.close(fd)
        prefix = f"finished {self.pid}."
        for line in data.decode("utf-8", "replace").splitlines():
            folder = line.partition("\t")[2]
            if line.startswith(prefix) and folder:
                self.process_dir = os.path.join(self._host_cwd, folder)

    def take_pending(self):
        """(agent options, START_TRACE attrs) for the next start(): ("", "")
        when config() changed nothing since the last range."""
        with _lock:
            cfg, self.pending = self.pending, None
            if cfg is None or self.cli:
                return "", ""
            self.config = cfg
            written = cfg.get("written_events") or []
            # (the host's sinks write from this row on the events listed:
            # util/written_events.h)
            return cfg["agent_options"], "events:" + ("|".join(written) if written else "none")

    def refuse_if_finished(self, api: str) -> None:
        """After finish(): a clear error instead of a call into a stream
        that has ended."""
        if self.finished_by:
            raise RuntimeError(f"{api}: this process's session was ended by {self.finished_by}; a process has one "
                               f"session (its files are in {self.process_dir or self.config['output']}): profile "
                               "another run in a new process")

    def _stop_wait(self):
        """(seconds, warning): how long the end waits for the host to write
        every file, MSMEMSCOPE_STOP_WAIT_S (default 600; 0: no limit), and
        what it says when the host takes longer. Read once, for the end in
        Python (_wait_for_host) and the end at exit() (end_at_exit)."""
        try:
            limit = float(os.environ.get("MSMEMSCOPE_STOP_WAIT_S", "600"))
        except ValueError:
            limit = 600.0
        return limit, (f"msmemscope: warning: the host (pid {self.host.pid}) is still writing the outputs into "
                       f"{self.config['output']} after {limit:g} s (MSMEMSCOPE_STOP_WAIT_S); not waiting for it any "
                       "longer: it finishes on its own, and a plugin that hangs is stopped at its time budget\n")

    def _wait_for_host(self) -> None:
        """Waits for the host to write every file, at most _stop_wait()'s
        seconds: the user's interpreter is never held longer. The host then
        goes on alone (it is not killed) and says in its log what it
        finished."""
        import subprocess
        limit, late = self._stop_wait()
        try:
            code = self.host.wait(timeout=limit if limit > 0 else None)
        except subprocess.TimeoutExpired:
            sys.stderr.write(late)
            return
        self._say_if_killed(code)

    def _say_if_killed(self, code: Optional[int]) -> None:
        """A host killed by a signal says nothing itself, and this process's
        files are missing or partial: said here (module.cpp host_killed_text)."""
        if code is not None and code < 0:
            sys.stderr.write(_ext.host_killed_text(self.host.pid, -code, self.config["output"]))
            sys.stderr.flush()


# Whether the program marks its own steps (msmemscope.step()), the CLI's
# interpreter-start hook joined the session, --step-on names the step
# functions: _shared.own_steps, booted, step_on (the PyTorch collector reads
# them there, through auto_steps()).


# The call that opened this process's session and where ("msmemscope.step()
# at train.py:12"): config() names it when it refuses a change.
_opened_by = ""


def _get_session() -> Session:
    global _session
    with _lock:
        if _session is None:
            _session = Session()
            _shared.session = _session
        return _session


def _program_frame():
    """The program's frame that called into the package (the first frame
    outside the package's folder), None if none."""
    def ours(code) -> bool:
        folder = os.path.dirname(os.path.abspath(code.co_filename))
        return folder == PACKAGE_DIR or folder.startswith(PACKAGE_DIR + os.sep)

    f = sys._getframe(1)
    while f is not None and ours(f.f_code):
        f = f.f_back
    return f


def _program_line() -> str:
    """file:line of the program's call into the package."""
    f = _program_frame()
    return f"{f.f_code.co_filename}:{f.f_lineno}" if f is not None else ""


def session(opener: str = "") -> Session:
    """The session of this process, created on first use (by the API);
    opener: the public call that needs it ("msmemscope.start()")."""
    global _opened_by
    if _session is None and opener:
        with _lock:
            if _session is None:
                where = _program_line()
                s = _get_session()
                _opened_by = opener + (f" at {where}" if where else "")
                return s
    return _get_session()


def steps_from_step_on() -> None:
    _shared.step_on = True


def auto_steps() -> bool:
    """A script under the CLI that does not call msmemscope.step() (and no
    --step-on): each optimizer step ends a step, as msmemscope.step() would."""
    return _shared.auto_steps()


def boot() -> None:
    """The CLI's interpreter-start hook (_boot.py): join the session and
    start the Python-side collectors, as `import msmemscope` does, before
    the program runs; PyTorch's once it is imported."""
    s = _get_session()
    if not s.cli or not _ext.attached():
        return
    _shared.booted = True
    if _ext.collecting():
        from . import _collect
        _collect.enable_for_range()


def active_session() -> Optional[Session]:
    return _session


# How the process ends, as far as the atexit handler can tell (the exit
# status does not exist yet then: CPython runs the atexit handlers before it,
# and a SystemExit's code is taken, and the exception dropped, before them).
# Needed where the stream is not left to exit() (Session.shutdown): an
# uncaught KeyboardInterrupt ends the process by SIGINT, never calling exit()
# (CPython prints it through sys.excepthook, called then with no Python frame
# below it); an exception that reached the top of the main program exits 1.
_uncaught: Optional[type] = None
_END_EXIT, _END_SIGNAL = 1, 3  # capture_format.h EndKind


def _watch_uncaught() -> None:
    previous = sys.excepthook

    def excepthook(kind, value, tb):
        global _uncaught
        try:
            sys._getframe(1)
        except ValueError:  # no caller: CPython's own report of an exception that ended the program
            if threading.current_thread() is threading.main_thread():
                _uncaught = kind
        return previous(kind, value, tb)

    sys.excepthook = excepthook


def _how_python_ends():
    """(end_kind, end_code) for _ext.detach: (0, 0) when not known."""
    # (-i or PYTHONINSPECT: the interpreter goes on with a prompt after it)
    if _uncaught is None or sys.flags.inspect or os.environ.get("PYTHONINSPECT"):
        return 0, 0
    if issubclass(_uncaught, KeyboardInterrupt):
        import signal
        return _END_SIGNAL, int(signal.SIGINT)
    return _END_EXIT, 1


def _at_exit() -> None:
    from . import _collect
    _collect.before_exit()
    try:
        _collect.disable_all()
    except Exception:  # never fail the user's exit
        pass
    s = _session
    if s is not None:
        s.shutdown(at_exit=True)


atexit.register(_at_exit)


def on_import() -> None:
    """Under the CLI in immediate mode collection is already on when the
    package is imported: the Python-side collectors join at once."""
    if not under_cli():
        return
    try:
        _get_session()
        if _ext.collecting():
            from . import _collect
            _collect.enable_for_range()
    except Exception as e:  # never break the user's import
        warnings.warn(f"msmemscope: cannot join the CLI's session: {e}")
