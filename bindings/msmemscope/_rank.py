"""The process's rank from torch.distributed, for the host.

A process launched without RANK/LOCAL_RANK in its environment (most often
by torch.multiprocessing.spawn, which passes the rank as a function
argument) has no rank when its capture begins. Once its
``init_process_group`` has completed, ``dist.get_rank()`` is known: it goes
to the host as one SYSTEM row named ``msmemscope.rank`` with Attr
``rank:R,world_size:W`` (framework/host/process_rank.h), which the host
takes for the process's rank where the environment gave none. Sent in every
process (the host keeps the environment's rank and warns when they differ),
once, and again in a child forked after it (a DataLoader worker), as its
inherited RANK would be."""
from __future__ import annotations

import functools
import os

from ._shared import ext as _ext

NAME = "msmemscope.rank"  # framework/host/process_rank.h kRankEventName
_sent = False
_fork_hook = False


def report() -> None:
    """Sends the rank once the process group is up (and the agent attached)."""
    global _sent
    if _sent:
        return
    try:
        import torch.distributed as dist
        if not (dist.is_available() and dist.is_initialized()):
            return
        rank, world = int(dist.get_rank()), int(dist.get_world_size())
    except Exception:  # a backend that cannot say: no rank, as before
        return
    if not _ext.attached():
        return  # start() comes later and reports it then
    _sent = True
    _ext.event(_ext.EV["SYSTEM"], _ext.T["NONE"], _ext.DEV["NA"], -1, 0, 0, 0, 0, NAME,
               f"rank:{rank},world_size:{world}")


def _after_fork_in_child() -> None:
    global _sent
    if _sent:
        _sent = False
        report()


def install(torch) -> None:
    """Wraps init_process_group (torch.distributed's and distributed_c10d's:
    the program may call either, or have copied it after ``import torch``)
    and reports at once when the group is already up (start() after it)."""
    global _fork_hook
    try:
        if not torch.distributed.is_available():
            return
        import torch.distributed.distributed_c10d as c10d
    except (ImportError, AttributeError):
        return
    original = c10d.init_process_group
    if not getattr(original, "_msmemscope_wrapped", False):
        @functools.wraps(original)
        def init_process_group(*args, **kwargs):
            out = original(*args, **kwargs)
            report()
            return out

        init_process_group._msmemscope_wrapped = True
        for m in (c10d, torch.distributed):
            if getattr(m, "init_process_group", None) is original:
                m.init_process_group = init_process_group
    if not _fork_hook:
        _fork_hook = True
        os.register_at_fork(after_in_child=_after_fork_in_child)
    report()
