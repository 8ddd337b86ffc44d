"""Upstream's smoke cases select_one_step, select_first_step, select_last_step,
select_multi_step, oom_cmd, multirank_cmd, decompose_cmd and inefficient_cmd
(msmemscope test/smoke/run_st.py, src/test_suit/step_select_test.py,
oom_test.py, multirank_test.py, decompose_test.py, inefficient_test.py; the
last three below, at their test), adapted to the
CPU: torch_npu removed, npu -> cpu, --device=cpu. The other smoke cases and
where they are ported: README.md, "Upstream's smoke suite".

select_*: `msmemscope python select_one_steps.py [--steps=...]`, a script of
five epochs, each an mstx "step start" range (upstream_smoke/select_steps.py
here). Upstream's check: one dump file with the dump's columns and a fixed
row count per selection (235 all, 60 first, 44 last, 132 steps 1,2,5: counts
of its NPU's HAL and PTA rows). Here: one dump with our header, the mstx
ranges of exactly the selected steps, the same PTA MALLOC rows in every step (so
a selection of k steps holds k times one step's), and the row counts ordered as
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

from conftest import DUMP_HEADER, SOURCE, dump_files, process_dirs
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
    """Rows, mstx ranges, per-step PTA MALLOC/FREE counts of one dump (its own rows, not shadows)."""
    ranges, pta, rows = [], Counter(), 0
    with open(path, newline="") as f:
        r = csv.reader(f)
        assert next(r) == DUMP_HEADER
        for rec in r:
            rows += 1
            ev, kind, name = rec[1], rec[2], rec[3]
            if ev == "MSTX" and name == "step start":
                ranges.append(kind)
            elif ev in ("MALLOC", "FREE") and kind == "PTA" and "shadow:true" not in rec[9]:
                # (shadow rows: the blocks live when a selected step starts,
                # not the step's own rows; framework/host/step_gap.h)
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
    # (a step also frees blocks of the step before it: their FREEs pair with
    # shadow MALLOCs, which check_dump's rules see; the MALLOCs are the step's)
    assert pta["MALLOC"] > 0 and pta["MALLOC"] % k == 0, pta


def test_select_one_step_whole_run(tmp_path_factory):
    # A plain script under the CLI with mstx "step start" ranges and an
    # optimizer: its steps are the mstx ranges; the optimizer's are not also
    # marked (they made the leak analysis refuse both, exit 70).
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


# multirank_cmd, decompose_cmd, inefficient_cmd: torchrun with 2 ranks under
# the CLI (upstream_smoke/multirank_cmd.py), one run with both analyses.
# Upstream's checks that hold off the NPU: three dumps (torchrun's process and
# the two ranks) with the dump's columns, 202 MSTX rows in all (2 marks and
# 50 "step start" ranges per rank, the last never ended: 1 + 49 * 2 + 1 + 1),
# owner labels of the framework's blocks in Attr (PTA@weight, PTA@gradient,
# PTA@ops; the CANN owners are the NPU's), inefficient_type on some rows, and
# the dump check on every dump. Its owner and inefficient counts are checked
# upstream from torch 2.3 only (this machine has 1.13), its op/kernel/HAL
# counts are the NPU's.
@pytest.fixture(scope="module")
def multirank(tmp_path_factory):
    pytest.importorskip("torch.distributed")
    d = tmp_path_factory.mktemp("multirank_cmd")
    script = SOURCE / "tests" / "programs" / "python" / "upstream_smoke" / "multirank_cmd.py"
    cli(d, ["--device=cpu", "--output=out", "--log-level=info", "--analysis=decompose,inefficient",
            "--level=0,1", "--events=alloc,free,launch,access", "--",
            PY, "-m", "torch.distributed.run", "--nproc_per_node=2", "--standalone", "--redirects=1",
            "--tee=1", script], [], timeout=600)
    dirs = process_dirs(d / "out")
    assert len(dirs) == 3 and sum("_rank" in p.name for p in dirs) == 2, dirs
    dumps = []
    for p in dirs:
        files = dump_files(p)
        assert len(files) == 1, files
        dumps.append(files[0])
    return dumps


@pytest.mark.parametrize("i", [0, 1, 2], ids=["torchrun", "rank0", "rank1"])
def test_multirank_cmd_dump_check(multirank, i):
    check_dump(multirank[i])  # upstream's dump_csv_check, one dump per test (about 40 s each here)


def test_multirank_decompose_inefficient_cmd(multirank):
    mstx, owners, inefficient = 0, Counter(), 0
    for dump in multirank:
        with open(dump, newline="") as f:
            r = csv.reader(f)
            assert next(r) == DUMP_HEADER
            for rec in r:
                if rec[1] == "MSTX":
                    mstx += 1
                attr = rec[9]
                if "owner:PTA@" in attr:
                    for o in ("PTA@weight", "PTA@gradient", "PTA@ops"):
                        owners[o] += ("owner:" + o) in attr
                inefficient += "inefficient_type" in attr
    assert mstx == 202
    assert all(owners[o] > 0 for o in ("PTA@weight", "PTA@gradient", "PTA@ops")), owners
    assert inefficient > 0
