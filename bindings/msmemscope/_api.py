"""The public functions of the package (COMPAT §2)."""
from __future__ import annotations

import dis
import functools
import os
import re
import subprocess
import sys
from typing import Any, Callable, Dict, Iterable, List, Optional, Sequence, Union

from . import _collect, _session, watcher
from ._session import _ext

__all__ = ["config", "start", "stop", "step", "take_snapshot", "RecordFunction", "list_analyzers",
           "get_analyzer_config", "analyze", "check_leaks", "check_inefficient"]


# ---------------------------------------------------------------- config
def config(**kwargs: str) -> None:
    """Sets collection options. Keyword-only, every value a string; the same
    names, values and checks as the command line (``msmemscope --help``).

    Keys:
      device       npu, npu:{0..31}, cpu, cuda, cuda:{0..31}; several with ','
                   (default npu; a script on a machine without an NPU wants "cpu")
      level        0 / op (operator level, default) or 1 / kernel
      events       alloc, free, launch, access, traceback (default alloc,free,launch);
                   "" records none; traceback = the Python trace file
      call_stack   python, c, each with an optional :depth 0..1000, e.g. "c:20,python:10"
      analysis     analyzer names: leaks (default), inefficient, decompose, oom[:K],
                   or any analyzer plugin found (see list_analyzers()); "" for none
      watch        "[start[:outN],]end[,full-content]"
      data_format  csv (default) or db; alias: format
      output       output folder (default memscopeDumpResults); alias: output_path
      sinks        more output sinks by plugin name, e.g. "trace,html"
      steps        at most 5 step numbers to collect, e.g. "1,2,3"
      collect_mode immediate or deferred
      log_level    info, warn (default), error

    ``output``, ``data_format`` and ``watch`` take effect only the first time
    they are set (later values are ignored with a warning). The other keys
    cannot change once the first start() has opened the session.

    Raises TypeError for an unknown key or a value that is not a string,
    ValueError (with the command line's message, naming the key and the
    allowed values) for a bad value.
    """
    _session.configure(kwargs)


# ---------------------------------------------------------------- range
def start() -> None:
    """Starts (or resumes) collection: SYSTEM START_TRACE, then every event
    the configuration asks for until stop(). The first call opens the
    session (spawns the host when not running under the CLI)."""
    _session.session()
    _ext.start()
    _collect.enable_for_range()
    watcher.range_started()


def stop() -> None:
    """Stops collection (SYSTEM STOP_TRACE). start() may be called again."""
    if _session.active_session() is None and not _ext.agent_loaded():
        return
    watcher.range_stopped()
    _collect.disable_for_range()
    _ext.stop()


def step() -> int:
    """Marks the end of a step (SYSTEM STEP, Name = the step number, 1, 2, ...);
    returns the step number."""
    _session.session()
    return int(_ext.step())


# ---------------------------------------------------------------- snapshot
def _check_mask(device_mask: Any) -> Optional[List[int]]:
    allowed = "None, a device id 0..31, or a list/tuple of device ids"
    if device_mask is None:
        return None
    items = device_mask if isinstance(device_mask, (list, tuple)) else [device_mask]
    if isinstance(device_mask, (list, tuple)) and not device_mask:
        raise ValueError(f"msmemscope.take_snapshot: 'device_mask' is empty (allowed: {allowed})")
    out = []
    for d in items:
        if isinstance(d, bool) or not isinstance(d, int):
            raise TypeError(f"msmemscope.take_snapshot: 'device_mask' must be {allowed}; got "
                            f"{type(d).__name__} {d!r}")
        if d < 0 or d > 31:
            raise ValueError(f"msmemscope.take_snapshot: device id {d} out of range (allowed: {allowed})")
        out.append(d)
    return out


def _snapshot_attrs() -> str:
    m = _ext.memory_info()
    total = int(m.get("total", 0))
    free = int(m.get("free", 0))
    used = int(m.get("pta_used", 0))
    peak = int(m.get("pta_peak", 0))
    util = f"{100.0 * (total - free) / total:.2f}%" if total else "N/A"
    pt_util = f"{100.0 * used / total:.2f}%" if total else "N/A"
    return (f"total_mem:{total},free_mem:{free},reserved:{used},peak_reserved:{peak},allocated:{used},"
            f"peak_allocated:{peak},device_utilization:{util},pt_utilization:{pt_util},"
            f"rss:{int(m.get('rss', 0))},peak_rss:{int(m.get('peak_rss', 0))}")


