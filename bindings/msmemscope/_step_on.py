"""--step-on=module:function (issue #27 item 6): every return of the named
Python functions ends a step (SYSTEM STEP), for programs that never call
``optimizer.step()`` or ``msmemscope.step()`` — an inference loop whose
key/value cache grows each iteration gets the per-step leak analysis without
editing the script.

How a function is reached:

* a function of an imported module (``mylib.decode:Generator.step``) is
  replaced by a wrapper on the module or class as soon as the module has been
  imported (at once when it already is), before the program can copy it with
  ``from mylib.decode import ...``;
* a function of the program's own script (``__main__:generate``) does not
  exist before the script defines it: a trace function (``sys.settrace``,
  'call' events only, no line events) watches for its first call, then puts
  the wrapper in the script's globals (or on its class) and leaves; that
  first call ends a step too. The trace is the main thread's only and is
  removed once every ``__main__`` function was found.

The outermost call ends the step (a recursive or nested call does not), also
when the function raises. A reference taken before the wrapper went in (a
callback registered with the function object) is not wrapped.
"""
from __future__ import annotations

import functools
import sys
import threading
from typing import Callable, Dict, List, Tuple

from ._after_import import AfterImport


def parse(text: str) -> List[Tuple[str, str]]:
    """'m.n:C.f,x:g' (as the host normalised it) -> [('m.n', 'C.f'), ('x', 'g')]."""
    out = []
    for item in text.split(","):
        module, sep, qual = item.strip().partition(":")
        if sep and module and qual:
            out.append((module, qual))
    return out


class _Marker:
    """Ends a step when the outermost wrapped call returns (per thread)."""

    def __init__(self, mark: Callable[[], None]):
        self.mark = mark
        self.local = threading.local()

    def wrap(self, func):
        if getattr(func, "_msmemscope_step_on", False):
            return func
        marker = self

        @functools.wraps(func)
        def wrapper(*args, **kwargs):
            local = marker.local
            depth = getattr(local, "depth", 0)
            local.depth = depth + 1
            try:
                return func(*args, **kwargs)
            finally:
                local.depth = depth
                if depth == 0:
                    marker.mark()

        wrapper._msmemscope_step_on = True
        return wrapper


def _warn(text: str) -> None:
    sys.stderr.write(f"msmemscope: warning: --step-on: {text}\n")


def _replace(owner, name: str, marker: _Marker) -> bool:
    """Wraps owner.name (a function, staticmethod or classmethod)."""
    raw = owner.__dict__.get(name) if isinstance(owner, type) else getattr(owner, name, None)
    if raw is None:
        return False
    if isinstance(raw, (staticmethod, classmethod)):
        new = type(raw)(marker.wrap(raw.__func__))
    elif callable(raw):
        new = marker.wrap(raw)
    else:
        return False
    setattr(owner, name, new)
    return True


def _wrap_in(namespace_get: Callable[[str], object], setter, qual: str, marker: _Marker) -> bool:
    parts = qual.split(".")
    if len(parts) == 1:
        func = namespace_get(parts[0])
        if func is None or not callable(func):
            return False
        setter(parts[0], marker.wrap(func))
        return True
    owner = namespace_get(parts[0])
    for p in parts[1:-1]:
        owner = getattr(owner, p, None)
    return owner is not None and _replace(owner, parts[-1], marker)


def _wrap_module(module, qual: str, marker: _Marker) -> None:
    ok = _wrap_in(lambda n: getattr(module, n, None), lambda n, v: setattr(module, n, v), qual, marker)
    if not ok:
        _warn(f"'{module.__name__}:{qual}' is not a function of module {module.__name__}; no steps from it")


class _MainWatch:
    """Finds functions of __main__ at their first call (sys.settrace, 'call'
    events only), wraps them, and ends a step when that first call returns."""

    def __init__(self, quals: List[str], marker: _Marker):
        self.marker = marker
        self.by_name: Dict[str, List[str]] = {}
        for q in quals:
            self.by_name.setdefault(q.rsplit(".", 1)[-1], []).append(q)

    def install(self) -> None:
        sys.settrace(self.trace)

    def trace(self, frame, event, arg):
        if event != "call":
            return None
        code = frame.f_code
        quals = self.by_name.get(code.co_name)
        if quals is None or frame.f_globals.get("__name__") != "__main__":
            return None
        qual = getattr(code, "co_qualname", code.co_name)
        if qual not in quals:
            return None
        g = frame.f_globals
        if not _wrap_in(g.get, g.__setitem__, qual, self.marker):
            return None
        quals.remove(qual)
        if not quals:
            del self.by_name[code.co_name]
        # This first call is not through the wrapper: its return ends a step.
        frame.f_trace_lines = False
        return self.first_return

    def first_return(self, frame, event, arg):
        if event == "return":
            if not self.by_name:
                sys.settrace(None)
            if getattr(self.marker.local, "depth", 0) == 0:
                self.marker.mark()
        return self.first_return


_installed = False


def install(text: str, mark: Callable[[], None]) -> bool:
    """Installs the step functions named by the host's step_on option;
    returns whether any was named."""
    global _installed
    specs = parse(text or "")
    if not specs or _installed:
        return bool(specs)
    _installed = True
    marker = _Marker(mark)
    main: List[str] = []
    later: Dict[str, List[str]] = {}
    for module, qual in specs:
        if module == "__main__":
            main.append(qual)
        elif module in sys.modules:
            _wrap_module(sys.modules[module], qual, marker)
        else:
            later.setdefault(module, []).append(qual)
    if later:
        AfterImport({m: (lambda module, quals=quals: [_wrap_module(module, q, marker) for q in quals])
                     for m, quals in later.items()}).install()
    if main:
        _MainWatch(main, marker).install()
    return True
