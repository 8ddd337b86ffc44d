"""Upstream's smoke cases select_one_step, select_first_step, select_last_step,
select_multi_step and oom_cmd (msmemscope test/smoke/run_st.py,
src/test_suit/step_select_test.py, src/test_suit/oom_test.py), adapted to the
CPU: torch_npu removed, npu -> cpu, --device=cpu. The other smoke cases and
where they are ported: README.md, "Upstream's smoke suite".

select_*: `msmemscope python select_one_steps.py [--steps=...]`, a script of
five epochs, each an mstx "step start" range (upstream_smoke/select_steps.py
here). Upstream's check: one dump file with the dump's columns and a fixed
row count per selection (235 all, 60 first, 44 last, 132 steps 1,2,5: counts
of its NPU's HAL and PTA rows). Here: one dump with our header, the mstx
ranges of exactly the selected steps, the same PTA rows in every step (so a
selection of k steps holds k times one step's), and the row counts ordered as
upstream's are (all > 1,2,5 > first > last; the first step here also holds
the interpreter's start, so no sums of rows).

oom_cmd: `msmemscope --analysis=oom:5 python test_oom_smoke.py` (a training
step, then 1 GiB tensors until the allocator fails; here upstream's OOM
example adapted to the CPU, tests/python/upstream_examples/bp_oom.py, under
an address-space limit). Upstream's check: the dump has OOM_DETAIL rows of
the three kinds OOM_TRIGGER, OOM_RECENT_ALLOC and OOM_TOP_ALLOC, and every
trigger's Attr names func and req_size.

Upstream's dump_csv_check (test_upstream_dump_check.check_dump) runs on
every dump these cases write."""
import csv
import resource
from collections import Counter

import pytest

from conftest import DUMP_HEADER, SOURCE, dump_files
from test_upstream_dump_check import check_dump
from upstream_examples_util import PY, cli, only_process

pytest.importorskip("torch")

SCRIPT = SOURCE / "tests" / "programs" / "python" / "upstream_smoke" / "select_steps.py"
SELECTIONS = {"all": None, "first": "1", "last": "5", "multi": "1,2,5"}


def the_dump(out):
    files = dump_files(only_process(out))
    assert len(files) == 1, files
    return files[0]


def summary(path):
    """Rows, mstx ranges, per-step PTA MALLOC/FREE counts of one dump."""
    ranges, pta, rows = [], Counter(), 0
    with open(path, newline="") as f:
        r = csv.reader(f)
        assert next(r) == DUMP_HEADER
        for rec in r:
            rows += 1
            ev, kind, name = rec[1], rec[2], rec[3]
            if ev == "MSTX" and name == "step start":
                ranges.append(kind)
            elif ev in ("MALLOC", "FREE") and kind == "PTA":
                pta[ev] += 1
    return rows, ranges, pta


_runs = {}


def run_selection(tmp_path_factory, which):
    if which not in _runs:
        d = tmp_path_factory.mktemp(f"select_{which}")
        steps = SELECTIONS[which]
        opts = ["--device=cpu", "--output=out"] + ([f"--steps={steps}"] if steps else [])
        cli(d, opts, [PY, SCRIPT])
        dump = the_dump(d / "out")
        check_dump(dump)  # upstream's dump_csv_check
        _runs[which] = summary(dump)
    return _runs[which]


@pytest.mark.parametrize("which", ["first", "last", "multi"])
def test_select_steps(tmp_path_factory, which):
    rows, ranges, pta = run_selection(tmp_path_factory, which)
    k = len(SELECTIONS[which].split(","))
    assert ranges == ["Range_start", "Range_end"] * k, ranges
    assert pta["MALLOC"] == pta["FREE"] and pta["MALLOC"] > 0 and pta["MALLOC"] % k == 0, pta


@pytest.mark.xfail(strict=True, reason="a plain script under the CLI with mstx 'step start' ranges and an optimizer: "
                                       "the optimizer's automatic SYSTEM STEP rows conflict with the mstx steps in the "
                                       "leak analysis ('cannot be used simultaneously'), exit status 70")
def test_select_one_step_whole_run(tmp_path_factory):
    rows, ranges, pta = run_selection(tmp_path_factory, "all")
    assert ranges == ["Range_start", "Range_end"] * 5, ranges


def test_select_steps_counts_ordered_as_upstreams(tmp_path_factory):
    got = {}
    for which in ("first", "last", "multi"):
        got[which] = run_selection(tmp_path_factory, which)
    per_step = got["first"][2]["MALLOC"]
    assert got["last"][2]["MALLOC"] == per_step and got["multi"][2]["MALLOC"] == 3 * per_step
    assert got["multi"][0] > got["first"][0] > got["last"][0]  # upstream: 132 > 60 > 44


LIMIT = 3 << 30  # as test_upstream_examples_oom: torch and the tool fit, a few large tensors do not


def limited():
    resource.setrlimit(resource.RLIMIT_AS, (LIMIT, LIMIT))


def test_oom_cmd(tmp_path):
    p = cli(tmp_path, ["--device=cpu", "--analysis=oom:5", "--log-level=info", "--output=out"],
            [PY, "bp_oom.py", "cli"], preexec_fn=limited)
    assert "OOM detected: " in p.stdout, p.stdout[-3000:]
    dump = the_dump(tmp_path / "out")
    rows = check_dump(dump)  # upstream's dump_csv_check
    detail = [r for r in rows if r["Event"] == "OOM_DETAIL"]
    assert detail
    kinds = Counter(r["Event Type"] for r in detail)
    assert {"OOM_TRIGGER", "OOM_RECENT_ALLOC", "OOM_TOP_ALLOC"} <= set(kinds), kinds
    for r in detail:
        if r["Event Type"] == "OOM_TRIGGER":
            assert "func" in r["Attr"] and "req_size" in r["Attr"], r["Attr"]
    assert kinds["OOM_RECENT_ALLOC"] <= 5 * kinds["OOM_TRIGGER"] and kinds["OOM_TOP_ALLOC"] <= 5 * kinds["OOM_TRIGGER"]
