"""Python function trace (upstream's ``msmemscope.tracer``; prefer
``config(events="traceback")``, which records the same rows between
``start()`` and ``stop()``).

Rows go to ``device_*/dump/python_trace_{ts}.csv``:
``FuncInfo,StartTime(ns),EndTime(ns),Thread Id,Process Id`` with FuncInfo
``file(line): func``, ``nn.Module: ClassName`` or a RecordFunction label.
Traced: the thread that calls start(), from that call on.
"""
from __future__ import annotations

from . import _collect, _session

__all__ = ["start", "stop"]


def start() -> None:
    """Starts tracing Python calls of the calling thread (works without
    msmemscope.start(); opens the session if needed)."""
    _session.session("msmemscope.tracer.start()")
    _collect.tracer_start()


def stop() -> None:
    """Stops tracing started by tracer.start()."""
    _collect.tracer_stop()
