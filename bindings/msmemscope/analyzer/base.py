"""What every offline analysis checks of its input (msMemScope's
``AnalysisConfig``: the same checks, in the same order, with its messages)."""
from __future__ import annotations

import os
from abc import ABC, abstractmethod
from pathlib import Path
from typing import Any

MAX_FILE_SIZE = 8 << 30        # 8 GiB
INPUT_STR_MAX_LEN = 4096       # characters of the path


class AnalysisConfig:
    """The input of an offline analysis: a memscope_dump .csv or .db file."""

    def __init__(self, input_path: str) -> None:
        self.input_path = input_path

    def __post_init__(self) -> None:
        if not isinstance(self.input_path, (str, os.PathLike)):
            raise TypeError(f"input_path must be a path string, got {type(self.input_path).__name__}")
        path = Path(self.input_path)
        if not path.is_file():
            raise FileNotFoundError(f"File not found: {path} or not a regular file")
        st = path.stat()
        if st.st_uid != os.getuid():
            if os.getuid() == 0:
                print("WARN: Process is running as user root. Please confirm the input path is trusted.")
            else:
                print("WARN: The input path is not owned by the current user. Please confirm it is trusted.")
        if not os.access(str(path), os.R_OK):
            raise PermissionError(f"Read permission denied: {path}")
        if st.st_size > MAX_FILE_SIZE:
            raise ValueError(f"Max allowed size is {MAX_FILE_SIZE / (1 << 30):.2f}GB")
        if len(str(path)) > INPUT_STR_MAX_LEN:
            raise ValueError(f"Max allowed length is {INPUT_STR_MAX_LEN} characters")
        ext = path.suffix.lower()
        if ext not in (".csv", ".db"):
            raise ValueError(f"Unsupported file type: {ext}.Only files ending with .csv or .db are supported.")


class Default:
    """A parameter's default, told apart from the same value given by the
    caller: a value given is the user's latest word over what
    msmemscope.config(plugin_options=...) set, a default is not. Shown as
    the value itself (help(), inspect.signature)."""

    def __init__(self, value: Any) -> None:
        self.value = value

    def __repr__(self) -> str:
        return repr(self.value)


def value_of(v: Any) -> Any:
    """The value a parameter has: its default's when it was not given."""
    return v.value if isinstance(v, Default) else v


def is_int(v: Any) -> bool:
    """An int that is not a bool (True is not a size or an index)."""
    return isinstance(v, int) and not isinstance(v, bool)


class BaseAnalyzer(ABC):
    """An offline analysis: ``analyze(config)`` prints its results."""

    @abstractmethod
    def analyze(self, config: AnalysisConfig) -> None:
        ...