def _emit_snapshot(name: str, mask: Optional[List[int]]) -> None:
    _session.session()
    attrs = _snapshot_attrs()
    if mask is not None:
        attrs += ",device_mask:" + str(mask)
    _ext.event(_ext.EV["SNAPSHOT"], _ext.T["SNAPSHOT"], _ext.DEV["CPU"], -1, 0, 0, 0, 0, name, attrs)


_OP = dis.opmap
_WITH_OPS = {_OP[n] for n in ("BEFORE_WITH", "SETUP_WITH", "BEFORE_ASYNC_WITH", "SETUP_ASYNC_WITH") if n in _OP}
_SKIP_OPS = {_OP[n] for n in ("CACHE", "PRECALL", "EXTENDED_ARG") if n in _OP}
_MAKE_FUNCTION = _OP.get("MAKE_FUNCTION", -1)


def _call_site_is_scope(depth: int = 2) -> bool:
    """True when the caller uses our return value as a context manager
    (``with take_snapshot(...):``) or a decorator (``@take_snapshot(...)``):
    looks at the caller's next bytecode instructions (no calls into dis, so
    nothing shows in the Python trace)."""
    try:
        frame = sys._getframe(depth)
    except ValueError:
        return False
    code, i = frame.f_code.co_code, frame.f_lasti + 2
    seen = []
    while i + 1 < len(code) and len(seen) < 6:
        op = code[i]
        i += 2
        if op in _SKIP_OPS:
            continue
        seen.append(op)
    if not seen:
        return False
    if seen[0] in _WITH_OPS:
        return True
    # decorator: the decorated function is built right after our call
    return _MAKE_FUNCTION in seen[:4] and seen[0] in (_OP.get("LOAD_CONST"), _OP.get("LOAD_CLOSURE"),
                                                       _OP.get("BUILD_TUPLE"))


class _ContextDecorator:
    """A context manager that also decorates: the function runs inside it.
    `_API` names the public function or class in error messages."""

    _API = ""

    def __call__(self, func: Callable) -> Callable:
        if not callable(func):
            raise TypeError(f"msmemscope.{self._API}: as a decorator it wraps a function, got "
                            f"{type(func).__name__}")

        @functools.wraps(func)
        def wrapper(*args, **kwargs):
            with self:
                return func(*args, **kwargs)
        return wrapper


class _Snapshot(_ContextDecorator):
    """What take_snapshot() returns: as a context manager or decorator it
    writes "<name> Start" on entry and "<name> End" on exit."""

    _API = "take_snapshot"

    def __init__(self, name: str, mask: Optional[List[int]]) -> None:
        self.name = name
        self.mask = mask

    def __enter__(self) -> "_Snapshot":
        _emit_snapshot(self.name + " Start", self.mask)
        return self

    def __exit__(self, *exc) -> None:
        _emit_snapshot(self.name + " End", self.mask)



def take_snapshot(device_mask: Union[None, int, Sequence[int]] = None, name: str = "Memory Snapshot") -> _Snapshot:
    """Writes a SNAPSHOT row now (works without start()/stop()): on cpu the
    OS's total/free memory, this process's RSS and the PyTorch CPU pool
    (Attr total_mem, free_mem, reserved, peak_reserved, allocated,
    peak_allocated, device_utilization, pt_utilization, rss, peak_rss).

    ``device_mask``: None (all devices), a device id, or a list/tuple of ids.
    ``name``: the row's Name. Used as ``with take_snapshot(name="x"):`` or
    ``@take_snapshot(name="x")`` it writes "x Start" and "x End" instead.
    """
    mask = _check_mask(device_mask)
    if not isinstance(name, str):
        raise TypeError(f"msmemscope.take_snapshot: 'name' must be a string, got {type(name).__name__}")
    if not name or "\n" in name:
        raise ValueError("msmemscope.take_snapshot: 'name' must be a non-empty single-line string")
    snap = _Snapshot(name, mask)
    if not _call_site_is_scope():
        _emit_snapshot(name, mask)
    return snap


