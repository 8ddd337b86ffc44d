"""What the session (_session.py) shares with the collectors (_collect.py,
_torch.py, _cuda.py, watcher.py): the native extension, the package folder,
the config() values, the session object once there is one, how steps are
marked, and the thread's owner labels (describe.py).

A leaf: it imports nothing of the package but the native extension, so a
collector imports this module and never the session (the session imports
the collectors, not the reverse; tests/python/test_bindings_imports.py).
Only _session.py writes the session's state here."""
from __future__ import annotations

import os
import sys
import threading
from typing import Any, Dict, List, Optional

try:
    from . import _msmemscope as ext  # noqa: F401 - shared: the collectors use it as _shared.ext
except ImportError as e:  # pragma: no cover - a broken build
    raise ImportError(f"msmemscope: the native extension is missing or was built for another Python ({e}); "
                      f"rebuild with -DPython3_EXECUTABLE={sys.executable}") from e

PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__))

# config()'s values (CLI option name -> text); _session.py owns the dict and
# changes it in place.
values: Dict[str, str] = {}
# The session of this process (_session.Session), None until one is made.
session: Any = None

own_steps = False  # the program called msmemscope.step(): it marks its steps itself
# The last step the optimizer marked (auto_steps()), None once the program's
# own msmemscope.step() took over (or when the optimizer never marked one).
auto_step: Optional[int] = None
# The program's start() under the CLI before the optimizer marked a step
# (upstream's API pattern: msmemscope.step() right after opt.step()): the
# optimizer's first mark is written provisional (Attr provisional:true) and
# the host holds the events after it (framework/host/provisional_step.h).
# "hold" until the first optimizer step, then "held" until the program's
# step() (a STEP row of the same number that takes the provisional one over)
# or the next optimizer step or stop() (the provisional mark stands); ""
# otherwise.
auto_hold = ""
booted = False     # the CLI's interpreter-start hook joined the session
step_on = False    # --step-on named the functions that end the steps
attached = False   # msmemscope --attach joined this running interpreter (_attach.py)


def auto_steps() -> bool:
    """A script under the CLI that marks no steps itself (no
    msmemscope.step() call yet, no --step-on, no mstx "step start" range):
    each optimizer step ends a step, as msmemscope.step() would. Its other
    API calls (config, start, stop, take_snapshot) keep them. A program that
    marks its steps with mstx ranges keeps those (the leak analysis takes
    one kind of step, not both)."""
    return booted and not own_steps and not step_on and not ext.mstx_steps_seen()


_tls = threading.local()


def owner_labels() -> List[str]:
    """This thread's stack of describer owner labels (describe.py pushes and
    pops them; the PyTorch collector tags tensors with the innermost)."""
    s = getattr(_tls, "labels", None)
    if s is None:
        s = _tls.labels = []
    return s
