"""Offline leak check between mstx marks (msMemScope's ``check_leaks``).

Per device (the CSV's Device Id; rows without one, N/A, are not a device):
marks A, B, C are the MSTX Mark rows named ``mstx_info`` number
``start_index``, +1 and +2 in ID order. A HAL block allocated between A and
B (IDs inclusive) and not freed (a HAL FREE of its address) by C is a leak.
Results are printed in upstream's words; the input file is only read.
"""
from __future__ import annotations

import csv
import re
from collections import defaultdict
from pathlib import Path
from typing import Dict, List, Optional

from .base import AnalysisConfig, BaseAnalyzer, is_int

BYTE_TO_MB = 1024 * 1024
_SIZE = re.compile(r"size:(\d+)")

__all__ = ["LeaksConfig", "LeaksAnalyzer", "check_leaks"]


class LeaksConfig(AnalysisConfig):
    """``input_path`` (a memscope_dump .csv), ``mstx_info`` (the marks'
    name) and ``start_index`` (which mark is A, from 0)."""

    def __init__(self, input_path: str, mstx_info: str, start_index: int) -> None:
        super().__init__(input_path=input_path)
        self.mstx_info = mstx_info
        self.start_index = start_index
        self.__post_init__()

    def __post_init__(self) -> None:
        super().__post_init__()
        ext = Path(self.input_path).suffix.lower()
        if ext != ".csv":
            raise ValueError(f"Unsupported file type: {ext}. Only files ending with .csv are supported.")
        if not isinstance(self.mstx_info, str):
            raise TypeError("mstx_info must be a string")
        if not self.mstx_info.strip():
            raise ValueError("mstx_info must not be empty or blank")
        if not is_int(self.start_index) or self.start_index < 0:
            raise ValueError("start_index must be a non-negative integer")


def _row_id(row: Dict[str, str]) -> Optional[int]:
    try:
        return int(row.get("ID") or "")
    except ValueError:
        return None


class LeaksAnalyzer(BaseAnalyzer):
    def __init__(self) -> None:
        self.device_events: Dict[str, List[Dict[str, str]]] = defaultdict(list)
        self.leaks: List[str] = []
        self.error = ""

    def analyze(self, config: LeaksConfig) -> None:
        self.config = config
        if not self._read():
            print("ERROR: Initialization failed:", self.error)
            return
        for device, rows in self.device_events.items():
            if device != "N/A":
                self._analyze_device(device, rows)
        if self.leaks:
            print("\nLeak Analysis Results for the Custom Range:")
            for line in self.leaks:
                print(line)

    def _read(self) -> bool:
        try:
            with open(self.config.input_path, "r", encoding="utf-8", newline="") as f:
                for row in csv.DictReader(f):
                    if _row_id(row) is None:
                        raise csv.Error(f"row {row.get('ID')!r} has no numeric ID")
                    self.device_events[row.get("Device Id") or "N/A"].append(row)
            return True
        except FileNotFoundError:
            self.error = "ERROR: File not found during access"
        except PermissionError:
            self.error = "ERROR: Permission denied during file access"
        except csv.Error as e:
            self.error = f"ERROR: CSV parsing error - {e}"
        except (OSError, UnicodeDecodeError) as e:
            self.error = f"ERROR: Unexpected error - {e}"
        return False

    def _analyze_device(self, device: str, rows: List[Dict[str, str]]) -> None:
        print(f"INFO: Starting to analyze data for device {device}...")
        rows.sort(key=_row_id)
        marks = [r for r in rows if r.get("Event") == "MSTX" and r.get("Event Type") == "Mark"
                 and r.get("Name") == self.config.mstx_info]
        if len(marks) < 3:
            print(f"ERROR: Device {device} has fewer than 3 data points. Please re-collect the data points.")
            return
        first = self.config.start_index
        if first + 2 >= len(marks):
            print(f"INFO: Start index {first} is out of bounds. Device {device} has a total of {len(marks)} "
                  f"MSTX events.")
            return
        a, b, c = (_row_id(marks[first + k]) for k in range(3))
        live: Dict[int, Dict[str, object]] = {}   # by MALLOC ID, in ID order
        for r in rows:
            if r.get("Event Type") != "HAL":
                continue
            rid = _row_id(r)
            if rid > c:
                break
            if r.get("Event") == "MALLOC" and a <= rid <= b:
                m = _SIZE.search(r.get("Attr", ""))
                if m is None:
                    raise ValueError("input data may broken")
                live[rid] = {"addr": r.get("Ptr", ""), "size": int(m.group(1)) / BYTE_TO_MB}
            elif r.get("Event") == "FREE" and rid >= a:
                for k in [k for k, v in live.items() if v["addr"] == r.get("Ptr")]:
                    del live[k]
        if not live:
            self.leaks.append(f"No hal memory leaks detected on device {device}.")
            return
        self.leaks.append(f"====== ERROR: Detected memory leaks on device {device} ======")
        for rid, info in live.items():
            self.leaks.append(f"Direct Hal memory leak of {info['size']} Mb(s) at {info['addr']} in Index {rid}.")


def check_leaks(input_path: str, mstx_info: str, start_index: int) -> None:
    """Offline leak check of a memscope_dump CSV between the mstx marks
    named ``mstx_info`` number ``start_index``, +1, +2 (see the module's
    text); prints the result, changes nothing."""
    LeaksAnalyzer().analyze(LeaksConfig(input_path=input_path, mstx_info=mstx_info, start_index=start_index))
