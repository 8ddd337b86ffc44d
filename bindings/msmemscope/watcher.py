"""Watching tensors or memory (``--watch`` / ``config(watch=...)`` and
``watcher.watch`` / ``watcher.remove``), COMPAT §5, §6.

    msmemscope.config(watch="aten::mul:out0,aten::sum")    # or --watch= on the command line
    msmemscope.watcher.watch(tensor, name="w1")              # a tensor
    msmemscope.watcher.watch(addr, length=4096, name="buf")  # an address range
    msmemscope.watcher.remove(tensor)

While collection is on and something is watched, a TorchDispatchMode of
this module runs around every aten operator on CPU tensors: before and after
the operator each watched block is hashed with upstream's CRC-64 (or, in
full-content mode, written whole to a .bin file) and sent to the host as one
checkpoint event (MSTX Mark ``msmemscope.watch`` with Attr op, count,
watched, idx, when, size, crc64|file: plugins/analyzers/watch/README.md).
The host's ``watch`` analyzer writes ``device_cpu/watch_dump/`` and reports
the operator that changed a watched tensor.

The spec ``[start[:outN],]end[,full-content]``: after the start operator, its
outputs (all, or output N) are watched until the end operator has run, and
again from the start operator's next call (every start->end window of the
run); without a start operator, the blocks given to ``watcher.watch()`` are
checkpointed from then until the end operator. Under the command line
(``--watch``) the dispatch mode goes in when the PyTorch collector starts
(``_torch.enable``): the script needs no call of its own. Operator names match with or
without the overload (``aten::mul`` or ``aten::mul.Tensor``), or as upstream's
dump names them (``torch._ops.aten.mul.Tensor``, ``torch._ops.aten.sum.default``); files use the
full name with "::" written as "." (``aten.mul.Tensor_1-...``), numbered by
the op's call (the same in the before and after names of one call, the start
operator's included). ``dump_nums`` limits how many checkpoints a block gets (-1: no
limit; a before and an after are one each, as upstream counts its dumps); at
the first checkpoint past it one mark (Attr ``unchecked:budget``,
``dump_nums``) tells the analyzer, which reports that the budget ran out and
that the block's later changes were not checked.
"""
from __future__ import annotations

import ctypes
import os
import threading
from typing import Any, Dict, List, Optional

from . import _paths, _shared  # never the session: the PyTorch collector imports this module
from . import _watch_protocol as _proto

__all__ = ["watch", "remove", "watched"]

_lock = threading.RLock()
_user: List[dict] = []          # blocks given to watch(): {name, addr, size, keep, left, idx}
_state: Dict[str, Any] = {"spec": None, "spec_read": False, "mode": None}

_LIB: List[Any] = []


# ---------------------------------------------------------------- hashing
def _lib():
    """libmsms_watch.so (next to the agent), for hashing in C; None if absent."""
    if not _LIB:
        path = os.path.join(_paths.PREFIX, "lib", "msmemscope", "agent", "libmsms_watch.so")
        lib = None
        try:
            lib = ctypes.CDLL(path)
            lib.msms_watch_crc64.restype = ctypes.c_uint64
            lib.msms_watch_crc64.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
        except (OSError, AttributeError):
            lib = None
        _LIB.append(lib)
    return _LIB[0]


def crc64(addr: int, size: int) -> int:
    """Upstream's CRC-64 (polynomial 0x42F0E1EBA9EA3693, right shifts, init
    and final xor all ones) of the ``size`` bytes at ``addr``."""
    lib = _lib()
    if lib is not None:
        return int(lib.msms_watch_crc64(ctypes.c_void_p(addr), size))
    return _proto.crc64_py(ctypes.string_at(addr, size))


# ---------------------------------------------------------------- spec
def _parse_spec(text: str):
    """The watch spec as this module's state, None when it does not parse
    (the command line and config() have validated it already)."""
    try:
        start, out, end, full = _proto.parse_spec(text)
    except ValueError:
        return None
    return {"start": start, "out": out, "end": end, "full": full, "active": False, "done": False,
            "tensors": []}


def _spec() -> Optional[dict]:
    """The watch spec of this session (--watch or config(watch=...)), read once."""
    if not _state["spec_read"]:
        text = ""
        try:
            if _shared.ext.agent_loaded() and _shared.ext.attached():
                text = _shared.ext.option("watch")
        except Exception:  # noqa: BLE001 - no agent: no spec
            text = ""
        if not text:
            text = _shared.values.get("watch", "")
        _state["spec"] = _parse_spec(text) if text else None
        _state["spec_read"] = _shared.ext.agent_loaded() and _shared.ext.attached()
    return _state["spec"]


