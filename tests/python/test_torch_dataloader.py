"""A real training loop over a DataLoader with worker processes, under the
CLI as the README runs it, checked against torch's own figures and against
what the program did.

train.py: a small model, a Dataset that builds its tensors in __getitem__,
batches of 8 from 2 workers, an optimizer step per batch, and one
deliberate leak in the main process: a list that keeps one 12000-byte
tensor per step (LEAK_LINE). It prints torch's own figures (the kept
tensors' and each batch's storage bytes) as JSON. Ways of running it:

- fork workers, `bash run.sh` calling python3, --sinks=csv,html
  (the README's launcher-script form: the table and index.html);
- persistent workers over two epochs with torch's file_system sharing
  strategy (each storage 64 bytes into its mapping, torch_shm_manager);
- spawn workers (`multiprocessing_context="spawn"`: Python programs of
  their own);
- fork workers, the loop left after 2 steps while a worker is stuck in
  __getitem__: the DataLoader SIGTERMs it at its shutdown.

What must hold: each worker is profiled as README says (forked: its own
figures from the fork, `_exit after fork`, nothing judged at its end; spawn:
a program of its own, judged as any), the main process's leak report is the
deliberate leak alone, at its line and size, and names none of the
DataLoader's machinery (shared-memory batches, the queues and their feeder
threads, torch's shared-storage cache); each batch is one PTA block of its
storage's size in the worker that made it and in the main process, never
also host memory; the console, summary.json, the table, the HTML report and
index.html give the same figures; every run ends (nothing hangs).
"""
import csv
import html
import json
import re

import pytest

from conftest import DUMP_HEADER, dump_files, parse_attr, process_dirs, run_cli

pytest.importorskip("torch")
PY = "/usr/bin/python3"

SCRIPT = r'''
import json, os, sys
import torch

MODE, STRATEGY = sys.argv[1], sys.argv[2]
if STRATEGY == "file_system":
    torch.multiprocessing.set_sharing_strategy("file_system")
STEPS, BATCH, WIDTH = 5, 8, 256
LEAK = 3000  # floats: 12000 bytes a step


class Items(torch.utils.data.Dataset):
    def __len__(self):
        return STEPS * BATCH

    def __getitem__(self, i):
        if MODE == "stuck" and i >= 3 * BATCH and torch.utils.data.get_worker_info().id == 1:
            stuck.wait()  # never set: the DataLoader ends this worker at its shutdown
        return torch.full((WIDTH,), float(i)), torch.tensor(i % 4)


terminated = []


def main():
    torch.manual_seed(0)
    kw = dict(batch_size=BATCH, num_workers=2)
    if MODE == "persistent":
        kw["persistent_workers"] = True
    if MODE == "spawn":
        kw["multiprocessing_context"] = "spawn"
    loader = torch.utils.data.DataLoader(Items(), **kw)
    model = torch.nn.Sequential(torch.nn.Linear(WIDTH, 64), torch.nn.ReLU(), torch.nn.Linear(64, 4))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    kept, batches = [], []
    for epoch in range(2 if MODE == "persistent" else 1):
        for step, (x, y) in enumerate(loader):
            batches.append([x.storage().nbytes(), y.storage().nbytes()])
            loss = torch.nn.functional.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            kept.append(torch.ones(LEAK))  # LEAK_LINE
            if MODE == "stuck" and step == 1:
                break
    del x, y, loss
    print(json.dumps({"pid": os.getpid(), "kept": [t.storage().nbytes() for t in kept], "batches": batches,
                      "terminated": terminated}), flush=True)


if __name__ == "__main__":
    if MODE == "stuck":
        import multiprocessing.process
        import torch.utils.data._utils as utils
        stuck = torch.multiprocessing.get_context("fork").Event()
        utils.MP_STATUS_CHECK_INTERVAL = 0.2  # how long the shutdown waits for a worker before terminate()
        terminate = multiprocessing.process.BaseProcess.terminate

        def note_terminate(self):
            terminated.append(self.pid)
            terminate(self)

        multiprocessing.process.BaseProcess.terminate = note_terminate
    main()
'''

