"""Offline analysis through the command line's offline mode
(``msmemscope --analyze=NAME --input=FILE``): the analyzer plugins (built-in
and third-party) run on a dump file. Used by ``analyze()`` and by
``msmemscope.analyzer`` (the upstream-style classes)."""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
import warnings
from typing import Any, Dict, List, Optional

from . import _session

__all__ = ["analyzer_plugins", "plugin_schema", "run", "check_input", "options"]


def _plugins() -> List[dict]:
    return _session.config_module().list_plugins(_session.PREFIX, _session._plugin_paths)


def analyzer_plugins() -> List[str]:
    """Names of every analyzer plugin found (built-in and third-party), sorted."""
    return sorted(p["name"] for p in _plugins() if p["kind"] == "analyzer")


def plugin_schema(name: str) -> Dict[str, dict]:
    """The options of analyzer plugin ``name``: {option: {type, default,
    allowed, min, max, description}}."""
    for p in _plugins():
        if p["kind"] == "analyzer" and p["name"] == name:
            return {o["name"]: {k: v for k, v in o.items() if k != "name"} for o in p["options"]}
    # a plugin found but refused (often the user's own, from
    # config(plugin_path=...): built for another ABI, without its entry
    # symbol...): why, as the command line says it when it is selected
    why = _session.config_module().refusal_of(_session.PREFIX, _session._plugin_paths, name)
    if why is not None:
        raise ValueError(f"msmemscope.analyze: plugin '{name}' cannot be loaded: {why}")
    names = analyzer_plugins()
    raise ValueError(f"msmemscope.analyze: unknown analyzer '{name}' "
                     f"(available: {', '.join(names) if names else 'none found'})")


def _offline_option() -> Optional[str]:
    """The CLI's offline-analysis option, if this build's CLI has one."""
    _session._paths.checked_host()  # as root: refused unless root's own (#29)
    try:
        text = subprocess.run([_session.CLI, "--help"], capture_output=True, text=True, timeout=60).stdout
    except OSError:
        return None
    for opt in ("--analyze", "--offline", "--analyse"):
        if re.search(r"^\s+" + re.escape(opt) + r"(=|\s)", text, re.M):
            return opt
    return None


def _caller_level() -> int:
    """warnings.warn's stacklevel that names the user's line: the first
    frame outside this package (seen from warn's caller)."""
    import sys
    here = os.path.dirname(os.path.abspath(__file__)) + os.sep
    level, f = 1, sys._getframe(1)
    while f is not None and os.path.abspath(f.f_code.co_filename).startswith(here):
        level += 1
        f = f.f_back
    return level


# What the CLI says about its own command line, in the words of
# analyze()'s and check_inefficient()'s caller, who gave no options:
# --input is their input_path, --analyze what they called, --plugin-option
# the options config(plugin_options=...) set (the call's own keywords are
# named as keywords: _error_of), --output the folder config(output=...) named.
_API_PREFIXES = (("--input: ", "input_path: "), ("--analyze: ", ""), ("--plugin-option: ", "plugin_options: "),
                 ("--output: ", "output: "))
_ERROR = "msmemscope: error: "


def _in_api_words(text: str) -> str:
    for cli, api in _API_PREFIXES:
        if text.startswith(cli):
            return api + text[len(cli):]
    return text


# The CLI's warnings (about the input, results it could not write back
# into it, plugins it refused) and the analyzer plugins' own (which the host
# writes as "[msmemscope] warning:"), already in config()'s words under
# --python-api.
_WARNINGS = ("msmemscope: warning: ", "[msmemscope] warning: ")
# The CLI's warnings about its own process, not the user's analysis (a
# plugin it then refuses is named by a warning of its own).
_PROCESS_WARNINGS = ("running as root: ",)


def _warnings_of(stderr: str) -> List[str]:
    """The lines of the CLI's stderr that are warnings to the analysis'
    user, without their prefix, in the words of the function's caller."""
    found = []
    for line in stderr.splitlines():
        for prefix in _WARNINGS:
            if line.startswith(prefix):
                text = line[len(prefix):]
                if not text.startswith(_PROCESS_WARNINGS):
                    found.append(_in_api_words(text))
                break
    return found


def _error_of(stderr: str, stdout: str, analyzer: str, options: Dict[str, str]) -> str:
    """What the CLI said when it failed: its error lines (not the warnings
    before them), in the words of the function's caller."""
    errors = [line[len(_ERROR):] for line in stderr.splitlines() if line.startswith(_ERROR)]
    if not errors:
        return stderr.strip() or stdout.strip()
    said = []
    for text in errors:
        # a value the CLI refused is one of this function's keywords, which it
        # was given as --plugin-option=ANALYZER.KEY=VALUE
        for k in options:
            prefix = f"--plugin-option: {analyzer}.{k}: "
            if text.startswith(prefix):
                text = f"{k}: " + text[len(prefix):]
        said.append(_in_api_words(text))
    return "\n".join(said)


# The CLI's exit status when it refused its command line (an option's
# value, or an --input that is not a dump it can read): a value the
# caller gave, a ValueError as config() raises for one. Any other failure
# (an analyzer dropped, the results not written back) is a RuntimeError.
_REFUSED = 2


