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

Functions: config, start, stop, step, take_snapshot, RecordFunction,
tracer.start/stop, describe.describer, watcher.watch/remove, and offline:
list_analyzers, get_analyzer_config, analyze, check_leaks, check_inefficient.
"""
from __future__ import annotations

from . import _session
from ._api import (RecordFunction, analyze, check_inefficient, check_leaks, config, get_analyzer_config,
                   list_analyzers, start, step, stop, take_snapshot)
from . import describe, tracer, watcher

__version__ = _session._paths.VERSION
__all__ = ["config", "start", "stop", "step", "take_snapshot", "RecordFunction", "tracer", "describe", "watcher",
           "list_analyzers", "get_analyzer_config", "analyze", "check_leaks", "check_inefficient"]

_session.on_import()