RUN_SH = '''#!/bin/bash
python3 train.py "$@"
'''

LEAK_BYTES = 12000
HEADER = 64  # torch's file_system strategy maps a storage with a header in front of its data
# Where the DataLoader's machinery allocates; none of it may be a leak of the main process.
MACHINERY = re.compile(r"multiprocessing|threading\.py|tempfile\.py|queue|torch/utils/data|_new_shared|rebuild_storage")


def leak_line():
    return 1 + [i for i, t in enumerate(SCRIPT.splitlines()) if "LEAK_LINE" in t][0]


def fmt(n):
    """The console's and the table's figure for a byte count."""
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= size:
            return f"{n / size:.1f} {unit}"
    return f"{n} B"


class Run:
    def __init__(self, tmp_path, args, mode, strategy="fd", launcher="python"):
        (tmp_path / "train.py").write_text(SCRIPT)
        (tmp_path / "run.sh").write_text(RUN_SH)
        program = ["bash", "run.sh"] if launcher == "bash" else ["--", PY, "train.py"]
        self.p = run_cli(["--device=cpu", "--call-stack=python", "--output=out"] + args + program + [mode, strategy],
                         tmp_path, env={"PYTHONPATH": "", "PATH": "/usr/bin:/bin"}, timeout=300, check_rc=0)
        lines = [l for l in self.p.stdout.splitlines() if l.startswith('{"pid"')]
        assert len(lines) == 1, self.p.stdout + self.p.stderr
        self.torch = json.loads(lines[0])
        self.out = tmp_path / "out"
        # (process folder, its summary.json) of each process image
        self.dirs = [(d, json.loads((d / "summary.json").read_text())) for d in process_dirs(self.out)]

    def main(self):
        (main,) = [(d, s) for d, s in self.dirs if s["pid"] == self.torch["pid"] and s["ended"]["how"] != "exec"]
        return main

    def children(self):
        return [(d, s) for d, s in self.dirs if s["ppid"] == self.torch["pid"]]

    def report(self, s):
        """The console's part about one process (its summary line to the next)."""
        out = self.p.stdout
        m = re.search(rf"^msmemscope: pid {s['pid']} \((.*)\) {re.escape(s['ended']['text'])}", out, re.M)
        assert m, (s["pid"], s["ended"], out)
        nxt = re.compile(r"^msmemscope: (pid \d+ |\d+ processes)", re.M).search(out, m.end())
        return out[m.start():nxt.start() if nxt else len(out)]

    def table(self):
        m = re.search(r"^msmemscope: (\d+) processes\n  pid +ppid +rank +ended +leaked +peak +command\n((?:  \d+ .*\n)+)",
                      self.p.stdout, re.M)
        assert m and int(m[1]) == len(self.dirs), self.p.stdout
        return m[2].splitlines()


def mapped_blocks(d):
    """[address, size, freed] of each mapped (shared-memory) PTA block of a
    process, and (address, size) of each of its HOST blocks."""
    blocks, host = {}, []
    with open(dump_files(d)[0], newline="") as f:
        r = csv.reader(f)
        assert next(r) == DUMP_HEADER
        for rec in r:
            ev, kind, ptr, attr = rec[1], rec[2], rec[8], rec[9]
            if kind == "HOST" and ev == "MALLOC":
                host.append((int(ptr, 16), int(parse_attr(attr)["size"])))
            if kind != "PTA" or ev not in ("MALLOC", "FREE"):
                continue
            a = parse_attr(attr)
            if ev == "MALLOC" and a.get("mapped") == "shared":
                assert a["owner"] == "PTA@shared_memory", a
                blocks[a["allocation_id"]] = [int(ptr, 16), int(a["size"]), False]
            elif ev == "FREE" and a.get("allocation_id") in blocks:
                blocks[a["allocation_id"]][2] = True
    return list(blocks.values()), host