def _upstream_name(name: str, short: str) -> str:
    """The operator as upstream's dump and watch example name it:
    torch._ops.aten.mse_loss.default for aten::mse_loss."""
    ns, _, base = short.partition("::")
    overload = name[len(short) + 1:] if name != short else "default"
    return f"torch._ops.{ns}.{base}.{overload}"


def _matches(name: str, short: str, wanted: Optional[str]) -> bool:
    if wanted is None:
        return False
    if wanted == name or wanted == short:
        return True
    # the default overload spelled out (aten::sum.default for aten::sum)
    if name == short and wanted == short + ".default":
        return True
    # upstream's spelling (example/watch: --watch=torch._ops.aten.mse_loss.default,...),
    # with or without the torch._ops. prefix
    up = _upstream_name(name, short)
    return wanted == up or "torch._ops." + wanted == up


# ---------------------------------------------------------------- checkpoints
_counts: Dict[str, int] = {}


def _span(t) -> tuple:
    """(address, bytes) of the memory a CPU tensor's elements occupy."""
    n = t.numel()
    if n == 0:
        return t.data_ptr(), 0
    if t.is_contiguous():
        return t.data_ptr(), n * t.element_size()
    extent = 1 + sum((s - 1) * st for s, st in zip(t.shape, t.stride()) if s > 0)
    return t.data_ptr(), extent * t.element_size()


def _staging() -> tuple:
    """(session folder, token) where full-content dumps are staged: the
    CLI's session (MSMEMSCOPE_SESSION, MSMEMSCOPE_WATCH_TOKEN) or the one the
    Python package opened for its host. ("", "") when there is none."""
    s = _shared.session
    if s is not None and getattr(s, "dir", "") and getattr(s, "watch_token", ""):
        return s.dir, s.watch_token
    return os.environ.get("MSMEMSCOPE_SESSION", ""), os.environ.get("MSMEMSCOPE_WATCH_TOKEN", "")


_warned_staging: List[bool] = []


def _new_bin():
    """A new staging file (fd, name) in the session folder: the watch
    analyzer moves only files named watch_{token}_{pid}_{n}.bin there
    (plugins/analyzers/watch/README.md). None when there is no session."""
    folder, token = _staging()
    return _proto.new_staging_file(folder, token) if folder else None


def _emit(op: str, count: int, watched: str, idx: int, after: bool, addr: int, size: int, full: bool) -> None:
    ext = _shared.ext
    when = "after" if after else "before"
    head = f"op:{op},count:{count},watched:{watched},idx:{idx},when:{when},size:{size},"
    staged = _new_bin() if full else None
    if full and staged is None and not _warned_staging:
        _warned_staging.append(True)
        import warnings
        warnings.warn("msmemscope.watcher: full-content dumps need the session folder of a run (none here); "
                      "checkpoints are written as hashes instead", stacklevel=2)
    # the hash goes with a full-content dump too: which op changed the bytes
    crc = f"crc64:{crc64(addr, size) if size else 0:016x}"
    if staged is not None:
        fd, name = staged
        with os.fdopen(fd, "wb") as f:
            f.write(ctypes.string_at(addr, size) if size else b"")
        attrs = head + "file:" + name + "," + crc
    else:
        attrs = head + crc
    ext.event(ext.EV["MSTX"], ext.T["MARK"], ext.DEV["CPU"], -1, 0, size, 0, 0, "msmemscope.watch", attrs)


def _emit_unchecked(op: str, count: int, w: dict, after: bool) -> None:
    """The first checkpoint of a block given to watch() that its dump_nums
    budget no longer allows: one mark (no hash, no file) with Attr
    unchecked:budget and dump_nums, at this operator's before or after, so
    that the watch analyzer says the budget ran out here and nothing later
    was checked."""
    ext = _shared.ext
    when = "after" if after else "before"
    attrs = (f"op:{op},count:{count},watched:{w['name']},idx:{w['idx']},when:{when},unchecked:budget,"
             f"dump_nums:{w['budget']}")
    ext.event(ext.EV["MSTX"], ext.T["MARK"], ext.DEV["CPU"], -1, 0, 0, 0, 0, "msmemscope.watch", attrs)


