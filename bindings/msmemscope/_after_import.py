"""A meta-path finder that calls back once a named module has finished
importing (its code has run), before anyone else can use it: _boot.py starts
the PyTorch collector after ``import torch``; _step_on.py wraps a library's
step function before the program can copy it with ``from m import f``."""
from __future__ import annotations

import importlib.util
import sys
from typing import Callable, Dict

# importlib.abc is not imported: under the CLI this runs at
# the interpreter's start, and importlib.abc pulls in importlib.resources,
# pathlib, tempfile... (~20 ms of the user's start, issue #30). A finder and
# a loader are any objects with these methods; the annotations stay text.


class AfterImport:
    """callbacks: module name -> callback(module), each called once; the
    finder leaves sys.meta_path when every one was called."""

    def __init__(self, callbacks: Dict[str, Callable[[object], None]]):
        self.callbacks = dict(callbacks)
        self.busy = False

    def install(self) -> None:
        sys.meta_path.insert(0, self)

    def find_spec(self, name, path=None, target=None):
        if name not in self.callbacks or self.busy:
            return None
        self.busy = True
        try:
            spec = importlib.util.find_spec(name)
        finally:
            self.busy = False
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        loader, callback = spec.loader, self.callbacks.pop(name)

        class _Loader:
            def create_module(self, spec):
                return loader.create_module(spec)

            def exec_module(self, module):
                loader.exec_module(module)
                callback(module)

        spec.loader = _Loader()
        if not self.callbacks:
            try:
                sys.meta_path.remove(self)
            except ValueError:
                pass
        return spec
