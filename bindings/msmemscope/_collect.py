"""The Python-side collectors, switched with the collection range.

* Python trace (events "traceback", or tracer.start()): a C profile function
  (PyEval_SetProfile) on every thread records one PY_TRACE event per
  returning call; its shadow stacks also serve --call-stack=python (which,
  alone, reads the interpreter's frames on CPython 3.11 instead). Threads
  running at start() get it at once, threads started later through
  ``threading`` from a ``threading.setprofile`` hook at their first call;
* PyTorch (when torch is imported): aten operators (OP_LAUNCH ATEN_START /
  ATEN_END, ACCESS READ/WRITE) through a TorchDispatchMode, CPU tensor
  storage as the framework pool (MALLOC/FREE PTA), module calls in the trace.
"""
from __future__ import annotations

import os
import sys
import threading
import time

from ._shared import PACKAGE_DIR, ext as _ext  # never the session: it imports this module

_lock = threading.RLock()
_state = {"trace": False, "tracer": False, "torch": False, "thread_hook": False, "draining": False}


def _wants(cls: str) -> bool:
    return bool(_ext.wants(cls))


def _wants_python_stack() -> bool:
    return "python" in _ext.option("call_stack")


def _thread_bootstrap(frame, event, arg):  # threading.setprofile hook
    """First event of a thread started after tracing began: replaces this
    Python-level hook with the C profile function on that thread."""
    if not _ext.profile_install_thread():
        sys.setprofile(None)


def _install(emit: bool, forced: bool) -> None:
    # threading.setprofile is a Python call: made while no trace is on, so
    # that it is not in the trace itself. Not needed where stacks alone are
    # read from the interpreter's frames (no profile function at all).
    if _ext.profile_function_needed(emit, forced) and not _state["thread_hook"]:
        threading.setprofile(_thread_bootstrap)
        _state["thread_hook"] = True
    _ext.profile_install(emit, forced, [PACKAGE_DIR + os.sep])


def _uninstall() -> None:
    _state["draining"] = False
    _ext.profile_uninstall()
    if _state["thread_hook"]:
        threading.setprofile(None)
        _state["thread_hook"] = False


def enable_for_range() -> None:
    """Called at start(): turn on what the configuration asks for."""
    with _lock:
        trace = _wants("traceback")
        if trace or _wants_python_stack() or _state["tracer"]:
            _install(trace or _state["tracer"], _state["tracer"])
            _state["trace"] = True
        elif _state["draining"]:
            _uninstall()  # the last range's functions, not wanted in this one
        _state["draining"] = False
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
            if _wants("traceback"):
                # A call the range recorded that is still running returns
                # in a later range with its own start (py_trace.h).
                _ext.profile_range_stop()
                _state["draining"] = True
            else:
                _uninstall()
            _state["trace"] = False


def tracer_start() -> None:
    with _lock:
        _state["tracer"] = True
        _install(True, True)
        _state["trace"] = True


def tracer_stop() -> None:
    with _lock:
        _state["tracer"] = False
        if _ext.collecting() and (_wants("traceback") or _wants_python_stack()):
            _install(_wants("traceback"), False)
            _ext.profile_stop_emit(True)
            if not _wants("traceback"):
                _ext.profile_stop_emit(False)
        else:
            _uninstall()
            _state["trace"] = False


def trace_on() -> bool:
    return _state["tracer"] or (_state["trace"] and _ext.collecting() and _wants("traceback"))


def disable_all() -> None:
    with _lock:
        _state["tracer"] = False
        disable_for_range()
        if _state["trace"] or _state["draining"]:
            _uninstall()
            _state["trace"] = False


# How long the exit waits, in all, for the feeder threads of closed
# multiprocessing queues (before_exit).
FEEDER_WAIT_S = 1.0


def _join_closed_queue_feeders(timeout: float) -> None:
    """Waits (at most timeout seconds in all) for the feeder threads of the
    multiprocessing queues that were closed: by the program, or at the exit
    by multiprocessing's own handler, which ran before this one. A feeder
    ends once it has flushed its buffer into the pipe, but a queue whose
    join was cancelled (cancel_join_thread(), as a DataLoader does with its
    queues, in the program and in each worker) is not waited for, and a
    feeder still running when the interpreter finalizes is abandoned: CPython
    never frees what that thread referenced (the queue's buffer, locks and
    conditions, the thread itself), which was then reported at random as
    host memory still allocated at exit. A feeder of a queue never closed
    would wait for ever: it is left alone (its queue's close finalizer, which
    holds its buffer, is still registered)."""
    queues = sys.modules.get("multiprocessing.queues")
    util = sys.modules.get("multiprocessing.util")
    if queues is None or util is None:
        return
    not_closed = {id(f._args[0]) for f in list(util._finalizer_registry.values())
                  if getattr(f, "_callback", None) is queues.Queue._finalize_close and f._args}
    deadline = time.monotonic() + timeout
    for t in threading.enumerate():
        if t is threading.current_thread() or not t.daemon:
            continue
        try:
            if t._target is not queues.Queue._feed or id(t._args[0]) in not_closed:
                continue
        except AttributeError:  # its run() has returned (Thread.run drops _target): it is ending
            if t.name != "QueueFeederThread":
                continue
        t.join(max(0.0, deadline - time.monotonic()))


def before_exit() -> None:
    """At the interpreter's exit, after the program's atexit handlers and
    before collection ends: what the interpreter would otherwise abandon or
    keep of the multiprocessing and DataLoader machinery is released while
    its frees are still recorded, so that host memory still allocated at
    exit is the program's."""
    if not _ext.collecting():
        return
    try:
        _join_closed_queue_feeders(FEEDER_WAIT_S)
        if _state["torch"]:
            from . import _torch
            _torch.before_exit()
    except Exception:  # never fail the user's exit
        pass