def _checkpoint(op: str, count: int, after: bool) -> None:
    spec = _spec()
    full = bool(spec and spec["full"])
    if spec and spec["active"]:
        for idx, t in spec["tensors"]:
            addr, size = _span(t)
            _emit(op, count, spec["start"], idx, after, addr, size, full)
    if _user and (spec is None or spec["start"] is not None or not spec["done"]):
        for w in _user:
            if w["left"] == 0:
                if not w["told"]:
                    # the budget is used up: say so once, at the first
                    # checkpoint not taken, so that the report does not read
                    # as if nothing changed the block after its last one
                    w["told"] = True
                    _emit_unchecked(op, count, w, after)
                continue
            if w["keep"] is not None:
                addr, size = _span(w["keep"])
            else:
                addr, size = w["addr"], w["size"]
            _emit(op, count, w["name"], w["idx"], after, addr, size, full)
            if w["left"] > 0:
                w["left"] -= 1


def _before(op: str, short: str) -> int:
    count = _counts.get(op, 0) + 1
    _counts[op] = count
    _checkpoint(op, count, False)
    return count


def _after(op: str, short: str, count: int, out) -> None:
    spec = _spec()
    if spec is not None and spec["start"] is not None and not spec["active"] and not spec["done"] \
            and _matches(op, short, spec["start"]):
        import torch
        outs = [t for t in (out if isinstance(out, (list, tuple)) else (out,))
                if isinstance(t, torch.Tensor) and t.device.type == "cpu"]
        idx = list(range(len(outs)))
        if spec["out"] is not None:
            outs = outs[spec["out"]:spec["out"] + 1]
            idx = [spec["out"]] if outs else []
        spec["tensors"] = list(zip(idx, outs))
        spec["active"] = True
        spec["start"] = op
        # numbered like its before checkpoint (the op's n-th call), as
        # upstream numbers the start op's first dump (memory_watch.cpp)
        _checkpoint(op, count, True)
        return
    _checkpoint(op, count, True)
    if spec is not None and _matches(op, short, spec["end"]) and (spec["active"] or spec["start"] is None):
        # The window closes; with a start operator the next call of it opens
        # the next one (every start->end window of the run, as upstream's
        # MemoryWatch clears its target after the last operator). Without
        # one, the blocks given to watch() were checkpointed until here.
        spec["active"] = False
        spec["done"] = spec["start"] is None
        spec["tensors"] = []


def _names(func) -> tuple:
    try:
        short = func._schema.name
        overload = func._schema.overload_name
    except AttributeError:
        short, overload = str(func), ""
    full = f"{short}.{overload}" if overload else short
    return full, short


def _mode_class():
    from torch.utils._python_dispatch import TorchDispatchMode

    class _WatchMode(TorchDispatchMode):
        """Checkpoints the watched blocks around every aten operator."""

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            if not _needed() or not _shared.ext.collecting():
                return func(*args, **(kwargs or {}))
            op, short = _names(func)
            with _lock:
                count = _before(op, short)
            out = func(*args, **(kwargs or {}))
            with _lock:
                _after(op, short, count, out)
            return out

    return _WatchMode


def _needed() -> bool:
    spec = _state["spec"]
    return bool(_user) or (spec is not None and not spec["done"])


def _push_bottom(mode) -> None:
    """Puts the mode at the bottom of torch's mode stack, so that other modes
    (the op tracker) pushed and popped around it stay last-in first-out."""
    from torch.utils._python_dispatch import _pop_mode, _push_mode
    from torch._C import _len_torch_dispatch_stack
    above = []
    while _len_torch_dispatch_stack() > 0:
        above.append(_pop_mode())
    _push_mode(mode)
    for m in reversed(above):
        _push_mode(m)


def _remove_mode(mode) -> None:
    from torch.utils._python_dispatch import _pop_mode, _push_mode
    from torch._C import _len_torch_dispatch_stack
    above = []
    while _len_torch_dispatch_stack() > 0:
        m = _pop_mode()
        if m is mode:
            break
        above.append(m)
    for m in reversed(above):
        _push_mode(m)


def _update_mode() -> None:
    """Installs the dispatch mode while something is (or will be) watched and
    collection is on; removes it otherwise. Called from user code only (never
    inside an operator)."""
    import sys
    if "torch" not in sys.modules:
        return
    _spec()
    want = _needed() and _shared.ext.agent_loaded() and _shared.ext.collecting()
    if want and _state["mode"] is None:
        _state["mode"] = _mode_class()()
        _push_bottom(_state["mode"])
    elif not want and _state["mode"] is not None:
        _remove_mode(_state["mode"])
        _state["mode"] = None


def range_started() -> None:
    """start(): watch with the session's spec, or the blocks given to watch()."""
    with _lock:
        _update_mode()


