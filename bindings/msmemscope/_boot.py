"""Interpreter-start hook of a Python program run under the msmemscope CLI.

The CLI writes a small ``sitecustomize.py`` (in its session folder); in every
process of the run that is a CPython interpreter, however it was started, the
agent puts that folder and this package first on the import path (PYTHONPATH,
framework/agent/python_boot.h). That file restores the program's own
PYTHONPATH in os.environ and calls run(), which

* joins the CLI's session and starts the Python-side collectors the CLI's
  options ask for (Python stacks, the trace) before the program's first
  line, and PyTorch's (aten operators, tensor storage as PTA, owners,
  optimizer steps as steps) as soon as the program imports torch: a plain
  ``python3 train.py`` is tracked like a script that uses the API;
* when the host heap is collected (``--device=cpu``), marks the imports of
  the Python installation's modules (standard library, site-packages) as
  import scopes for the agent (host_heap.python_imports=fold, the default;
  framework/agent/import_fold.h): their host blocks get no rows of their
  own, those still live when the import ends become shadow MALLOC rows;
* then the CLI's file runs the sitecustomize that was next on the path (the
  program's or the system's own), exactly as Python would have without us,
  outside this boot (what it keeps is the program's).

Nothing here may stop the program: a failure is one warning on stderr.
"""
from __future__ import annotations

import atexit
import importlib._bootstrap
import os
import site
import sys
import threading

from ._after_import import AfterImport


def _warn(what: str, e: BaseException) -> None:
    sys.stderr.write(f"msmemscope: warning: {what}: {e}\n")


class _ImportScopes:
    """Wraps the import machinery's _load_unlocked (which creates and runs a
    module that is not loaded yet): loading a module of the Python
    installation (origin built-in, frozen, or under sys.prefix, the base
    prefixes, site-packages or this package) is an import scope for the
    agent, and so is everything it imports in turn. The program's own
    modules are not: their allocations are recorded as usual (the
    installation's modules they import get their own scopes).

    While an outermost scope runs, the thread's profile function (Python
    stacks) is off unless trace records are wanted (ext.profile_pause,
    bindings/src/py_trace.h): the import machinery's calls need no stack of
    their own, and a stack asked for meanwhile is read from the interpreter's
    frames."""

    def __init__(self, ext):
        self.ext = ext
        self.local = threading.local()
        roots = {sys.prefix, sys.exec_prefix, getattr(sys, "base_prefix", sys.prefix),
                 getattr(sys, "base_exec_prefix", sys.exec_prefix), os.path.dirname(os.path.abspath(__file__))}
        try:
            roots.update(site.getsitepackages())
            roots.add(site.getusersitepackages())
        except Exception:  # a trimmed site module (virtualenv's old one)
            pass
        self.roots = tuple(os.path.join(os.path.realpath(r), "") for r in roots if r)

    def installation(self, spec) -> bool:
        origin = getattr(spec, "origin", None)
        if not origin or origin in ("built-in", "frozen") or not os.path.isabs(origin):
            return True
        return os.path.realpath(origin).startswith(self.roots)

    def after(self, callback) -> None:
        """Runs callback now, or once this thread's outermost scope ended."""
        if getattr(self.local, "depth", 0):
            self.local.pending = getattr(self.local, "pending", []) + [callback]
        else:
            callback()

    def install(self) -> None:
        bootstrap = importlib._bootstrap
        original = bootstrap._load_unlocked
        local, ext, scopes = self.local, self.ext, self

        def _load_unlocked(spec):
            depth = getattr(local, "depth", 0)
            if depth == 0 and not scopes.installation(spec):
                return original(spec)
            local.depth = depth + 1
            paused = depth == 0 and ext.profile_pause()
            ext.import_enter()
            try:
                return original(spec)
            finally:
                ext.import_leave()
                if paused:
                    ext.profile_resume()
                local.depth = depth
                if depth == 0 and getattr(local, "pending", None):
                    due, local.pending = local.pending, []
                    for callback in due:
                        callback()

        bootstrap._load_unlocked = _load_unlocked


_scopes = None


