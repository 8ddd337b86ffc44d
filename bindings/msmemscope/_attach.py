"""The Python side of ``msmemscope --attach=PID`` (framework/host/attach.h).

The agent, injected into a running CPython interpreter, runs ``run()`` as a
pending call (Py_AddPendingCall: on the main thread, between two bytecodes,
with the GIL held). It joins the session the agent opened, as the CLI's
interpreter-start hook does (_boot.py), and starts the Python-side
collectors: Python stacks and trace as the options ask, PyTorch's operators,
tensor storage, owners and optimizer steps (each optimizer step ends a step,
as in a plain script under the CLI). The CPU tensors alive at the attach are
written as shadow rows, as ``collect-mode=deferred`` does at ``start()``.

``finish()`` runs the same way at the detach: the collectors are taken out
(operator tracking, trace, wrappers' work), so that the program runs on at
its own speed.

Nothing here may disturb the program: every failure is one warning, never
an exception into the program's code. The warning goes to the user who
attached, not to the program's stderr (which is the program's own, often
not where that user looks): it is a SYSTEM row named "msmemscope.warning" in
the capture (framework/host/process_run.h kProgramWarningEventName), which
the host logs and warns of in its summary. Only when no row can be written
(the agent cannot be reached) is it written on stderr.

Both run with the agent's hooks off on the main thread (the agent's py_start
and py_stop, framework/agent/attach.cpp), as ``start()``'s own work does
(``_ext.without_hooks``): the package's imports and the search for the
existing tensors are not the program's memory; the shadow rows are written
all the same.
"""
from __future__ import annotations

import sys

_started = False


WARNING = "msmemscope.warning"  # framework/host/process_run.h kProgramWarningEventName


def _warn(what: str, e: BaseException) -> None:
    text = f"{what}: {e}"
    if not _to_host(text):
        sys.stderr.write(f"msmemscope: warning: {text}\n")


def _to_host(text: str) -> bool:
    """Writes text as a warning row of the capture; False when it cannot
    (the package or the agent is what failed)."""
    try:
        from . import _session, _shared
        ext = _shared.ext
        if not ext.agent_loaded():
            _session._load_agent()  # the agent the attach injected (run() failed before it found it)
        if not ext.attached():
            return False
        ext.event(ext.EV["SYSTEM"], ext.T["NONE"], ext.DEV["NA"], -1, 0, 0, 0, 0, WARNING, text)
        return True
    except Exception:
        return False


def _torch_imported() -> None:
    try:
        from . import _collect, _shared
        if _shared.ext.collecting():
            _collect.enable_for_range()
    except Exception as e:  # never break the program's import of torch
        _warn("the PyTorch collector did not start", e)


def run() -> None:
    """Called once by the agent after the attach."""
    global _started
    try:
        from . import _api, _collect, _session, _shared
        _shared.attached = True
        _session._get_session()
        _shared.booted = True  # a plain script: optimizer steps end the steps
        _started = True
        if not _shared.ext.collecting():
            return  # detached already (--attach-steps reached before this ran)
        _collect.enable_for_range()
        _api._report_existing_tensors()
        if "torch" not in sys.modules:
            from ._after_import import AfterImport
            AfterImport({"torch": lambda module: _torch_imported()}).install()
    except Exception as e:
        _warn("the Python-side collectors did not start after the attach", e)


def finish() -> None:
    """Called by the agent at the detach, before collection stops."""
    if not _started:
        return
    try:
        from . import _collect
        _collect.disable_all()
    except Exception as e:
        _warn("the Python-side collectors were not all taken out at the detach", e)
