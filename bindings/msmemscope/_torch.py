"""PyTorch collector (CPU; torch 1.13 and later).

* every aten operator: OP_LAUNCH ATEN_START / ATEN_END (Name = the operator,
  e.g. ``aten::mm``) from a C++ RecordFunction callback (_torch_observer,
  built where libtorch-dev is installed; no Python call per operator) or
  else from a TorchDispatchMode, and with events "access"
  ACCESS READ (inputs) / WRITE (outputs) with dtype, shape, size, format,
  (both only when op is among the --level values, the default, as
  upstream's aten collector),
  type; Ptr is the storage's base address, so the host can give the
  allocation_id of the block;
* tensor storage: c10's CPU allocator (alloc_cpu -> posix_memalign,
  free_cpu -> free in libc10) is hooked by GOT patching and reported as the
  framework pool, MALLOC/FREE with Event Type PTA, owner and total;
* shared-memory and mapped storages: at::MapAllocator's mmap/munmap in
  libtorch_cpu (GOT) are the same pool's MALLOC/FREE PTA, with the mapping's
  size, owner ``PTA@shared_memory`` (``PTA@mapped_file`` for a private file
  mapping) unless a describer label is in force, Attr ``mapped``: DataLoader
  batches (``_new_shared`` in the worker, rebuilt from a descriptor in the
  process that receives them), ``share_memory_()``, ``from_file``. A storage
  is a block in each process that maps it, once (torch rebuilds a received
  storage once per process: its shared_cache);
* owners: a block allocated inside an operator is ``PTA@ops@aten``, inside
  ``Optimizer.step`` ``PTA@optimizer_state``, inside a describer scope
  ``PTA@<label>``. A block that turns out to be a parameter, a gradient or
  optimizer state is tagged by an ACCESS row of type UNKNOWN whose Attr
  ``owner`` is ``PTA@weight`` / ``PTA@gradient`` / ``PTA@optimizer_state``
  (Name: where it was learnt), which the decompose analysis carries back to
  the block's MALLOC row. Parameters are weights from the moment they exist:
  at ``Module.register_parameter`` (Name ``module.register``) and, for a
  module built before collection began, at its first forward (Name
  ``module.forward``, a global forward pre-hook: one dict look-up per module
  call after that). Gradients are tagged when autograd has accumulated them
  (after each ``backward()``, Name ``autograd.backward``); after each
  optimizer step the parameters, gradients and state (Name
  ``optimizer.step``); at stop() every known parameter and gradient (Name
  ``msmemscope.stop``). A parameter built in a describer scope, or tagged
  by the user, keeps the user's label until an optimizer step says weight
  (upstream's best practice §4: the layer made in ``model_init`` shows
  ``model_init``). A tag belongs to a block: it is not repeated while
  the tensor it was written for is alive and still on that block (which
  therefore cannot have been freed); once that tensor is gone, a new block
  at the same address (``zero_grad(set_to_none=True)`` then the next
  backward) is tagged again;
* DataLoader batches (worker processes): when the iterator hands a batch to
  the program, an ACCESS UNKNOWN row (Name ``dataloader.next``) per storage
  with Attr ``dataloader:handed``, and for each batch it received out of
  order and keeps for a later turn, once, ``dataloader:held``: the leak
  analysis judges a batch from the step it is handed in;
* ranks: torch.distributed's rank once init_process_group has completed
  (_rank.py), for a process whose environment names none (mp.spawn);
* DDP: the gradient buckets its Reducer rebuilds once, in the forward after
  the first backward, have owner ``PTA@ddp_buckets``; the leak analysis
  counts them as set-up, not as a leak of that step;
* module calls (Python trace on): ``nn.Module: ClassName`` spans;
* steps: in a plain script under the CLI (no API call), each optimizer
  step ends a step (SYSTEM STEP), as msmemscope.step() would;
* backward() / autograd.grad(): the caller's Python stack is remembered
  for allocations on autograd engine threads (no Python frames of their
  own); on CPU the engine runs on the calling thread, whose own stack is
  the answer.
"""
from __future__ import annotations

import contextlib
import sys
import threading
import weakref
from typing import Dict, Optional, Tuple

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from . import _cuda, _rank, _shared, watcher
from ._shared import ext as _ext  # never the session: it imports the collectors

EV = _ext.EV
T = _ext.T
CPU = _ext.DEV["CPU"]

