"""Upstream's best practices (docs/zh/best_practices/msmemscope_basic_cases.md),
adapted to the CPU (tests/python/upstream_examples/bp_*.py):

- §4 memory decomposition: "落盘的 memscope_dump_{timestamp}.csv 文件中会包含 owner
  字段 ... 输出中 owner 字段分别显示 model_init 和 forward_pass";
- §5 inefficient memory under `msmemscope --events=alloc,free,access,launch
  --analysis=inefficient --level=op`: early_tensor is reported as an early
  allocation, used_tensor as a late deallocation, in the output file."""
import pytest

from upstream_examples_util import PY, api, cli, only_process, rows_of, upstream_layout

pytest.importorskip("torch")


def test_bp4_decompose_owners(tmp_path):
    p = api(tmp_path, "bp_decompose.py")
    assert "Test finished." in p.stdout.splitlines()
    rows = upstream_layout(only_process(tmp_path / "output"))
    by_size = {}
    for r in rows_of(rows, "MALLOC", "PTA"):
        by_size.setdefault(int(r["attr"]["size"]), set()).add(r["attr"].get("owner"))
    # the 4096x4096 weight made in init_model (decorated model_init, called in forward_pass)
    weight = by_size.get(4096 * 4096 * 4)
    assert weight and all(o and "model_init" in o for o in weight), by_size
    # the input and the output, made in the forward_pass block itself
    for size in (64 * 4096 * 4,):
        assert by_size.get(size) and all(o and "forward_pass" in o for o in by_size[size]), by_size


def test_bp5_inefficient_command_line(tmp_path):
    p = cli(tmp_path, ["--device=cpu", "--events=alloc,free,access,launch", "--analysis=inefficient", "--level=op",
                       "--output=out"], [PY, "bp_inefficient.py"])
    assert "Test finished." in p.stdout.splitlines()
    rows = upstream_layout(only_process(tmp_path / "out"))
    kinds = {}
    for r in rows_of(rows, "MALLOC", "PTA"):
        if "inefficient_type" in r["attr"]:
            kinds.setdefault(int(r["attr"]["size"]), set()).update(r["attr"]["inefficient_type"].split(","))
    assert "early_allocation" in kinds.get(1024 * 1024 * 4, set()), kinds  # early_tensor
    assert "late_deallocation" in kinds.get(2048 * 2048 * 4, set()), kinds  # used_tensor


def test_bp3_watch_spelling_is_refused_as_upstream_refuses_it(tmp_path):
    # §3's command line spells the start operator "start:op0": upstream's own
    # parser (csrc/framework/client_parser.cpp, [start[:outid]]) takes "op0" as
    # the output number and refuses it; so does ours, clearly, before running
    p = cli(tmp_path, ["--device=cpu", "--watch=start:op0,end:op1,full-content"], [PY, "bp_watch.py"], rc=2)
    assert p.stderr.splitlines()[-1].startswith(
        "msmemscope: error: --watch: invalid value 'start:op0,end:op1,full-content': the output index must be a "
        "number"), p.stderr
    assert "Test finished." not in p.stdout