def _configured_options(analyzer: str, given: Dict[str, str]) -> Dict[str, str]:
    """The options of `analyzer` that msmemscope.config(plugin_options=...)
    set (or the command line, for a program it runs), less those the call
    gives itself: a keyword of analyze() is the user's latest word. Only
    the analyzer's own: a sink's or collector's options, set for the
    sessions, would each be warned of as having no effect here."""
    with _session._lock:
        configured = dict(_session._plugin_options.get(analyzer, {}))
    return {k: v for k, v in configured.items() if k not in given}


def _output_folder() -> str:
    """Where the analyzers' own files go (the leak list past max_lines,
    watch's checkpoint hashes), which their lines name: the folder
    msmemscope.config(output=...) names (memscopeDumpResults unless set),
    as the command line's --output, resolved from the folder config() was
    called in, as a session's. Said as config() was given it when that is
    the current folder (the CLI names the folder as it was given)."""
    out = _session.current_config()["output"]
    with _session._lock:
        base = _session._output_base if _session._output_base is not None and "output" in _session._values else None
    if base is None or os.path.isabs(out):
        return out
    try:
        if os.path.samefile(base, os.getcwd()):
            return out
    except OSError:
        pass
    return os.path.join(base, out)


def run(func: str, analyzer: str, input_path: str, options: Dict[str, str], shown_as: Optional[str] = None,
        writes_files: bool = True) -> str:
    """Runs the CLI's offline analysis; returns its standard output. The
    analyzers' own files go into config()'s output folder, as the command
    line's go into --output: the CLI makes it only to write one, so the
    files its lines name are there to open. An analysis that writes none
    (`writes_files` False: its results go back into the input) is given a
    private temporary folder instead, so that an output folder it cannot
    make (a read-only current folder) does not stop it. What
    the CLI and the analyzer plugins warn of (a dump without the rows an
    analysis needs, what a plugin found odd in it) becomes a Python
    warning, naming the input as `shown_as` (the user's file, where
    input_path is a temporary copy of it). Raises ValueError for a value
    the CLI refused (an option, or an input that is not a dump it reads),
    RuntimeError when the analysis failed. `options` are the call's own;
    those config(plugin_options=...) set for the analyzer apply under them."""
    opt = _offline_option()
    if opt is None:
        raise RuntimeError(f"msmemscope.{func}: needs the command line's offline analysis mode, which "
                           f"{_session.CLI} does not have ('msmemscope --help' lists no --analyze option)")
    unused_dir = None if writes_files else tempfile.mkdtemp(prefix="msmemscope_offline_")
    # --python-api: what the CLI says names config()'s keys (call_stack="c",
    # 'events'), not its options, as it does to a session's program
    args = [_session.CLI, f"{opt}={analyzer}", f"--input={input_path}",
            f"--output={_output_folder() if unused_dir is None else unused_dir}", "--python-api"]
    # the plugin folders config(plugin_path=...) added (and the command
    # line's, under it): the analyzers list_analyzers() and
    # plugin_schema() found there
    args += [f"--plugin-path={p}" for p in _session._plugin_paths]
    # config()'s options of the analyzer, as an online session passes them
    # (--plugin-option=NAME.KEY=VALUE), then the call's own
    args += [f"--plugin-option={analyzer}.{k}={v}"
             for k, v in list(_configured_options(analyzer, options).items()) + list(options.items())]
    try:
        p = subprocess.run(args, capture_output=True, text=True)
    finally:
        if unused_dir is not None:
            shutil.rmtree(unused_dir, ignore_errors=True)

    def said(text: str) -> str:
        # the user's file, not the temporary copy the CLI read
        return text.replace(input_path, shown_as) if shown_as is not None else text

    # (before a failure too: what was odd in the input may be why it failed)
    for text in _warnings_of(p.stderr):
        warnings.warn(f"msmemscope.{func}: {said(text)}", stacklevel=_caller_level())
    if p.returncode != 0:
        error = ValueError if p.returncode == _REFUSED else RuntimeError
        raise error(f"msmemscope.{func}: {said(_error_of(p.stderr, p.stdout, analyzer, options))}")
    return p.stdout


def check_input(func: str, input_path: Any) -> str:
    if not isinstance(input_path, (str, os.PathLike)):
        raise TypeError(f"msmemscope.{func}: 'input_path' must be a path string, got {type(input_path).__name__}")
    path = os.fspath(input_path)
    if not os.path.exists(path):
        raise FileNotFoundError(f"msmemscope.{func}: input_path '{path}' does not exist "
                                f"(allowed: a memscope_dump .csv or .db file, or a folder with one)")
    if os.path.isfile(path) and not path.endswith((".csv", ".db")):
        raise ValueError(f"msmemscope.{func}: input_path '{path}' is not a .csv or .db dump file")
    return path


def options(func: str, analyzer: str, kwargs: Dict[str, Any]) -> Dict[str, str]:
    schema = plugin_schema(analyzer)
    out = {}
    for k, v in kwargs.items():
        if k not in schema:
            raise TypeError(f"msmemscope.{func}: analyzer '{analyzer}' has no option '{k}' "
                            f"(options: {', '.join(schema) if schema else 'none'})")
        if isinstance(v, (list, tuple)):
            v = ",".join(str(x) for x in v)
        elif isinstance(v, bool):
            v = "true" if v else "false"
        out[k] = str(v)
    return out
