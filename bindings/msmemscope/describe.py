"""Owner labels for the decompose analysis (``describe.describer``).

    @msmemscope.describe.describer(owner="model_init")
    def build(): ...

    with msmemscope.describe.describer(owner="kv_cache"):
        cache = torch.empty(...)

    msmemscope.describe.describer(tensor, owner="activations")   # tag a tensor
    msmemscope.describe.describer(0x7f00..., "buffer")            # or an address (owner positional)

Framework-pool blocks (PTA) allocated in the scope get Attr
``owner:PTA@<label>`` on their MALLOC row; a tagged tensor or address gets
an ACCESS row (type UNKNOWN, Name ``describer``) carrying the owner.
"""
from __future__ import annotations

import functools
import re
from typing import Any, Callable, Optional

from . import _session, _shared

__all__ = ["describer", "Describer"]

_LABEL = re.compile(r"^[A-Za-z0-9_.\-@/]{1,200}$")


def _check_owner(owner: Any) -> str:
    if not isinstance(owner, str):
        raise TypeError(f"msmemscope.describe.describer: 'owner' must be a string, got {type(owner).__name__} "
                        f"(allowed: 1..200 characters of letters, digits, _ . - @ /)")
    if not _LABEL.match(owner):
        raise ValueError(f"msmemscope.describe.describer: invalid owner '{owner}' "
                         f"(allowed: 1..200 characters of letters, digits, _ . - @ /)")
    return owner


_labels = _shared.owner_labels  # this thread's label stack, read by the PyTorch collector there


class Describer:
    """A describer scope; use with ``with``, as a decorator, or call it on a
    tensor or address to tag it."""

    def __init__(self, owner: str) -> None:
        self.owner = _check_owner(owner)

    def __enter__(self) -> "Describer":
        s = _labels()
        s.append(self.owner if not s else s[-1] + "@" + self.owner)
        _session._ext.set_owner_label(s[-1])
        return self

    def __exit__(self, *exc) -> None:
        s = _labels()
        if s:
            s.pop()
        _session._ext.set_owner_label(s[-1] if s else "")

    def __call__(self, target: Any) -> Any:
        if callable(target) and not _is_tensor(target):
            @functools.wraps(target)
            def wrapper(*args, **kwargs):
                with self:
                    return target(*args, **kwargs)
            return wrapper
        _tag(target, self.owner)
        return target


def _is_tensor(x: Any) -> bool:
    t = type(x)
    return t.__module__.startswith("torch") and hasattr(x, "data_ptr")


def _tag(target: Any, owner: str) -> None:
    s = _session.session("msmemscope.describe.describer")
    if _is_tensor(target):
        from . import _torch
        _torch.tag(target, "PTA@" + owner, "describer")
        return
    if isinstance(target, bool) or not isinstance(target, int):
        raise TypeError(f"msmemscope.describe.describer: can tag a torch.Tensor or an address (int), got "
                        f"{type(target).__name__}")
    if target <= 0 or target >= 1 << 64:
        raise ValueError(f"msmemscope.describe.describer: address {target} out of range (allowed: 1..2**64-1)")
    ext = _session._ext
    ext.event(ext.EV["ACCESS"], ext.T["UNKNOWN"], ext.DEV["CPU"], -1, target, 0, 0, 0, "describer",
              f"owner:PTA@{owner}")
    del s


def describer(target: Optional[Any] = None, owner: Optional[str] = None) -> Any:
    """Labels the owner of memory.

    ``describer(owner="x")`` returns a scope (context manager / decorator);
    ``describer(tensor_or_address, owner="x")`` or, as upstream's,
    ``describer(tensor_or_address, "x")`` tags that memory now.
    Nested scopes join their labels with '@'.
    """
    if owner is None:
        raise TypeError("msmemscope.describe.describer: missing the owner label (describer(owner=\"x\") for a "
                        "scope, describer(tensor_or_address, \"x\") to tag memory)")
    d = Describer(owner)
    if target is None:
        return d
    return d(target)
