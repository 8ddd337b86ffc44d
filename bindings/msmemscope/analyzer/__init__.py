"""Offline analyses of a memscope_dump file, as msMemScope's
``msmemscope.analyzer`` module:

    from msmemscope.analyzer import LeaksAnalyzer, LeaksConfig
    LeaksAnalyzer().analyze(LeaksConfig("memscope_dump_x.csv", mstx_info="step", start_index=0))

    msmemscope.analyzer.check_inefficient("memscope_dump_x.csv", inefficient_type="early_allocation")

``list_analyzers`` and ``get_analyzer_config`` return what upstream's do
(its two analyzers first, then every other analyzer plugin found).
``analyze`` covers every analyzer plugin; for "leaks" with ``mstx_info`` and
for "inefficient" it runs the classes here.
"""
from __future__ import annotations

from .. import _offline
from .base import AnalysisConfig, BaseAnalyzer
from .inefficient import InefficientAnalyzer, InefficientConfig, check_inefficient
from .leaks import LeaksAnalyzer, LeaksConfig, check_leaks
import inspect
from typing import Any, Dict, List

__all__ = ["analyze", "list_analyzers", "get_analyzer_config", "check_leaks", "check_inefficient",
           "LeaksAnalyzer", "InefficientAnalyzer", "LeaksConfig", "InefficientConfig", "AnalysisConfig",
           "BaseAnalyzer"]


# upstream's analyzers and their Config classes, in upstream's order
# (python/msmemscope/analyzer/__init__.py)
_CONFIG_MAPPING = {"leaks": LeaksConfig, "inefficient": InefficientConfig}


def list_analyzers() -> List[str]:
    """The analyzer names, as upstream's: "leaks", "inefficient", then every
    other analyzer plugin found (built-in and third-party), sorted."""
    found = _offline.analyzer_plugins()
    first = [n for n in _CONFIG_MAPPING if n in found]
    return first + [n for n in found if n not in first]


def get_analyzer_config(analyzer_type: str) -> Dict[str, Any]:
    """As upstream's: {"config_class": the Config class's name, "parameters":
    its constructor's parameters after self}. An analyzer plugin that has no
    upstream Config class gives "config_class": None, its options as
    "parameters", and "options": each option's {type, default, allowed, min,
    max, description}."""
    names = list_analyzers()
    if analyzer_type not in names:
        raise ValueError(f"Unknown analyzer type: {analyzer_type}. Available types are {names}")
    cls = _CONFIG_MAPPING.get(analyzer_type)
    if cls is not None:
        return {"config_class": cls.__name__, "parameters": list(inspect.signature(cls.__init__).parameters)[1:]}
    schema = _offline.plugin_schema(analyzer_type)
    return {"config_class": None, "parameters": list(schema), "options": schema}


def analyze(name: str, input_path=None, **kwargs):
    """Runs analyzer ``name`` on a dump. "inefficient", and "leaks" with
    ``mstx_info``, are upstream's offline analyses (keywords = their Config's
    parameters; they print their results and return None). Any other
    analyzer plugin (see list_analyzers(): the built-in ones and those in
    the folders config(plugin_path=...) and MSMEMSCOPE_PLUGIN_PATH name)
    runs through the command line's offline mode with its options as
    keywords (over those msmemscope.config(plugin_options=...) set for it);
    its report is returned. The files an analyzer writes and its report
    names (leaks' full list past max_lines, watch's checkpoint hashes) go
    into the folder msmemscope.config(output=...) names, memscopeDumpResults
    unless set, as ``msmemscope --analyze``'s go into --output; nothing is
    made there for an analysis that writes no file. Its memory budget is the command
    line's default (half the machine's memory or of the cgroup's limit):
    there is no keyword for it; ``msmemscope --analyze=NAME --input=FILE
    --offline-memory=MIB`` runs the analysis with one.

    What the analysis warns of (a dump without the rows it needs, what an
    analyzer found odd in it) comes as a Python warning. Raises TypeError
    for an argument of the wrong type or an option the analyzer does not
    have, FileNotFoundError for an input_path that does not exist,
    ValueError for a value refused (an option's value, or an input_path
    that is not a memscope_dump file), RuntimeError when the analysis
    failed (an analyzer dropped, its results incomplete)."""
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