def check_main(run, steps, strategy, all_batches_handed=True):
    """The main process: the deliberate leak alone, at its line and size."""
    d, s = run.main()
    out = run.report(s)
    kept = run.torch["kept"]
    assert kept == [LEAK_BYTES] * steps, kept  # torch's own bytes
    judged = steps - 2  # steps 0 and 1 are warm-up, the last one's tensor has no next step end
    direct = re.findall(r"^Direct Pytorch Caching memory pool leak of ([\d.]+) Mb\(s\) at 0x[0-9a-f]+ in kernel_\d+ "
                        r"at step (\d+)\.$", out, re.M)
    assert direct == [(f"{LEAK_BYTES / 2 ** 20:.6f}", str(st)) for st in range(2, 2 + judged)], out
    sites = re.findall(r"^    (\d+) block\(s\), (\d+) bytes \(steps? [\d-]+\): allocated by: (.*)$", out, re.M)
    if judged:
        assert re.search(rf"^====== SUMMARY: [\d.]+ Mb\(s\) leaked in {judged} allocation\(s\) ======$", out, re.M)
        assert sites == [(str(judged), str(judged * LEAK_BYTES), "operator torch._ops.aten.ones.default, called from "
                          f"{run.out.parent / 'train.py'}({leak_line()}): main")], out
    else:
        assert "Detected memory leaks" not in out and not sites, out
    # host memory still allocated at exit: torch's own first-use blocks (its
    # generator, autograd's), none of the DataLoader's machinery
    host = re.search(r"^  Host memory still allocated at exit on device cpu: (\d+) block\(s\), (\d+) bytes, .*\n"
                     r"((?:    \d+ block\(s\).*\n)*)", out, re.M)
    host_blocks, host_bytes = (int(host[1]), int(host[2])) if host else (0, 0)
    assert host_bytes < 1024, out
    assert not (host and MACHINERY.search(host[3])), out
    assert s["leaks"]["bytes"] == judged * LEAK_BYTES + host_bytes, (s["leaks"], out)
    assert s["leaks"]["allocations"] == judged + host_blocks, (s["leaks"], out)
    assert s["steps"] == steps, s
    # the console's figures are the summary's
    for pool, v in s["pools"].items():
        assert f"  {pool}: peak {fmt(v['peak_bytes'])}, final {fmt(v['final_bytes'])}" in out, (pool, v, out)
    assert s["pools"]["cpu/PTA"]["final_bytes"] == 0, s["pools"]
    # each batch the loop was handed: one shared-memory block of each storage's size, unmapped once done with
    blocks, host_rows = mapped_blocks(d)
    header = HEADER if strategy == "file_system" else 0
    want = sorted(b + header for batch in run.torch["batches"] for b in batch)
    if all_batches_handed:
        assert sorted(size for _, size, _ in blocks) == want, (blocks, run.torch["batches"])
    assert all(freed for _, _, freed in blocks), blocks
    # each byte once: no host row inside a batch's mapping
    assert not [h for h in host_rows for p, size, _ in blocks if p <= h[0] < p + size], blocks
    return d, s


def check_forked_workers(run, want_batches, strategy):
    """DataLoader workers forked from the program: figures from the fork,
    ended by _exit, nothing judged at their end, each batch once."""
    workers = [(d, s) for d, s in run.children() if "(_exit after fork)" in s["ended"]["text"]]
    assert len(workers) == 2, [s["ended"] for _, s in run.children()]
    main_host = run.main()[1]["pools"]["cpu/HOST"]["peak_bytes"]
    made = []
    for d, s in workers:
        assert s["ended"]["text"] == "exited with code 0 (_exit after fork)", s["ended"]
        assert s["command"] == run.main()[1]["command"], s
        assert s["leaks"]["bytes"] == 0 and s["leaks"]["exit_judged"] is False, s["leaks"]
        out = run.report(s)
        assert "Detected memory leaks" not in out and "still allocated at exit" not in out, out
        assert "leaks: not judged at its end: what it held at its _exit (cpu/HOST " in out, out
        # its own figures, not the ~60 MiB heap it shares with the program
        assert s["pools"]["cpu/HOST"]["peak_bytes"] < main_host // 100, s["pools"]
        for pool, v in s["pools"].items():
            assert f"  {pool}: peak {fmt(v['peak_bytes'])}, final {fmt(v['final_bytes'])}" in out, (pool, out)
        blocks, host_rows = mapped_blocks(d)
        assert all(freed for _, _, freed in blocks), blocks  # freed once sent
        assert not [h for h in host_rows for p, size, _ in blocks if p <= h[0] < p + size], blocks
        made += [size for _, size, _ in blocks]
    header = HEADER if strategy == "file_system" else 0
    assert sorted(made) == sorted(b + header for batch in want_batches for b in batch), made
    return workers