def range_stopped() -> None:
    """stop(): no checkpoints outside the collection range."""
    with _lock:
        if _state["mode"] is not None:
            _remove_mode(_state["mode"])
            _state["mode"] = None


# ---------------------------------------------------------------- public API
def _is_tensor(x: Any) -> bool:
    return type(x).__module__.startswith("torch") and hasattr(x, "data_ptr")


def _resolve(target: Any, length: Optional[int]):
    if _is_tensor(target):
        if length is not None:
            raise TypeError("msmemscope.watcher.watch: 'length' is only for addresses; a tensor's length is its size")
        if target.device.type != "cpu":
            raise ValueError(f"msmemscope.watcher.watch: only CPU tensors can be watched, got a "
                             f"{target.device.type} tensor")
        return target.data_ptr(), target.numel() * target.element_size()
    if isinstance(target, bool) or not isinstance(target, int):
        raise TypeError(f"msmemscope.watcher.watch: expected a torch.Tensor or an address (int), got "
                        f"{type(target).__name__}")
    if target <= 0 or target >= 1 << 64:
        raise ValueError(f"msmemscope.watcher.watch: address {target} out of range (allowed: 1..2**64-1)")
    if length is None:
        raise TypeError("msmemscope.watcher.watch: an address needs 'length' (bytes, > 0)")
    if isinstance(length, bool) or not isinstance(length, int):
        raise TypeError(f"msmemscope.watcher.watch: 'length' must be an int, got {type(length).__name__}")
    if length <= 0:
        raise ValueError(f"msmemscope.watcher.watch: 'length' must be > 0, got {length}")
    return target, length


def watch(target: Any, length: Optional[int] = None, name: Optional[str] = None, dump_nums: int = -1) -> None:
    """Watches a CPU tensor or the ``length`` bytes at an address: a checkpoint
    (hash, or the whole block with full-content) before and after every aten
    operator while collection is on (see the module's text)."""
    addr, size = _resolve(target, length)
    if name is None:
        name = f"0x{addr:016x}"
    if not isinstance(name, str) or not name or any(c in name for c in ",:{}\n"):
        raise ValueError(f"msmemscope.watcher.watch: invalid name {name!r} (allowed: a non-empty string without "
                         f"',', ':', braces or newlines)")
    if isinstance(dump_nums, bool) or not isinstance(dump_nums, int):
        raise TypeError(f"msmemscope.watcher.watch: 'dump_nums' must be an int, got {type(dump_nums).__name__}")
    if dump_nums < -1 or dump_nums == 0:
        raise ValueError(f"msmemscope.watcher.watch: 'dump_nums' must be -1 (no limit) or > 0, got {dump_nums}")
    with _lock:
        for w in _user:
            if w["addr"] == addr:
                _user.remove(w)
                break
        idx = sum(1 for w in _user if w["name"] == name)
        _user.append({"name": name, "addr": addr, "size": size, "left": dump_nums, "idx": idx,
                      "budget": dump_nums, "told": False, "keep": target if _is_tensor(target) else None})
        _update_mode()


def remove(target: Any, length: Optional[int] = None) -> None:
    """Stops watching a tensor or address given to watch(). As upstream's,
    an address may come with the ``length`` it was watched with
    (``remove(addr, length=1000)``); a length that differs is an error."""
    if _is_tensor(target):
        if length is not None:
            raise TypeError("msmemscope.watcher.remove: 'length' is only for addresses; a tensor's length is its "
                            "size")
        addr = target.data_ptr()
    else:
        addr = target
        if isinstance(addr, bool) or not isinstance(addr, int):
            raise TypeError(f"msmemscope.watcher.remove: expected a torch.Tensor or an address (int), got "
                            f"{type(target).__name__}")
        if length is not None:
            if isinstance(length, bool) or not isinstance(length, int):
                raise TypeError(f"msmemscope.watcher.remove: 'length' must be an int, got {type(length).__name__}")
            if length <= 0:
                raise ValueError(f"msmemscope.watcher.remove: 'length' must be > 0, got {length}")
    with _lock:
        for w in _user:
            if w["addr"] == addr:
                if length is not None and w["size"] != length:
                    raise ValueError(f"msmemscope.watcher.remove: 0x{addr:016x} is watched with length "
                                     f"{w['size']}, not {length}")
                _user.remove(w)
                break
        else:
            raise KeyError(f"msmemscope.watcher.remove: 0x{addr:016x} is not watched")
        _update_mode()


def watched() -> Dict[int, str]:
    """Address -> name of every block given to watch()."""
    with _lock:
        return {w["addr"]: w["name"] for w in _user}
