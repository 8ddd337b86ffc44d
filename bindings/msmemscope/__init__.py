"""msmemscope: memory profiling from Python (compatible with msMemScope's API).

    import msmemscope
    msmemscope.config(device="cpu", events="alloc,free,launch", analysis="leaks,decompose",
                      output="./out")
    msmemscope.start()
    for batch in data:
        train_step(batch)
        msmemscope.step()
    msmemscope.stop()

Started with plain ``python3 train.py`` the first start() launches a host
process (``msmemscope --serve-session``) that writes the output files, and
installs the memory hooks into this process (no LD_PRELOAD needed). Under the
CLI (``msmemscope [options] python3 train.py``) the CLI's host and options
are used. Files: ``<output>/msmemscope_{PID}_{ts}_{backend}/device_*/dump/``.

Functions: config, start, stop, step, take_snapshot / TakeSnapshot,
RecordFunction, tracer.start/stop, describe.describer, watcher.watch/remove,
init_framework_hooks / cleanup_framework_hooks, enable_npu_sanitizer, and
offline: the ``analyzer`` module (LeaksAnalyzer, LeaksConfig,
InefficientAnalyzer, InefficientConfig), check_leaks, check_inefficient,
list_analyzers, get_analyzer_config, analyze.
"""
from __future__ import annotations

from . import _session
# Small, and used inside traced regions (a first import there would trace
# the import machinery's calls): loaded with the package.
from . import describe, tracer

# Under the CLI every Python process imports this package at its start
# (_boot.py), before the program's first line: only the session and what
# it starts load then. The API (with ctypes, dis and the CUDA side), the
# framework hooks and the watcher load when first used (the same objects:
# ``from msmemscope import config`` and ``msmemscope.config`` both work);
# the offline analyzers (sqlite3, inspect, pathlib...) too (issue #30).
# Only the API and the tracer start a trace from the program, so these are
# loaded by then (a CLI run with events=traceback traces a first use's import
# like any other import of the program).
_API_NAMES = ("RecordFunction", "TakeSnapshot", "config", "finish", "start", "step", "stop", "take_snapshot")
_HOOK_NAMES = ("cleanup_framework_hooks", "enable_npu_sanitizer", "init_framework_hooks")
_SUBMODULES = ("watcher",)
_ANALYZER_NAMES = ("analyze", "check_inefficient", "check_leaks", "get_analyzer_config", "list_analyzers")


def __getattr__(name):
    if name in _API_NAMES:
        module, names = "_api", _API_NAMES
    elif name in _HOOK_NAMES:
        module, names = "_hooks", _HOOK_NAMES
    elif name in _SUBMODULES or name == "analyzer":
        module, names = name, ()
    elif name in _ANALYZER_NAMES:
        module, names = "analyzer", _ANALYZER_NAMES
    else:
        raise AttributeError(f"module 'msmemscope' has no attribute '{name}'")
    # import_module, not ``from . import``: that asks this function for the
    # name first. Importing a submodule binds msmemscope.<module> too.
    import importlib

    source = importlib.import_module(f"{__name__}.{module}")
    # All of a module's names at once, as plain attributes from now on: the
    # program's next call (msmemscope.stop() inside a traced region) runs
    # no import machinery.
    for n in names:
        globals()[n] = getattr(source, n)
    return source if module == name else globals()[name]


def __dir__():
    return sorted(set(globals()) | {"analyzer", *_API_NAMES, *_HOOK_NAMES, *_SUBMODULES, *_ANALYZER_NAMES})

__version__ = _session._paths.VERSION
__all__ = ["config", "start", "stop", "step", "finish", "take_snapshot", "TakeSnapshot", "RecordFunction", "tracer",
           "describe", "watcher", "analyzer", "init_framework_hooks", "cleanup_framework_hooks",
           "enable_npu_sanitizer", "list_analyzers", "get_analyzer_config", "analyze", "check_leaks",
           "check_inefficient"]

_session.on_import()