_names: Dict[object, str] = {}
# base address -> (owner, weak reference to the tensor the tag was written
# for): the tag stands while that tensor lives on that block.
_tagged: Dict[int, Tuple[str, "weakref.ref"]] = {}
# parameters seen (registered, in a module that ran, or in an optimizer):
# id -> [weak reference to it, weak reference to the gradient last tagged,
# that gradient's data pointer] (gone with the parameter); modules whose
# parameters are known: id -> weak reference
_params: Dict[int, list] = {}
_seen_modules: Dict[int, "weakref.ref"] = {}
_weight_hook = None
_mode: Optional["_OpMode"] = None
_observer = None  # the C++ observer module while it tracks operators
_access = False
_trace = False
_hooks_installed = False
_module_hooks = []
_tls = threading.local()
_optimizer_depth = 0
_cuda_ops = False  # CUDA mode (_cuda.py): operators on the current CUDA device


def _op_name(func) -> str:
    name = _names.get(func)
    if name is None:
        # upstream's Name: the OpOverload's module and name, e.g.
        # torch._ops.aten.mm.default (python/msmemscope/aten_collection.py)
        module, short = getattr(func, "__module__", None), getattr(func, "__name__", None)
        name = f"{module}.{short}" if module and short else str(func)
        _put(_names, func, name)
    return name


def _base_ptr(t: torch.Tensor) -> int:
    return t.data_ptr() - t.storage_offset() * t.element_size()


def _tensor_attrs(t: torch.Tensor, extra: str = "") -> str:
    fmt = "contiguous" if t.is_contiguous() else "strided"
    # upstream's keys and formats: type = the pool (PTA: c10's allocator),
    # shape as str(torch.Size) prints it
    s = (f"dtype:{t.dtype},shape:{t.shape},size:{t.numel() * t.element_size()},"
         f"format:{fmt},type:PTA")
    return extra + s if extra else s


def _op_device():
    """An operator row's device: cpu, or in CUDA mode the current CUDA device
    (upstream: the thread's current device)."""
    if _cuda_ops:
        try:
            if torch.cuda.is_initialized():
                return _ext.DEV["CUDA"], int(torch.cuda.current_device())
        except Exception:
            pass
    return CPU, -1


def _access_event(t, kind_type: int, op: str) -> None:
    if type(t) is not torch.Tensor and not isinstance(t, torch.Tensor):
        return
    if t.is_sparse:
        return
    dev_kind, dev_id = CPU, -1
    if t.device.type == "cuda" and _cuda_ops:
        dev_kind, dev_id = _ext.DEV["CUDA"], 0 if t.device.index is None else int(t.device.index)
    elif t.device.type != "cpu":
        return
    try:
        ptr = _base_ptr(t)
    except RuntimeError:
        return
    if not ptr:
        return
    _ext.event(EV["ACCESS"], kind_type, dev_kind, dev_id, ptr, t.numel() * t.element_size(), 0, 0, op,
               _tensor_attrs(t))


def _each_tensor(values):
    for v in values:
        if isinstance(v, torch.Tensor):
            yield v
        elif isinstance(v, (list, tuple)):
            for x in v:
                if isinstance(x, torch.Tensor):
                    yield x


class _OpMode(TorchDispatchMode):
    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = _op_name(func)
        collecting = _ext.collecting()
        dev = _op_device()
        _ext.op_begin(name, *dev)
        try:
            if collecting and _access:
                for t in _each_tensor(args):
                    _access_event(t, T["READ"], name)
                if kwargs:
                    for t in _each_tensor(kwargs.values()):
                        _access_event(t, T["READ"], name)
            out = func(*args, **(kwargs or {}))
            if collecting and _access:
                for t in _each_tensor(out if isinstance(out, (list, tuple)) else (out,)):
                    _access_event(t, T["WRITE"], name)
            return out
        finally:
            _ext.op_end(name, *dev)


def _put(table: dict, key, value) -> None:
    """table[key] = value, for the tables above. They are msmemscope's own
    memory and last until the process exits; with the package's frames left
    out of the stacks, the block a new key grew a table into named the
    program's line then running (torch's optimizer step wrapper, a module's
    __setattr__), and the leak report listed it as that line's host memory
    still allocated at exit. So a new key goes in with the agent's hooks off
    (put_unrecorded: a call that allocates nothing itself, no pybind11 argument
    vectors): no row. Every new key comes here, so the hooks never see a
    table's block, neither made nor freed (a resize frees the old one).
    Inserting allocates no object the garbage collector tracks: no collection
    can run, and free the program's objects unseen, while the hooks are off."""
    if key in table:
        table[key] = value  # replacing a value never resizes
    else:
        _ext.put_unrecorded(table, key, value)


