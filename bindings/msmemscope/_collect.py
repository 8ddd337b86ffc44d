"""The Python-side collectors, switched with the collection range.

* Python trace (events "traceback", or tracer.start()): a C profile function
  (PyEval_SetProfile) records one PY_TRACE event per returning call; its
  shadow stack also serves --call-stack=python;
* PyTorch (when torch is imported): aten operators (OP_LAUNCH ATEN_START /
  ATEN_END, ACCESS READ/WRITE) through a TorchDispatchMode, CPU tensor
  storage as the framework pool (MALLOC/FREE PTA), module calls in the trace.
"""
from __future__ import annotations

import os
import sys
import threading

from ._session import PACKAGE_DIR, _ext

_lock = threading.RLock()
_state = {"trace": False, "tracer": False, "torch": False}


def _wants(cls: str) -> bool:
    return bool(_ext.wants(cls))


def _wants_python_stack() -> bool:
    return "python" in _ext.option("call_stack")


def enable_for_range() -> None:
    """Called at start(): turn on what the configuration asks for."""
    with _lock:
        trace = _wants("traceback")
        if trace or _wants_python_stack() or _state["tracer"]:
            _ext.profile_install(trace or _state["tracer"], _state["tracer"], [PACKAGE_DIR + os.sep])
            _state["trace"] = True
        if "torch" in sys.modules and (_wants("launch") or _wants("access") or _wants("alloc") or trace):
            from . import _torch
            _torch.enable(trace)
            _state["torch"] = True


def disable_for_range() -> None:
    """Called at stop()."""
    with _lock:
        if _state["torch"]:
            from . import _torch
            _torch.disable()
            _state["torch"] = False
        if _state["trace"] and not _state["tracer"]:
            _ext.profile_uninstall()
            _state["trace"] = False


def tracer_start() -> None:
    with _lock:
        _state["tracer"] = True
        _ext.profile_install(True, True, [PACKAGE_DIR + os.sep])
        _state["trace"] = True


def tracer_stop() -> None:
    with _lock:
        _state["tracer"] = False
        if _ext.collecting() and (_wants("traceback") or _wants_python_stack()):
            _ext.profile_install(_wants("traceback"), False, [PACKAGE_DIR + os.sep])
            _ext.profile_stop_emit(True)
            if not _wants("traceback"):
                _ext.profile_stop_emit(False)
        else:
            _ext.profile_uninstall()
            _state["trace"] = False


def trace_on() -> bool:
    return _state["tracer"] or (_state["trace"] and _ext.collecting() and _wants("traceback"))


def disable_all() -> None:
    with _lock:
        _state["tracer"] = False
        disable_for_range()
        if _state["trace"]:
            _ext.profile_uninstall()
            _state["trace"] = False
