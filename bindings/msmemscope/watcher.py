"""Watching a block of memory (``watcher.watch`` / ``watcher.remove``).

    msmemscope.watcher.watch(tensor, name="w1")             # a tensor
    msmemscope.watcher.watch(addr, length=4096, name="buf")  # an address range
    msmemscope.watcher.remove(tensor)

While the collection range is on and PyTorch operators are tracked, each
watched block is checksummed (CRC-64, as --watch's hash mode) after every
operator; when it changed, an ACCESS WRITE row is written with Name = the
operator and Attr ``watch:<name>,crc:<hex>,dump:<n>``. ``dump_nums`` limits how
many such rows a block gets (-1: no limit).
"""
from __future__ import annotations

import ctypes
import threading
from typing import Any, Dict, Optional

from . import _session

__all__ = ["watch", "remove", "watched"]

_lock = threading.Lock()
_watched: Dict[int, dict] = {}


def _is_tensor(x: Any) -> bool:
    return type(x).__module__.startswith("torch") and hasattr(x, "data_ptr")


def _resolve(target: Any, length: Optional[int]):
    if _is_tensor(target):
        if length is not None:
            raise TypeError("msmemscope.watcher.watch: 'length' is only for addresses; a tensor's length is its size")
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
    """Watches a tensor or the ``length`` bytes at an address."""
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
        _watched[addr] = {"name": name, "size": size, "left": dump_nums, "crc": _crc(addr, size),
                          "keep": target if _is_tensor(target) else None}


def remove(target: Any) -> None:
    """Stops watching a tensor or address given to watch()."""
    addr = target.data_ptr() if _is_tensor(target) else target
    if isinstance(addr, bool) or not isinstance(addr, int):
        raise TypeError(f"msmemscope.watcher.remove: expected a torch.Tensor or an address (int), got "
                        f"{type(target).__name__}")
    with _lock:
        if addr not in _watched:
            raise KeyError(f"msmemscope.watcher.remove: 0x{addr:016x} is not watched")
        del _watched[addr]


def watched() -> Dict[int, str]:
    """Address -> name of every watched block."""
    with _lock:
        return {a: w["name"] for a, w in _watched.items()}


_TABLE = []


def _crc(addr: int, size: int) -> int:
    # CRC-64/ECMA-182 (reflected, as --watch's hash); fine for small blocks.
    if not _TABLE:
        poly = 0xC96C5795D7870F42
        for i in range(256):
            c = i
            for _ in range(8):
                c = (c >> 1) ^ poly if c & 1 else c >> 1
            _TABLE.append(c)
    data = ctypes.string_at(addr, size)
    crc = 0xFFFFFFFFFFFFFFFF
    for b in data:
        crc = _TABLE[(crc ^ b) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFFFFFFFFFF


def after_op(op: str) -> None:
    """Called by the operator tracker after each operator."""
    if not _watched:
        return
    ext = _session._ext
    with _lock:
        for addr, w in list(_watched.items()):
            if w["left"] == 0:
                continue
            crc = _crc(addr, w["size"])
            if crc == w["crc"]:
                continue
            w["crc"] = crc
            if w["left"] > 0:
                w["left"] -= 1
            ext.event(ext.EV["ACCESS"], ext.T["WRITE"], ext.DEV["CPU"], -1, addr, w["size"], 0, 0, op,
                      f"watch:{w['name']},crc:{crc:016x}")