def _forget(table: dict, key: int):
    """A weak reference callback: drops table[key] if it is still this reference."""
    def cb(ref, table=table, key=key):
        held = table.get(key)
        if held is ref or (type(held) in (tuple, list) and held[1 if type(held) is tuple else 0] is ref):
            del table[key]
    return cb


_CLASSES = frozenset(("PTA@weight", "PTA@gradient", "PTA@optimizer_state"))


def _held(ptr: int) -> Optional[str]:
    """The owner last written for the block at ptr, while the tensor it was
    written for still lives on it (so that block has not been freed)."""
    held = _tagged.get(ptr)
    if held is None:
        return None
    other = held[1]()
    if other is None:
        return None
    try:
        return held[0] if _base_ptr(other) == ptr else None
    except RuntimeError:
        return None


def _remember(t: torch.Tensor, ptr: int, owner: str) -> None:
    try:
        _put(_tagged, ptr, (owner, weakref.ref(t, _forget(_tagged, ptr))))
    except TypeError:  # a tensor type without weak references: tag it each time
        _tagged.pop(ptr, None)


def tag(t: torch.Tensor, owner: str, where: str, weak: bool = False) -> None:
    """Says which owner a tensor's storage has (ACCESS UNKNOWN with Attr owner).
    weak: only where the user gave the block no label of their own (a
    describer scope or tag); a parameter is a weight unless the user said
    otherwise."""
    if not isinstance(t, torch.Tensor) or not t.is_cpu or t.is_sparse:
        return
    try:
        ptr = _base_ptr(t)
    except RuntimeError:
        return
    if not ptr:
        return
    entry = _tagged.get(ptr)
    if entry is None:
        held = None
    elif entry[1]() is t:
        held = entry[0]  # this very tensor, on that block now: _held's answer without asking it again
    else:
        held = _held(ptr)
    if held == owner or (weak and held is not None and held not in _CLASSES):
        return  # the same block: a live tensor still holds it
    _ext.event(EV["ACCESS"], T["UNKNOWN"], CPU, -1, ptr, t.numel() * t.element_size(), 0, 0, where,
               _tensor_attrs(t, f"owner:{owner},"))
    _remember(t, ptr, owner)


def _know_param(p) -> None:
    key = id(p)
    if key not in _params:
        try:
            _put(_params, key, [weakref.ref(p, _forget(_params, key)), None, 0])
        except TypeError:
            pass


def _tag_params(params, where: str, grads: bool = True, weak: bool = False) -> None:
    for p in params:
        tag(p, "PTA@weight", where, weak)
        if grads:
            g = p.grad
            if g is not None:
                tag(g, "PTA@gradient", where)


def _tag_known(where: str, weights: bool = True) -> None:
    """The gradients (and weights) of every known parameter. After each
    backward(): a gradient already tagged (the same tensor on the same
    storage: accumulated in place) costs a few attribute reads."""
    if not _params or not _ext.collecting():
        return
    for entry in list(_params.values()):
        p = entry[0]()
        if p is None:
            continue
        if weights:
            tag(p, "PTA@weight", where, weak=True)
        g = p.grad
        if g is None:
            continue
        gref = entry[1]
        if gref is not None and gref() is g and entry[2] == g.data_ptr():
            continue
        tag(g, "PTA@gradient", where)
        try:
            entry[1], entry[2] = weakref.ref(g), g.data_ptr()
        except TypeError:
            pass


def _weights_pre(module, inputs):
    """Global forward pre-hook: a module's parameters (its submodules'
    included) are weights from its first forward on."""
    if id(module) in _seen_modules or not _ext.collecting():
        return
    try:
        for m in module.modules():
            key = id(m)
            if key not in _seen_modules:
                _put(_seen_modules, key, weakref.ref(m, _forget(_seen_modules, key)))
        params = list(module.parameters())
    except Exception:
        return
    for p in params:
        _know_param(p)
    _tag_params(params, "module.forward", weak=True)


def _describer_label() -> str:
    s = _shared.owner_labels()
    return s[-1] if s else ""


