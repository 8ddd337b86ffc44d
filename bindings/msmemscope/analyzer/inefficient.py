"""Offline inefficient-memory check (msMemScope's ``check_inefficient``).

The findings (early_allocation, late_deallocation, temporary_idleness; the
rules are the ``inefficient`` analyzer plugin's, run through the command
line's offline mode) are written back into the input file as Attr
``inefficient_type:<kinds>`` of the block's MALLOC row, as upstream does.

The file is replaced, never edited in place: the results go into a copy in
the same folder (created exclusively, not through any symbolic link), which
gets the original's permission bits and is then renamed over it. A symbolic
link as ``input_path`` is refused (renaming would replace the link, not the
file it points to).
"""
from __future__ import annotations

import csv
import os
import shutil
import sqlite3
import stat
import tempfile
from pathlib import Path
from typing import List, Optional, Union

from .. import _offline
from .base import AnalysisConfig, BaseAnalyzer, Default, is_int, value_of

INEFFICIENT_TYPES = ["early_allocation", "late_deallocation", "temporary_idleness"]
HEADERS = ["ID", "Event", "Event Type", "Name", "Timestamp(ns)", "Process Id", "Thread Id", "Device Id", "Ptr",
           "Attr", "Call Stack(Python)", "Call Stack(C)"]

# upstream's defaults (the inefficient plugin's are the same), as defaults:
# a parameter left at one takes what config(plugin_options=...) set
MEM_SIZE, KINDS, IDLE_THRESHOLD = Default(0), Default(None), Default(3000)

__all__ = ["InefficientConfig", "InefficientAnalyzer", "check_inefficient", "INEFFICIENT_TYPES"]


class InefficientConfig(AnalysisConfig):
    """``input_path`` (a memscope_dump .csv or .db, written back), blocks of
    at least ``mem_size`` bytes, the ``inefficient_type`` kinds to look for
    (a list, or one kind as a string), ``idle_threshold`` (APIs between two
    accesses for temporary idleness)."""

    def __init__(self, input_path: str, mem_size: int = MEM_SIZE,
                 inefficient_type: Union[None, str, List[str]] = KINDS, idle_threshold: int = IDLE_THRESHOLD) -> None:
        super().__init__(input_path=input_path)
        # The parameters the caller gave, whatever their value (mem_size=0
        # too): those are the user's latest word over what
        # msmemscope.config(plugin_options={"inefficient": ...}) set.
        given = {"mem_size": mem_size, "inefficient_type": inefficient_type, "idle_threshold": idle_threshold}
        self.parameters_given = {k for k, v in given.items() if not isinstance(v, Default)}
        self.mem_size = value_of(mem_size)
        inefficient_type = value_of(inefficient_type)
        self.inefficient_type = list(INEFFICIENT_TYPES) if inefficient_type is None else inefficient_type
        self.idle_threshold = value_of(idle_threshold)
        self.__post_init__()

    def __post_init__(self) -> None:
        super().__post_init__()
        path = Path(self.input_path)
        if not os.access(str(path), os.W_OK):
            raise PermissionError(f"Write permission denied: {path}")
        if not is_int(self.mem_size) or self.mem_size < 0:
            raise ValueError("Memory size must be a non-negative integer")
        kinds = [self.inefficient_type] if isinstance(self.inefficient_type, str) else self.inefficient_type
        if not isinstance(kinds, list) or not kinds:
            raise ValueError("Inefficient type must be a non-empty list or a single valid string")
        for k in kinds:
            if k not in INEFFICIENT_TYPES:
                raise ValueError(f"Invalid inefficient type: {k}, valid values are {INEFFICIENT_TYPES}")
        self.inefficient_type = kinds
        if not is_int(self.idle_threshold) or self.idle_threshold <= 0:
            raise ValueError("Idle threshold must be a positive integer")


