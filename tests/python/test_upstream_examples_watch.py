"""Upstream's watch example (example/watch/README.md, test_watch.py) in its
Python API form (test_watch.sh), adapted to the CPU
(tests/python/upstream_examples/watch_train.py api): with full-content, the
watched tensor's data is written whole to .bin files under
device_{id}/watch_dump/ of the process folder ("全量落盘模式会将每个Tensor对应的
二进制文件进行落盘"), around the operator that ran while it was watched."""
import pytest

from upstream_examples_util import api, only_process

pytest.importorskip("torch")

WATCHED = 100 * 100 * 4  # bytes of the watched float tensor


def watch_files(procdir):
    d = procdir / "device_cpu" / "watch_dump"
    assert d.is_dir(), sorted(p.name for p in procdir.rglob("*"))
    return sorted(d.iterdir())


def test_watch_python_api(tmp_path):
    p = api(tmp_path, "watch_train.py", "api")
    assert "Test finished." in p.stdout.splitlines()
    procdir = only_process(tmp_path / "memscopeDumpResults")  # no output= given: upstream's default folder
    files = watch_files(procdir)
    mine = [f for f in files if "leaksStWatch" in f.name]
    assert mine and all(f.suffix == ".bin" for f in mine), [f.name for f in files]
    # the loss operator ran once per epoch while the tensor was watched: its
    # before and after dumps, each the tensor's whole data
    loss = [f for f in mine if "mse_loss" in f.name]
    assert len([f for f in loss if "before" in f.name]) == 5, [f.name for f in mine]
    assert len([f for f in loss if "after" in f.name]) == 5, [f.name for f in mine]
    assert all(f.stat().st_size == WATCHED for f in mine)
    # nobody wrote into it: before and after of each call hold the same bytes
    for b in [f for f in loss if "before" in f.name]:
        a = b.with_name(b.name.replace("before", "after"))
        assert a.exists() and a.read_bytes() == b.read_bytes(), b.name