def _wrap_register_parameter() -> None:
    """Module.register_parameter (also what `module.x = Parameter(...)`
    calls): a parameter is a weight from its registration on."""
    cls = torch.nn.Module
    reg = cls.__dict__.get("register_parameter")
    if reg is None or getattr(reg, "_msmemscope_wrapped", False):
        return

    def register_parameter(self, name, param):
        reg(self, name, param)
        if isinstance(param, torch.Tensor):
            _know_param(param)
            if _ext.collecting():
                label = _describer_label()
                if label:
                    # built in the user's describer scope: their label stays
                    # (the optimizer step still says weight, as before)
                    try:
                        _remember(param, _base_ptr(param), "PTA@" + label)
                    except RuntimeError:
                        pass
                else:
                    tag(param, "PTA@weight", "module.register")

    register_parameter._msmemscope_wrapped = True
    register_parameter.__wrapped__ = reg
    register_parameter.__name__ = reg.__name__
    register_parameter.__doc__ = reg.__doc__
    cls.register_parameter = register_parameter


def _tag_optimizer(opt) -> None:
    if not _ext.collecting():
        return
    for group in getattr(opt, "param_groups", ()):
        params = group.get("params", ())
        for p in params:
            _know_param(p)
        _tag_params(params, "optimizer.step")
    for st in getattr(opt, "state", {}).values():
        if isinstance(st, dict):
            for v in st.values():
                if isinstance(v, torch.Tensor):
                    tag(v, "PTA@optimizer_state", "optimizer.step")


def _wrap_step(cls) -> None:
    step = cls.__dict__.get("step")
    if step is None or getattr(step, "_msmemscope_wrapped", False):
        return

    def step_wrapper(self, *args, **kwargs):
        global _optimizer_depth
        _optimizer_depth += 1
        try:
            return step(self, *args, **kwargs)
        finally:
            _optimizer_depth -= 1
            _tag_optimizer(self)
            if _optimizer_depth == 0 and _shared.auto_steps():
                _cuda.flush()  # the caching allocator's blocks of this step before its mark
                # a script under the CLI that marks no steps: the optimizer marks them
                n = None
                if _shared.auto_hold == "hold":
                    # the program's msmemscope.step() may follow: it takes this mark over
                    n = _ext.step_with("provisional:true", False)
                    _shared.auto_hold = "held" if n is not None else ""
                else:
                    _shared.auto_hold = ""  # no msmemscope.step() came: the provisional mark stands
                _shared.auto_step = _ext.step() if n is None else n

    step_wrapper._msmemscope_wrapped = True
    step_wrapper.__wrapped__ = step
    step_wrapper.__name__ = getattr(step, "__name__", "step")
    step_wrapper.__doc__ = getattr(step, "__doc__", None)
    setattr(cls, "step", step_wrapper)


def _patch_optimizers() -> None:
    # torch 1.13 has no global optimizer hooks: wrap step() of every
    # Optimizer class, now and for classes defined later.
    base = torch.optim.Optimizer
    todo = [base]
    while todo:
        c = todo.pop()
        _wrap_step(c)
        todo.extend(c.__subclasses__())
    if not getattr(base, "_msmemscope_subclass_hook", False):
        previous = base.__dict__.get("__init_subclass__")

        def __init_subclass__(cls, **kwargs):
            if previous is not None:
                previous.__func__(cls, **kwargs)
            else:
                super(base, cls).__init_subclass__(**kwargs)
            _wrap_step(cls)

        base.__init_subclass__ = classmethod(__init_subclass__)
        base._msmemscope_subclass_hook = True


def _wrap_autograd() -> None:
    """backward() and autograd.grad(): their caller's Python stack is what
    an autograd engine thread (no Python frames of its own) allocates for.
    After backward() the gradients it accumulated are tagged."""
    import torch.autograd as ag
    for name in ("backward", "grad"):
        fn = getattr(ag, name, None)
        if fn is None or getattr(fn, "_msmemscope_wrapped", False):
            continue

        def wrapper(*args, __fn=fn, __accumulates=name == "backward", **kwargs):
            _ext.autograd_enter()
            try:
                out = __fn(*args, **kwargs)
            finally:
                _ext.autograd_exit()
            if __accumulates and _params:
                _tag_known("autograd.backward", weights=False)
            return out

        wrapper._msmemscope_wrapped = True
        wrapper.__wrapped__ = fn
        wrapper.__name__ = fn.__name__
        wrapper.__doc__ = fn.__doc__
        setattr(ag, name, wrapper)