# ---------------------------------------------------------------- RecordFunction
class RecordFunction(_ContextDecorator):
    """A named span in the Python trace file (python_trace_{ts}.csv), as a
    context manager or a decorator:

        with msmemscope.RecordFunction("forward_pass"):
            out = model(x)

        @msmemscope.RecordFunction("forward_pass")
        def forward_pass(x): ...

    Recorded while collection is on (or tracer.start() is active).
    """

    _API = "RecordFunction"

    def __init__(self, name: str) -> None:
        if not isinstance(name, str):
            raise TypeError(f"msmemscope.RecordFunction: 'name' must be a string, got {type(name).__name__}")
        if not name or "\n" in name:
            raise ValueError("msmemscope.RecordFunction: 'name' must be a non-empty single-line string")
        self.name = name
        self._starts: List[int] = []

    def __enter__(self) -> "RecordFunction":
        self._starts.append(_ext.now() if _ext.agent_loaded() else 0)
        return self

    def __exit__(self, *exc) -> None:
        start = self._starts.pop() if self._starts else 0
        if start and _ext.attached() and (_ext.collecting() or _collect.trace_on()):
            _ext.event(_ext.EV["PY_TRACE"], _ext.T["PY_RECORD_FUNCTION"], _ext.DEV["NA"], -1, 0, 0, start, 0,
                       self.name, "")



# ---------------------------------------------------------------- offline
def _plugins() -> List[dict]:
    return _ext.list_plugins(_session.PREFIX, _session._plugin_paths)


def list_analyzers() -> List[str]:
    """Names of every analyzer plugin found (built-in and third-party)."""
    return sorted(p["name"] for p in _plugins() if p["kind"] == "analyzer")


def get_analyzer_config(name: str) -> Dict[str, dict]:
    """The options of analyzer ``name``: {option: {type, default, allowed,
    min, max, description}}."""
    if not isinstance(name, str):
        raise TypeError(f"msmemscope.get_analyzer_config: 'name' must be a string, got {type(name).__name__}")
    for p in _plugins():
        if p["kind"] == "analyzer" and p["name"] == name:
            return {o["name"]: {k: v for k, v in o.items() if k != "name"} for o in p["options"]}
    names = list_analyzers()
    raise ValueError(f"msmemscope.get_analyzer_config: unknown analyzer '{name}' "
                     f"(available: {', '.join(names) if names else 'none found'})")


def _offline_option() -> Optional[str]:
    """The CLI's offline-analysis option, if this build's CLI has one."""
    try:
        text = subprocess.run([_session.CLI, "--help"], capture_output=True, text=True, timeout=60).stdout
    except OSError:
        return None
    for opt in ("--analyze", "--offline", "--analyse"):
        if re.search(r"^\s+" + re.escape(opt) + r"(=|\s)", text, re.M):
            return opt
    return None


def _run_offline(func: str, analyzer: str, input_path: str, options: Dict[str, str]) -> str:
    opt = _offline_option()
    if opt is None:
        raise RuntimeError(f"msmemscope.{func}: needs the command line's offline analysis mode, which "
                           f"{_session.CLI} does not have ('msmemscope --help' lists no --analyze option)")
    args = [_session.CLI, f"{opt}={analyzer}", f"--input={input_path}"]
    args += [f"--plugin-option={analyzer}.{k}={v}" for k, v in options.items()]
    p = subprocess.run(args, capture_output=True, text=True)
    if p.returncode != 0:
        raise RuntimeError(f"msmemscope.{func}: {p.stderr.strip() or p.stdout.strip()}")
    return p.stdout


def _check_input(func: str, input_path: Any) -> str:
    if not isinstance(input_path, (str, os.PathLike)):
        raise TypeError(f"msmemscope.{func}: 'input_path' must be a path string, got {type(input_path).__name__}")
    path = os.fspath(input_path)
    if not os.path.exists(path):
        raise FileNotFoundError(f"msmemscope.{func}: input_path '{path}' does not exist "
                                f"(allowed: a memscope_dump .csv or .db file, or a folder with one)")
    if os.path.isfile(path) and not path.endswith((".csv", ".db")):
        raise ValueError(f"msmemscope.{func}: input_path '{path}' is not a .csv or .db dump file")
    return path


def _options(func: str, analyzer: str, kwargs: Dict[str, Any]) -> Dict[str, str]:
    schema = get_analyzer_config(analyzer)
    out = {}
    for k, v in kwargs.items():
        if k not in schema:
            raise TypeError(f"msmemscope.{func}: analyzer '{analyzer}' has no option '{k}' "
                            f"(options: {', '.join(schema) if schema else 'none'})")
        if isinstance(v, (list, tuple)):
            v = ",".join(str(x) for x in v)
        elif isinstance(v, bool):
            v = "true" if v else "false"
        out[k] = str(v)
    return out


