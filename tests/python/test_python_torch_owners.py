"""Owners of PyTorch memory are right on address reuse and without an
optimizer (issue #27 item 2, DESIGN §9 "owner tags belong to a block and die
with it"): tests/programs/python/torch_owners.py (a small GPT-style model)
trained with AdamW and zero_grad(set_to_none=True), which lets a new gradient
land at a freed one's address, and ending with a backward() that no
optimizer step follows; or run for inference only under torch.no_grad(). The
script prints torch's own sums (each storage once); the decomposition's
PTA@weight and PTA@gradient must equal them within 1 %, at stop() (API) and
as the peak under the CLI (at the exit the interpreter has freed them)."""
import csv
import json
import os
import re
import subprocess

import pytest

from conftest import BUILD, DUMP_HEADER, SOURCE, dump_files, parse_attr, process_dirs

pytest.importorskip("torch")
PY = "/usr/bin/python3"
SCRIPT = SOURCE / "tests" / "programs" / "python" / "torch_owners.py"


def env(api):
    e = dict(os.environ)
    for k in ("LD_PRELOAD", "MSMEMSCOPE_SESSION", "MSMEMSCOPE_AGENT_OPTS"):
        e.pop(k, None)
    e["PYTHONPATH"] = str(BUILD / "python") if api else ""
    e["OWNERS_EVENTS"] = "alloc,free,launch,access"  # the tag rows in the dump too
    return e


def torch_sums(stdout):
    (line,) = [l for l in stdout.splitlines() if l.startswith("TORCH_SUMS ")]
    return json.loads(line.split(" ", 1)[1])


def owner_table(text):
    """decompose's console table: owner -> (live, peak, allocations)."""
    lines = text.splitlines()
    start = lines.index("decompose: memory by owner on device cpu:")
    table = {}
    for l in lines[start + 2:]:
        m = re.match(r"^  (\S+)\s+(-?\d+)\s+(-?\d+)\s+(\d+)$", l)
        if not m:
            break
        table[m.group(1)] = tuple(int(x) for x in m.group(2, 3, 4))
    return table


def pta_rows(d):
    out = []
    with open(dump_files(d)[0], newline="") as f:
        r = csv.reader(f)
        assert next(r) == DUMP_HEADER
        for rec in r:
            if rec[2] not in ("PTA", "UNKNOWN"):
                continue
            row = dict(zip(DUMP_HEADER, rec))
            row["attr"] = parse_attr(row["Attr"])
            out.append(row)
    return out


def near(got, want):
    return abs(got - want) <= 0.01 * want


def run_api(tmp_path, kind, when):
    p = subprocess.run([PY, str(SCRIPT), "out", "api", kind, when], cwd=str(tmp_path), env=env(True),
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, f"stdout:\n{p.stdout}\nstderr:\n{p.stderr}"
    (d,) = process_dirs(tmp_path / "out")
    return p, d


def final_owner_of_blocks(rows, ptrs):
    """The owner on the MALLOC row of the block live at each address at
    stop() (the shadow FREE rows after it close what the exit freed)."""
    live = {}
    for r in rows:
        if r["Event Type"] != "PTA":
            continue
        ptr = int(r["Ptr"], 16)
        if r["Event"] == "MALLOC":
            live[ptr] = r["attr"].get("owner")
        elif r["Event"] == "FREE" and r["attr"].get("shadow") != "true":
            live.pop(ptr, None)
    return {p: live.get(p) for p in ptrs}


@pytest.mark.parametrize("when", ["after", "before"])
def test_training_adamw_set_to_none(tmp_path, when):
    p, d = run_api(tmp_path, "train", when)
    sums = torch_sums(p.stdout)
    table = owner_table(p.stdout)
    print(f"torch: weights {sums['weight']} B, gradients {sums['gradient']} B; decompose: {table}")
    assert sums["gradient"] > 1_000_000 and sums["weight"] == sums["gradient"]
    assert near(table["PTA@gradient"][0], sums["gradient"]), (table, sums)
    assert near(table["PTA@weight"][0], sums["weight"]), (table, sums)
    rows = pta_rows(d)
    # the address reuse happened: some address carried a gradient in more than
    # one backward, and each new block there was tagged again
    grad_tags = {}
    for r in rows:
        if r["Event"] == "ACCESS" and r["attr"].get("owner") == "PTA@gradient":
            grad_tags[r["Ptr"]] = grad_tags.get(r["Ptr"], 0) + 1
    assert max(grad_tags.values()) >= 2, grad_tags
    # 6 backward() calls, 27 new gradients each (set_to_none), each tagged once
    assert sum(grad_tags.values()) == 6 * sums["params"], grad_tags
    # the MALLOC rows of the blocks live at the end carry the final owners
    assert set(final_owner_of_blocks(rows, sums["gradient_ptrs"]).values()) == {"PTA@gradient"}
    assert set(final_owner_of_blocks(rows, sums["weight_ptrs"]).values()) == {"PTA@weight"}


@pytest.mark.parametrize("when", ["after", "before"])
def test_inference_without_optimizer(tmp_path, when):
    p, d = run_api(tmp_path, "infer", when)
    sums = torch_sums(p.stdout)
    table = owner_table(p.stdout)
    print(f"torch: weights {sums['weight']} B; decompose: {table}")
    assert sums["gradient"] == 0 and sums["weight"] > 1_000_000
    assert near(table["PTA@weight"][0], sums["weight"]), (table, sums)
    assert "PTA@gradient" not in table
    # nothing of the weights is PTA@ops@aten (or untagged): what ops@aten
    # holds at stop() is the four small results kept, not the model
    assert table.get("PTA@ops@aten", (0,))[0] < sums["weight"] // 100, table
    assert table.get("PTA", (0,))[0] == 0, table
    rows = pta_rows(d)
    assert set(final_owner_of_blocks(rows, sums["weight_ptrs"]).values()) == {"PTA@weight"}


def run_cli(tmp_path, kind):
    cmd = [str(BUILD / "bin" / "msmemscope"), "--device=cpu", "--events=alloc,free,launch",
           "--analysis=decompose", "--output=out", "--", PY, str(SCRIPT), "out", "plain", kind]
    p = subprocess.run(cmd, cwd=str(tmp_path), env=env(False), capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, f"stdout:\n{p.stdout}\nstderr:\n{p.stderr}"
    return p


@pytest.mark.parametrize("kind", ["train", "infer"])
def test_cli_peaks(tmp_path, kind):
    # Under the CLI the table is made at the exit, after the interpreter has
    # freed the model: the owners' peaks are what torch held at once.
    p = run_cli(tmp_path, kind)
    sums = torch_sums(p.stdout)
    table = owner_table(p.stdout)
    print(f"torch: weights {sums['weight']} B, gradients {sums['gradient']} B; decompose: {table}")
    assert near(table["PTA@weight"][1], sums["weight"]), (table, sums)
    if kind == "train":
        assert near(table["PTA@gradient"][1], sums["gradient"]), (table, sums)
    else:
        assert "PTA@gradient" not in table
        # the weights never counted as operator memory: ops@aten's peak is
        # what one forward needs, less than the model
        assert table["PTA@ops@aten"][1] < sums["weight"], table