def ended(s):
    """How a process ended, in the table's and index.html's words."""
    return s["ended"]["text"].replace(" (continued in the next capture of this pid)", "")


def check_table(run):
    """The table: one row per process, its summary's figures."""
    rows = run.table()
    assert len(rows) == len(run.dirs)
    for _, s in run.dirs:
        peaks = "; ".join(f"{pool} {fmt(v['peak_bytes'])}" for pool, v in s["pools"].items()) or "-"
        if s["leaks"] is None or not s["leaks"]["exit_judged"] and s["ended"]["how"] == "exec":
            leaked = "-"
        else:
            leaked = fmt(s["leaks"]["bytes"]) + ("" if s["leaks"]["exit_judged"] else " (steps)")
            if "shell_heap_at_exit" in s["leaks"]:  # a launcher shell's own heap, left out (run_index.cpp)
                leaked += " (shell)"
        row = [r for r in rows if re.match(rf"  {s['pid']} +{s['ppid']} +- +{re.escape(ended(s))} +"
                                           rf"{re.escape(leaked)} +{re.escape(peaks)} +", r)]
        assert len(row) == 1, (s["pid"], s["ended"], s["pools"], s["leaks"], leaked, peaks, rows)


def test_fork_workers_under_a_launcher_script(tmp_path):
    run = Run(tmp_path, ["--sinks=csv,html"], "fork", launcher="bash")
    _, s = check_main(run, 5, "fd")
    check_forked_workers(run, run.torch["batches"], "fd")
    check_table(run)
    # bash, its child before the exec, the program, its two workers
    assert len(run.dirs) == 5, list(run.dirs)
    # index.html: every process's row and report; the main one's report says what the console says
    index = (run.out / "index.html").read_text()
    for d, t in run.dirs:
        (page,) = d.glob("report_*.html")
        peaks = "; ".join(f"{pool} {fmt(v['peak_bytes'])}" for pool, v in t["pools"].items()) or "-"
        row = (rf'<tr><td class="n">{t["pid"]}</td><td class="n">{t["ppid"]}</td><td>-</td>'
               rf'<td>{re.escape(html.escape(t["command"], quote=False))}</td><td>{re.escape(ended(t))}</td>'
               rf'<td>{re.escape(peaks)}</td><td class="n">[^<]*</td><td><a href="{d.name}/{page.name}">')
        assert len(re.findall(row, index)) == 1, (row, index)
    d, _ = run.main()
    data = json.loads(next(d.glob("report_*.html")).read_text().split('id="msms-data">')[1].split("</script>")[0])
    assert data["leak_total"] == [s["leaks"]["allocations"], s["leaks"]["bytes"]], data["leak_total"]


def test_persistent_workers_file_system_strategy(tmp_path):
    # two epochs over the same workers; every storage 64 bytes into its mapping
    run = Run(tmp_path, [], "persistent", "file_system")
    check_main(run, 10, "file_system")
    check_forked_workers(run, run.torch["batches"], "file_system")
    # torch's shared-memory manager, one per worker that shared a storage: exec'ed, ended with them
    managers = [s for _, s in run.dirs if s["command"].endswith("torch_shm_manager")]
    assert managers and all(s["ended"]["text"] == "exited with code 0" for s in managers), [s for _, s in run.dirs]
    check_table(run)


