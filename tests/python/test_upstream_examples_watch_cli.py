"""Upstream's watch example in its command-line form (example/watch/README.md:
`msmemscope python test_watch.py --watch=<mse_loss>,<mse_loss_backward>,full-content`,
our options after the program's name as upstream allows), adapted to the CPU:
the loss operator's output is watched until mse_loss_backward has run, and
with full-content each checkpoint is a .bin file of the tensor's data under
device_{id}/watch_dump/."""
import pytest

from upstream_examples_util import PY, cli, only_process
from test_upstream_examples_watch import watch_files

pytest.importorskip("torch")


def test_watch_command_line(tmp_path):
    p = cli(tmp_path, ["--device=cpu"], [
        PY, "watch_train.py",
        "--watch=torch._ops.aten.mse_loss.default,torch._ops.aten.mse_loss_backward.default,full-content"])
    assert "Test finished." in p.stdout.splitlines()
    procdir = only_process(tmp_path / "memscopeDumpResults")
    files = watch_files(procdir)
    loss_out = [f for f in files if "mse_loss" in f.name and "leaksStWatch" not in f.name]
    assert loss_out and all(f.suffix == ".bin" for f in loss_out), [f.name for f in files]
    # the loss is one float: each of its dumps holds 4 bytes, one at least per epoch
    assert all(f.stat().st_size == 4 for f in loss_out), [(f.name, f.stat().st_size) for f in loss_out]
    assert len(loss_out) >= 5
    assert "watch: " in p.stdout
