"""Upstream's best practices §3 (memory block watch), adapted to the CPU
(tests/python/upstream_examples/bp_watch.py) with the nearest spelling that
upstream's parser accepts (start operator op0, end operator op1; §3's own
"start:op0" is refused, see test_upstream_examples_bestpractice.py):
watcher.watch(test_tensor, dump_nums=3) writes at most three dumps of the
tensor, each its whole data with full-content, under device_{id}/watch_dump/."""
import pytest

from upstream_examples_util import PY, cli, only_process
from test_upstream_examples_watch import watch_files

pytest.importorskip("torch")


def test_bp3_watch_dump_nums(tmp_path):
    p = cli(tmp_path, ["--device=cpu", "--watch=op0,op1,full-content"], [PY, "bp_watch.py"])
    assert "Test finished." in p.stdout.splitlines()
    files = [f for f in watch_files(only_process(tmp_path / "memscopeDumpResults")) if "test_tensor" in f.name]
    assert 1 <= len(files) <= 3, [f.name for f in files]
    assert all(f.suffix == ".bin" and f.stat().st_size == 256 * 256 * 4 for f in files)
