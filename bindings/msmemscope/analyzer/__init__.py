"""Offline analyses of a memscope_dump file, as msMemScope's
``msmemscope.analyzer`` module:

    from msmemscope.analyzer import LeaksAnalyzer, LeaksConfig
    LeaksAnalyzer().analyze(LeaksConfig("memscope_dump_x.csv", mstx_info="step", start_index=0))

    msmemscope.analyzer.check_inefficient("memscope_dump_x.csv", inefficient_type="early_allocation")

``analyze``, ``list_analyzers`` and ``get_analyzer_config`` are the package's
own (``msmemscope.analyze``): they cover every analyzer plugin; for "leaks"
with ``mstx_info`` and for "inefficient", ``analyze`` runs the classes here.
"""
from __future__ import annotations

from .. import _offline
from .base import AnalysisConfig, BaseAnalyzer
from .inefficient import InefficientAnalyzer, InefficientConfig, check_inefficient
from .leaks import LeaksAnalyzer, LeaksConfig, check_leaks
from .._offline import get_analyzer_config, list_analyzers

__all__ = ["analyze", "list_analyzers", "get_analyzer_config", "check_leaks", "check_inefficient",
           "LeaksAnalyzer", "InefficientAnalyzer", "LeaksConfig", "InefficientConfig", "AnalysisConfig",
           "BaseAnalyzer"]


def analyze(name: str, input_path=None, **kwargs):
    """Runs analyzer ``name`` on a dump. "inefficient", and "leaks" with
    ``mstx_info``, are upstream's offline analyses (keywords = their Config's
    parameters; they print their results and return None). Any other
    analyzer plugin (see list_analyzers()) runs through the command line's
    offline mode with its options as keywords; its report is returned."""
    if not isinstance(name, str):
        raise TypeError(f"msmemscope.analyze: 'name' must be a string, got {type(name).__name__}")
    if input_path is None:
        raise TypeError("msmemscope.analyze: 'input_path' is required (a memscope_dump .csv/.db or its folder)")
    if name == "inefficient":
        return check_inefficient(input_path, **kwargs)
    if name == "leaks" and "mstx_info" in kwargs:
        return check_leaks(input_path, **kwargs)
    path = _offline.check_input("analyze", input_path)
    return _offline.run("analyze", name, path, _offline.options("analyze", name, kwargs))