def _batch_storages(data, depth: int = 0):
    """(base address, bytes) of each CPU tensor's storage in a batch (tensors
    in tuples, lists and dicts, a few levels deep)."""
    if isinstance(data, torch.Tensor):
        if data.device.type == "cpu" and not data.is_sparse:
            try:
                ptr = _base_ptr(data)
            except RuntimeError:
                return
            if ptr:
                yield ptr, data.numel() * data.element_size()
    elif depth < 4:
        if isinstance(data, dict):
            data = data.values()
        elif not isinstance(data, (list, tuple)):
            return
        for v in data:
            yield from _batch_storages(v, depth + 1)


def _dataloader_note(data, what: str) -> None:
    seen = set()
    for ptr, size in _batch_storages(data):
        if ptr not in seen:
            seen.add(ptr)
            _ext.event(EV["ACCESS"], T["UNKNOWN"], CPU, -1, ptr, size, 0, 0, "dataloader.next", f"dataloader:{what}")


def _wrap_dataloader() -> None:
    """A DataLoader with worker processes receives batches (shared-memory
    blocks) in the order the workers finish them and keeps one that arrives
    before its turn (torch's _task_info) until the program asks for it: the
    leak analysis judges a batch from the step it is handed in
    (dataloader:handed), not while it is kept (dataloader:held)."""
    try:
        from torch.utils.data import dataloader as dl
        cls = dl._MultiProcessingDataLoaderIter
        original = cls._next_data
    except (ImportError, AttributeError):
        return
    if getattr(original, "_msmemscope", False):
        return

    def _next_data(self, __original=original):
        data = __original(self)
        if _ext.collecting():
            try:
                held = self.__dict__.setdefault("_msmemscope_held", set())
                for idx, info in self._task_info.items():
                    if len(info) == 2 and idx not in held:
                        held.add(idx)
                        _dataloader_note(info[1], "held")
                held.intersection_update(self._task_info)
                _dataloader_note(data, "handed")
            except Exception:
                pass
        return data

    _next_data._msmemscope = True
    cls._next_data = _next_data


def before_exit() -> None:
    """At the exit (_collect.before_exit): torch keeps a weak reference to
    each storage a process has sent or received through shared memory (its
    shared_cache, so that a storage is mapped once per process), and a weak
    reference keeps the storage's StorageImpl (80 bytes of host heap)
    allocated after the storage is gone, until the cache grows past its
    limit and drops the dead ones (free_dead_references). At exit it still
    held up to that limit, and its grown table: a DataLoader's batches read
    as host memory still allocated at exit at torch's rebuild_storage_fd
    (one block per batch tensor) and SharedCache.__setitem__. The cache is
    emptied now: the program has ended (a storage still alive keeps its
    StorageImpl; only the cache's weak reference to it goes)."""
    reductions = sys.modules.get("torch.multiprocessing.reductions")
    cache = getattr(reductions, "shared_cache", None)
    if not isinstance(cache, dict):
        return
    with getattr(cache, "lock", None) or contextlib.nullcontext():
        dict.clear(cache)


# DDP's gradient buckets as its Reducer rebuilds them, once, in the forward
# after the first backward (in the order the gradients became ready): the
# leak analysis judges them as set-up, like the warm-up steps' blocks, not
# as a leak of that step at the program's forward line.
DDP_BUCKETS = "ddp_buckets"


def _wrap_ddp_rebuild() -> None:
    """Blocks allocated inside Reducer._rebuild_buckets get owner
    PTA@ddp_buckets (in force over a describer label: DDP's memory, not the
    scope's)."""
    try:
        if not torch.distributed.is_available():
            return
        from torch._C._distributed_c10d import Reducer
        original = Reducer._rebuild_buckets
    except (ImportError, AttributeError):
        return
    if getattr(original, "_msmemscope", False):
        return

    def _rebuild_buckets(self, __original=original):
        labels = _shared.owner_labels()
        _ext.set_owner_label(DDP_BUCKETS)
        try:
            return __original(self)
        finally:
            _ext.set_owner_label(labels[-1] if labels else "")

    _rebuild_buckets._msmemscope = True
    Reducer._rebuild_buckets = _rebuild_buckets


def _stack():
    s = getattr(_tls, "modules", None)
    if s is None:
        s = _tls.modules = []
    return s


def _module_pre(module, inputs):
    if _trace:
        _stack().append((id(module), _ext.now()))


