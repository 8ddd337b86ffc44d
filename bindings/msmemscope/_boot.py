"""Interpreter-start hook of a Python program run under the msmemscope CLI.

The CLI puts a small ``sitecustomize.py`` (in its session folder) and this
package first on a Python target's import path (PYTHONPATH). That file calls
run(), which

* joins the CLI's session and starts the Python-side collectors the CLI's
  options ask for (Python stacks, the trace) before the program's first
  line, and PyTorch's (aten operators, tensor storage as PTA, owners,
  optimizer steps as steps) as soon as the program imports torch: a plain
  ``python3 train.py`` is tracked like a script that uses the API;
* then runs the sitecustomize that was next on the path (the program's or
  the system's own), exactly as Python would have without us.

Nothing here may stop the program: a failure is one warning on stderr.
"""
from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
import os
import sys


def _warn(what: str, e: BaseException) -> None:
    sys.stderr.write(f"msmemscope: warning: {what}: {e}\n")


class _TorchImportHook(importlib.abc.MetaPathFinder):
    """Calls back once ``torch`` has finished importing."""

    def __init__(self, callback):
        self.callback = callback
        self.busy = False

    def find_spec(self, name, path=None, target=None):
        if name != "torch" or self.busy:
            return None
        self.busy = True
        try:
            spec = importlib.util.find_spec(name)
        finally:
            self.busy = False
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        loader, callback = spec.loader, self.callback

        class _Loader(importlib.abc.Loader):
            def create_module(self, spec):
                return loader.create_module(spec)

            def exec_module(self, module):
                loader.exec_module(module)
                callback()

        spec.loader = _Loader()
        try:
            sys.meta_path.remove(self)  # once
        except ValueError:
            pass
        return spec


def _torch_imported() -> None:
    try:
        from . import _session, _collect
        if _session._ext.collecting():
            _collect.enable_for_range()
    except Exception as e:  # never break the program's import of torch
        _warn("the PyTorch collector did not start", e)


def _start() -> None:
    if not os.environ.get("MSMEMSCOPE_SESSION"):
        return
    from . import _session
    try:
        _session.boot()
    except RuntimeError as e:
        if "not profiled" not in str(e):
            _warn("cannot join the msmemscope session", e)
        return
    if not _session._booted:
        return
    if "torch" in sys.modules:
        _torch_imported()
    else:
        sys.meta_path.insert(0, _TorchImportHook(_torch_imported))


def _chain(here: str) -> None:
    """Runs the next sitecustomize on the path, as `import sitecustomize`
    would have found it without ours (its errors reach site.py as before)."""
    path = [p for p in sys.path if os.path.abspath(p or ".") != here]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", path)
    if spec is None or spec.loader is None:
        return
    module = importlib.util.module_from_spec(spec)
    sys.modules["sitecustomize"] = module
    spec.loader.exec_module(module)


def run(here: str) -> None:
    """Called by the CLI's sitecustomize.py (in folder `here`)."""
    try:
        _start()
    except Exception as e:
        _warn("the Python-side collectors did not start", e)
    _chain(here)