def _check_columns(path: Path, fmt: str) -> None:
    if fmt == "csv":
        with open(path, "r", encoding="utf-8", newline="") as f:
            header = next(csv.reader(f), [])
        what = "CSV"
    else:
        con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
        try:
            # a table (upstream's files, ours with db.layout=table) or the view
            # our db sink writes by default (each call stack stored once)
            if not con.execute("SELECT name FROM sqlite_master WHERE type IN ('table', 'view') "
                               "AND name='memscope_dump'").fetchone():
                raise ValueError(f"Table 'memscope_dump' not found in database {path}")
            header = [c[1] for c in con.execute("PRAGMA table_info(memscope_dump)")]
        finally:
            con.close()
        what = "DB"
    missing = [h for h in HEADERS if h not in header]
    if missing:
        raise ValueError(f"ERROR: {what} format error: missing headers {missing}")


def _stamp(path: str):
    st = os.stat(path)
    return st.st_ino, st.st_mtime_ns, st.st_size


def _options_of(config: InefficientConfig) -> dict:
    """The analyzer's options the config gives: the parameters its caller
    gave (a value set on it afterwards too). One left at its default is
    not: InefficientConfig always has a value, and check_inefficient(path)
    would otherwise undo what msmemscope.config(plugin_options={"inefficient":
    ...}) set."""
    values = {"mem_size": str(config.mem_size), "inefficient_type": ",".join(config.inefficient_type),
              "idle_threshold": str(config.idle_threshold)}
    defaults = {"mem_size": str(MEM_SIZE.value), "inefficient_type": ",".join(INEFFICIENT_TYPES),
                "idle_threshold": str(IDLE_THRESHOLD.value)}
    return {k: v for k, v in values.items() if k in config.parameters_given or v != defaults[k]}


class InefficientAnalyzer(BaseAnalyzer):
    def analyze(self, config: InefficientConfig) -> None:
        self.config = config
        path = Path(config.input_path)
        if path.is_symlink():
            raise ValueError(f"{path} is a symbolic link; give the dump file itself (the results are written "
                             f"back into it by replacing the file)")
        fmt = "db" if path.suffix.lower() == ".db" else "csv"
        _check_columns(path, fmt)
        if fmt == "csv":
            print("INFO: Connected to CSV file")
        else:
            print(f"INFO: Connected to {path.name} (table: memscope_dump)")
        mode = stat.S_IMODE(os.stat(path).st_mode)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.stem}.", suffix=path.suffix, dir=str(path.parent))
        try:
            with open(path, "rb") as src, os.fdopen(fd, "wb") as dst:
                shutil.copyfileobj(src, dst, 1 << 20)
            print("INFO: CSV file read successfully" if fmt == "csv" else "INFO: DB file read successfully")
            before = _stamp(tmp)
            # (the inefficient analyzer writes no file of its own: its
            # results come back into the copy)
            _offline.run("check_inefficient", "inefficient", tmp, _options_of(config), shown_as=str(path),
                         writes_files=False)
            if fmt == "csv":
                print(f"INFO: Connecting to csv {path.name} to write results")
            else:
                print(f"INFO: Connecting to database {path.name} to write results")
            if _stamp(tmp) != before:
                os.chmod(tmp, mode)
                os.replace(tmp, path)
                tmp = None
        finally:
            if tmp is not None:
                try:
                    os.unlink(tmp)
                except FileNotFoundError:
                    pass
        if fmt == "csv":
            print(f"INFO: All results have been successfully written to csv {path.name}")
        else:
            print(f"INFO: All results have been successfully written to database {path.name}")


def check_inefficient(input_path: str, mem_size: int = MEM_SIZE, inefficient_type: Optional[List[str]] = KINDS,
                      idle_threshold: int = IDLE_THRESHOLD) -> None:
    """Offline inefficient-memory check of a dump (see the module's text):
    prints upstream's progress lines and writes ``inefficient_type:<kinds>``
    into the MALLOC rows of the blocks found. An argument left out takes
    the value msmemscope.config(plugin_options={"inefficient": {...}}) set,
    if any; one given (its default's value too) is used.

    What the analysis warns of (a dump recorded without accesses) comes as
    a Python warning. Raises FileNotFoundError for an input_path that is
    not a file, ValueError for a value refused (an argument's, or an
    input_path that is not a memscope_dump file), PermissionError for a
    file it cannot read or write back, RuntimeError when the analysis failed
    (its results not written back)."""
    InefficientAnalyzer().analyze(InefficientConfig(input_path=input_path, mem_size=mem_size,
                                                    inefficient_type=inefficient_type,
                                                    idle_threshold=idle_threshold))