def _module_post(module, inputs, output):
    if not _trace:
        return
    s = _stack()
    key = id(module)
    while s:
        mid, start = s.pop()
        if mid == key:
            if _ext.collecting():
                _ext.event(EV["PY_TRACE"], T["PY_CALL"], 0, -1, 0, 0, start, 0,
                           f"nn.Module: {type(module).__name__}", "")
            break


_pool_hooks_installed = False


def _install_pool_hooks() -> None:
    """The CPU pool's hooks (c10's allocator, at::MapAllocator's mmap)."""
    global _pool_hooks_installed
    if _pool_hooks_installed:
        return
    _pool_hooks_installed = True
    try:
        _ext.install_torch_hooks("libc10.so")
        # shared-memory and mapped storages (at::MapAllocator's mmap)
        _ext.install_torch_map_hooks("libtorch_cpu.so")
    except RuntimeError:
        pass  # no GOT patcher: operators are still recorded


def note_existing(storages: Dict[int, int]) -> None:
    """Before collection starts (start()): the pool's hooks go in and its
    table learns the storages that exist, so that the agent's shadow rows
    of the host heap are each followed by the storage carved there (one
    count of those bytes, not two until the search after the start)."""
    _install_pool_hooks()
    _ext.pta_note_existing(list(storages.items()))


def enable(trace: bool) -> None:
    """Turns the PyTorch collector on (start())."""
    global _mode, _access, _trace, _hooks_installed, _weight_hook
    # --level: operator rows (ATEN_START/END) and their ACCESS rows are op
    # level, as upstream's aten collector (on only when op is among the levels)
    _access = bool(_ext.wants("op_access"))
    _trace = trace
    if not _hooks_installed:
        _hooks_installed = True
        _install_pool_hooks()
        _patch_optimizers()
        _wrap_autograd()
        _wrap_register_parameter()
        _wrap_dataloader()
        _wrap_ddp_rebuild()
    # the rank of a process whose environment names none (mp.spawn)
    _rank.install(torch)
    from torch.nn.modules import module as m
    if _weight_hook is None:
        _weight_hook = m.register_module_forward_pre_hook(_weights_pre)
    if trace and not _module_hooks:
        _module_hooks.append(m.register_module_forward_pre_hook(_module_pre))
        _module_hooks.append(m.register_module_forward_hook(_module_post))
    if _mode is None and _observer is None:
        _start_op_tracking()
    # the target uses torch.cuda: caching allocator, operators on CUDA devices
    _cuda.enable(torch, _ext.option("device"), _ops_on_cuda)
    # --watch / config(watch=...): its dispatch mode goes in with the
    # collector, so a script without a watcher call is watched too (#28 item 3)
    watcher.range_started()


def _ops_on_cuda() -> None:
    global _cuda_ops
    _cuda_ops = True
    if _observer is not None:  # again, now that the driver is loaded
        _observer.enable(bool(_ext.wants("op_launch")), _access, _ext.op_depth_api, True)


def _start_op_tracking() -> None:
    global _mode, _observer
    # watch checkpoints come from watcher.py's own dispatch mode, so the fast
    # C++ observer serves whether or not something is watched.
    try:
        from . import _torch_observer as obs
    except ImportError:
        obs = None
    if obs is not None:
        try:
            obs.enable(bool(_ext.wants("op_launch")), _access, _ext.op_depth_api, _cuda_ops)
            _observer = obs
            return
        except RuntimeError:
            pass
    _mode = _OpMode()
    _mode.__enter__()


def disable() -> None:
    """Turns operator tracking off (stop()); storage tracking stays so that
    the pool numbers remain right in the next range."""
    global _mode, _trace, _observer, _cuda_ops, _weight_hook
    # what stop() (or the exit) leaves: every known parameter and gradient
    try:
        _tag_known("msmemscope.stop")
    except Exception:
        pass
    if _weight_hook is not None:
        _weight_hook.remove()
        _weight_hook = None
    # the next range looks at each module's parameters again (its block, as _put's, unseen by the hooks)
    _ext.without_hooks(_seen_modules.clear)
    _cuda.disable()
    _cuda_ops = False
    if _observer is not None:
        _observer.disable()
        _observer = None
    if _mode is not None:
        try:
            _mode.__exit__(None, None, None)
        finally:
            _mode = None
    _trace = False
    while _module_hooks:
        _module_hooks.pop().remove()