def test_spawn_workers(tmp_path):
    run = Run(tmp_path, [], "spawn")
    check_main(run, 5, "fd")
    kids = run.children()
    workers = [(d, s) for d, s in kids if "multiprocessing.spawn import spawn_main" in s["command"]]
    tracker = [s for _, s in kids if "multiprocessing.resource_tracker" in s["command"]]
    assert len(workers) == 2 and len(tracker) == 1 and len(kids) == 3, [s["command"] for _, s in kids]
    made = []
    for d, s in workers:
        # a program of its own (it imports torch again): ended by exit, judged as any program
        assert s["ended"]["text"] == "exited with code 0" and s["leaks"]["exit_judged"] is True, s
        out = run.report(s)
        assert "Detected memory leaks" not in out, out
        # torch's shared-storage cache is emptied at its exit too
        assert "_new_shared" not in out and "rebuild_storage" not in out, out
        blocks, _ = mapped_blocks(d)
        assert all(freed for _, _, freed in blocks), blocks
        made += [size for _, size, _ in blocks]
    assert sorted(made) == sorted(b for batch in run.torch["batches"] for b in batch), made
    check_table(run)


def test_a_worker_the_dataloader_terminates(tmp_path):
    # the loop leaves after 2 steps while worker 1 is stuck making batch 3
    run = Run(tmp_path, [], "stuck")
    check_main(run, 2, "fd", all_batches_handed=False)
    kids = run.children()
    assert len(kids) == 2, [s["ended"] for _, s in kids]
    # the DataLoader's shutdown sent it SIGTERM; torch's handler ends a worker
    # its parent signals with _exit(0), and that is what its row says
    assert len(run.torch["terminated"]) == 1 and run.torch["terminated"][0] in [s["pid"] for _, s in kids], run.torch
    for _, s in kids:
        assert s["ended"]["text"] == "exited with code 0 (_exit after fork)", s["ended"]
        assert s["leaks"]["exit_judged"] is False and s["leaks"]["bytes"] == 0, s["leaks"]
    check_table(run)


TAG_SCRIPT = r'''
import json, os, sys
import torch, msmemscope
if sys.argv[1] == "file_system":
    torch.multiprocessing.set_sharing_strategy("file_system")


class Items(torch.utils.data.Dataset):
    def __len__(self):
        return 8

    def __getitem__(self, i):
        return torch.full((1000,), float(i))


if __name__ == "__main__":
    kept = []
    for b in torch.utils.data.DataLoader(Items(), batch_size=4, num_workers=1):
        msmemscope.describe.describer(b, owner="batch")
        kept.append(b)
    print(json.dumps({"pid": os.getpid(), "bytes": [t.storage().nbytes() for t in kept]}), flush=True)
'''


@pytest.mark.parametrize("strategy", ["fd", "file_system"])
def test_describer_tags_a_received_batch(tmp_path, strategy):
    # A describer tag names the storage's address; with file_system sharing
    # that is 64 bytes into the mapping (the block), and the tag was ignored:
    # the batches stayed PTA@shared_memory in the decompose table and rows.
    (tmp_path / "tag.py").write_text(TAG_SCRIPT)
    p = run_cli(["--device=cpu", "--analysis=decompose", "--output=out", "--", PY, "tag.py", strategy], tmp_path,
                env={"PYTHONPATH": "", "PATH": "/usr/bin:/bin"}, timeout=300, check_rc=0)
    (line,) = [l for l in p.stdout.splitlines() if l.startswith('{"pid"')]
    torch_figures = json.loads(line)
    mapping = sum(torch_figures["bytes"]) + 2 * (HEADER if strategy == "file_system" else 0)
    (main,) = [d for d in process_dirs(tmp_path / "out")
               if json.loads((d / "summary.json").read_text())["pid"] == torch_figures["pid"]]
    owners = [a["owner"] for a in (parse_attr(r[9]) for r in csv.reader(open(dump_files(main)[0], newline="")))
              if a.get("mapped") == "shared"]
    assert owners == ["PTA@batch", "PTA@batch"], owners
    main_part = p.stdout[p.stdout.index(f"msmemscope: pid {torch_figures['pid']} "):]
    assert re.search(rf"^  PTA@batch +0 +{mapping} +2$", main_part, re.M), main_part  # (unmapped at the exit)
    assert "PTA@shared_memory" not in main_part.split("\nmsmemscope: pid ")[0], main_part