def analyze(name: str, input_path: Optional[str] = None, **kwargs: Any) -> str:
    """Runs analyzer ``name`` offline on a dump (``input_path``) with its
    options as keywords (see get_analyzer_config); returns the CLI's report.
    Findings are written back into the dump as the online analysis would."""
    if not isinstance(name, str):
        raise TypeError(f"msmemscope.analyze: 'name' must be a string, got {type(name).__name__}")
    if input_path is None:
        raise TypeError("msmemscope.analyze: 'input_path' is required (a memscope_dump .csv/.db or its folder)")
    path = _check_input("analyze", input_path)
    return _run_offline("analyze", name, path, _options("analyze", name, kwargs))


def check_leaks(input_path: str, mstx_info: str, start_index: int) -> str:
    """Offline leak check between mstx marks: A, B, C = the marks named
    ``mstx_info`` number ``start_index``, +1, +2; driver blocks allocated
    between A and B and not freed by C are leaks (written into the dump)."""
    path = _check_input("check_leaks", input_path)
    if not isinstance(mstx_info, str):
        raise TypeError(f"msmemscope.check_leaks: 'mstx_info' must be a string, got {type(mstx_info).__name__}")
    if not mstx_info:
        raise ValueError("msmemscope.check_leaks: 'mstx_info' must be the non-empty name of an mstx mark")
    if isinstance(start_index, bool) or not isinstance(start_index, int):
        raise TypeError(f"msmemscope.check_leaks: 'start_index' must be an int, got {type(start_index).__name__}")
    if start_index < 0:
        raise ValueError(f"msmemscope.check_leaks: 'start_index' must be >= 0, got {start_index}")
    return _run_offline("check_leaks", "leaks", path, {"mstx_info": mstx_info, "start_index": str(start_index)})


INEFFICIENT_TYPES = ("early_allocation", "late_deallocation", "temporary_idleness")


def check_inefficient(input_path: str, mem_size: int = 0,
                      inefficient_type: Iterable[str] = INEFFICIENT_TYPES, idle_threshold: int = 3000) -> str:
    """Offline inefficient-memory check of a dump: blocks of at least
    ``mem_size`` bytes with the given ``inefficient_type`` findings
    (early_allocation, late_deallocation, temporary_idleness); two accesses
    more than ``idle_threshold`` APIs apart are temporary idleness. Findings
    are written into the dump's Attr (``inefficient``)."""
    path = _check_input("check_inefficient", input_path)
    if isinstance(mem_size, bool) or not isinstance(mem_size, int):
        raise TypeError(f"msmemscope.check_inefficient: 'mem_size' must be an int, got {type(mem_size).__name__}")
    if mem_size < 0:
        raise ValueError(f"msmemscope.check_inefficient: 'mem_size' must be >= 0, got {mem_size}")
    if isinstance(inefficient_type, str) or not isinstance(inefficient_type, (list, tuple, set, frozenset)):
        raise TypeError(f"msmemscope.check_inefficient: 'inefficient_type' must be a list of "
                        f"{', '.join(INEFFICIENT_TYPES)}; got {type(inefficient_type).__name__}")
    kinds = list(inefficient_type)
    if not kinds:
        raise ValueError(f"msmemscope.check_inefficient: 'inefficient_type' is empty (allowed: "
                         f"{', '.join(INEFFICIENT_TYPES)})")
    for k in kinds:
        if k not in INEFFICIENT_TYPES:
            raise ValueError(f"msmemscope.check_inefficient: invalid inefficient_type {k!r} (allowed: "
                             f"{', '.join(INEFFICIENT_TYPES)})")
    if isinstance(idle_threshold, bool) or not isinstance(idle_threshold, int):
        raise TypeError(f"msmemscope.check_inefficient: 'idle_threshold' must be an int, got "
                        f"{type(idle_threshold).__name__}")
    if idle_threshold <= 0:
        raise ValueError(f"msmemscope.check_inefficient: 'idle_threshold' must be > 0, got {idle_threshold}")
    return _run_offline("check_inefficient", "inefficient", path,
                        {"mem_size": str(mem_size), "inefficient_type": ",".join(kinds),
                         "idle_threshold": str(idle_threshold)})
