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
from ._api import RecordFunction, TakeSnapshot, config, start, step, stop, take_snapshot
from ._hooks import cleanup_framework_hooks, enable_npu_sanitizer, init_framework_hooks
from . import describe, tracer, watcher

# The offline analyzers (sqlite3, inspect, pathlib...) load when first used:
# a program under the CLI imports this package at its start (issue #30).
_ANALYZER_NAMES = ("analyze", "check_inefficient", "check_leaks", "get_analyzer_config", "list_analyzers")


def __getattr__(name):
    if name == "analyzer" or name in _ANALYZER_NAMES:
        import importlib

        analyzer = importlib.import_module(__name__ + ".analyzer")  # binds msmemscope.analyzer too
        return analyzer if name == "analyzer" else getattr(analyzer, name)
    raise AttributeError(f"module 'msmemscope' has no attribute '{name}'")


def __dir__():
    return sorted(set(globals()) | {"analyzer", *_ANALYZER_NAMES})

__version__ = _session._paths.VERSION
__all__ = ["config", "start", "stop", "step", "take_snapshot", "TakeSnapshot", "RecordFunction", "tracer",
           "describe", "watcher", "analyzer", "init_framework_hooks", "cleanup_framework_hooks",
           "enable_npu_sanitizer", "list_analyzers", "get_analyzer_config", "analyze", "check_leaks",
           "check_inefficient"]

_session.on_import()