def _import_scopes(ext) -> None:
    """Installs the import scopes when the host heap is collected and
    host_heap.python_imports is fold (the default)."""
    global _scopes
    if "host_heap" not in ext.option("collectors").split(",") or not ext.import_scopes():
        return
    mode = ext.option("host_heap.python_imports") or "fold"
    if mode != "fold":
        return
    _scopes = _ImportScopes(ext)
    _scopes.install()
    # Registered first, so it runs after the program's own atexit handlers:
    # the interpreter then tears its modules down (frees without stacks).
    atexit.register(ext.import_finalizing)


def _torch_imported() -> None:
    if _scopes is not None:
        # The PyTorch collector starts once the import that brought torch in
        # has ended (its host blocks are shadow rows by then).
        return _scopes.after(_torch_imported_now)
    _torch_imported_now()


def _torch_imported_now() -> None:
    try:
        from . import _session, _collect
        if _session._ext.collecting():
            _collect.enable_for_range()
    except Exception as e:  # never break the program's import of torch
        _warn("the PyTorch collector did not start", e)


def _step_on(session) -> None:
    """--step-on=module:function: those functions' returns end the steps
    (msmemscope/_step_on.py), instead of the optimizer's."""
    text = session._ext.option("step_on")
    if not text:
        return  # the module (and its imports) only loads when asked for
    from . import _step_on as step_on

    def mark() -> None:
        from . import _cuda
        _cuda.flush()  # the caching allocator's blocks of this step before its mark
        session._ext.step()

    if step_on.install(text, mark):
        session.steps_from_step_on()


def _start() -> None:
    if not os.environ.get("MSMEMSCOPE_SESSION"):
        return
    from . import _session, _shared
    try:
        _session.boot()
    except RuntimeError as e:
        if "not profiled" not in str(e):
            _warn("cannot join the msmemscope session", e)
        return
    if not _shared.booted:
        return
    try:
        _import_scopes(_session._ext)
    except Exception as e:
        _warn("the import scopes were not installed (every import-time allocation is recorded)", e)
    try:
        _step_on(_session)
    except Exception as e:
        _warn("--step-on was not installed (steps come from optimizer steps)", e)
    if "torch" in sys.modules:
        _torch_imported()
    else:
        AfterImport({"torch": lambda module: _torch_imported()}).install()


def _ext():
    """The native extension, or None where it cannot load (a broken build):
    the start-up's bookkeeping below then does without it."""
    try:
        from ._shared import ext
        return ext
    except Exception:
        return None


def _quietly(restore_environment) -> None:
    """Runs the sitecustomize's restore_environment with the agent's hooks
    off: the strings libc's setenv keeps until exit are the profiler's
    doing, never a leak of the program's."""
    ext = _ext()
    if ext is None:
        return restore_environment()
    ext.without_hooks(restore_environment)


def _startup_ends() -> None:
    """Where the interpreter's start-up ends, the agent stops giving host
    blocks a C stack no one asked for (sdk/include/msmemscope/agent.h,
    msms_agent_python_started); what the start-up keeps until exit is then
    known by its site: the interpreter's, or msmemscope's own modules. A
    program CPython's main runs (sys.orig_argv) starts at its first line
    (an audit hook: Py_RunMain's own set-up is start-up too); an embedding
    program's Python, when this boot is done."""
    ext = _ext()
    if ext is not None and not (getattr(sys, "orig_argv", None) and ext.end_startup_at_program()):
        ext.python_started()


def program_code(running: bool) -> None:
    """The CLI's sitecustomize runs the program's own: its blocks are the
    program's, not the start-up's (msms_agent_python_startup_paused)."""
    ext = _ext()
    if ext is not None:
        ext.python_startup_paused(running)


def run(restore_environment=None) -> None:
    """Called by the CLI's sitecustomize.py, which hands over how to give the
    program its own environment back, and then runs the sitecustomize that
    was next on the path."""
    try:
        if restore_environment is not None:
            _quietly(restore_environment)
        try:
            _start()
        except Exception as e:
            _warn("the Python-side collectors did not start", e)
    finally:
        _startup_ends()
