"""PyTorch DistributedDataParallel on the CPU (gloo), 2 ranks, under the CLI
with `--device=cpu --call-stack=python --analysis=leaks,decompose
--sinks=csv,html`, launched by torchrun and by torch.multiprocessing.spawn.

Every rank prints torch's own figures (bytes of its parameters, gradients,
optimizer state, and of a tensor it keeps on purpose from one step on:
(rank+1)*100000 bytes); the tool must say the same: decompose's owners,
one leak per rank at the line that made it (DDP's gradient buckets, which
its Reducer rebuilds once in the second forward and keeps, are its set-up,
not a leak of that step), a folder and summary.json per rank naming the
rank, --merge combining them and saying how the ranks differ. torchrun sets
RANK: the folder's name has it from the start. mp.spawn sets none: the rank
comes from torch.distributed once init_process_group has completed, after
the folder was made; the folder is renamed to carry it once every plugin is
done with it, so that its name, summary.json, the console, index.html,
--merge and the Python API's finish() all say the same folder.
"""
import csv
import json
import re
import shutil
import socket
import subprocess
import textwrap

import pytest

from conftest import clean_env, dump_files, parse_attr, process_dirs, run_cli

TRAIN = textwrap.dedent('''\
    import json, os
    import torch
    import torch.distributed as dist
    import torch.nn as nn
    from torch.nn.parallel import DistributedDataParallel as DDP

    KEEP = []


    def nbytes(ts):
        return sum(t.numel() * t.element_size() for t in ts)


    def train(rank):
        torch.manual_seed(0)
        model = nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 32), nn.ReLU(), nn.Linear(32, 8))
        ddp = DDP(model)
        opt = torch.optim.Adam(ddp.parameters(), lr=1e-3)
        x, y = torch.randn(16, 64), torch.randn(16, 8)
        for step in range(6):
            opt.zero_grad(set_to_none=False)
            loss = ((ddp(x) - y) ** 2).mean()
            loss.backward()
            opt.step()
            if step == 2:
                KEEP.append(torch.empty((rank + 1) * 25000, dtype=torch.float32))  # the leak
        params = list(model.parameters())
        print("TRUTH " + json.dumps({
            "rank": rank, "pid": os.getpid(), "params": nbytes(params),
            "grads": nbytes([p.grad for p in params]),
            "optim": nbytes([v for s in opt.state.values() for v in s.values() if torch.is_tensor(v)]),
            "leak": nbytes(KEEP)}), flush=True)
        dist.barrier()


    if __name__ == "__main__":
        dist.init_process_group("gloo")
        train(dist.get_rank())
        dist.destroy_process_group()
    ''')

SPAWN = textwrap.dedent('''\
    import sys
    import torch.distributed as dist
    import torch.multiprocessing as mp
    import train_ddp


    def worker(rank, port):
        dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
        train_ddp.train(rank)
        dist.destroy_process_group()


    if __name__ == "__main__":
        mp.spawn(worker, args=(int(sys.argv[1]),), nprocs=2, join=True)
    ''')

LEAK_LINE = next(i for i, line in enumerate(TRAIN.splitlines(), 1) if "# the leak" in line)
OPTIONS = ["--device=cpu", "--call-stack=python", "--analysis=leaks,decompose", "--sinks=csv,html"]


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def env():
    # Debian's python3 (with torch) first, whatever the caller's PATH prefers.
    return {"PATH": "/usr/bin:/bin", "LD_PRELOAD": "", "PYTHONPATH": "", "OMP_NUM_THREADS": "1"}


def truths(stdout):
    """pid -> torch's own figures of that rank."""
    out = {}
    for m in re.finditer(r"TRUTH (\{[^}]*\})", stdout):  # two ranks share a pipe: lines may run together
        t = json.loads(m.group(1))
        out[t["pid"]] = t
    return out


def console_block(stdout, folder):
    """The console's lines for one process folder (from its summary line to the next)."""
    lines = stdout.splitlines()
    at = next(i for i, line in enumerate(lines) if line == f"  output: out/{folder}")
    end = next((j for j in range(at, len(lines)) if lines[j].startswith("msmemscope: ")), len(lines))
    return lines[at - 1:end]


def _with_attr(row):
    row["attr"] = parse_attr(row["Attr"])
    return row


def owner_peaks(block):
    """decompose's table in a console block: owner -> peak bytes."""
    out = {}
    for line in block:
        m = re.match(r"^  (PTA\S*|HOST\S*)\s+(\d+)\s+(\d+)\s+(\d+)$", line)
        if m:
            out[m.group(1)] = int(m.group(3))
    return out


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    pytest.importorskip("torch.distributed")
    wd = tmp_path_factory.mktemp("ddp")
    (wd / "train_ddp.py").write_text(TRAIN)
    (wd / "train_spawn.py").write_text(SPAWN)
    out = {}
    # torchrun's static rendezvous on a free port; --redirects/--tee 1: torch
    # 1.13's default "0" is not a member of its Std enum under Python 3.11.
    torchrun = ["/usr/bin/python3", "-m", "torch.distributed.run", "--nproc_per_node=2", "--redirects=1",
                "--tee=1", "--master_addr=127.0.0.1", f"--master_port={free_port()}", "train_ddp.py"]
    spawn = ["/usr/bin/python3", "train_spawn.py", str(free_port())]
    for name, cmd in (("torchrun", torchrun), ("spawn", spawn)):
        d = wd / name
        d.mkdir()
        for f in ("train_ddp.py", "train_spawn.py"):
            shutil.copy(wd / f, d / f)
        p = run_cli(OPTIONS + ["--output=out", "--"] + cmd, d, env=env(), timeout=300)
        out[name] = (d, p)
    return out


def rank_folders(d, p):
    """(folder, summary, torch's truth) of each rank, by pid."""
    t = truths(p.stdout)
    assert len(t) == 2, p.stdout + p.stderr
    sums = {s["pid"]: (f, s) for f in process_dirs(d / "out")
            for s in [json.loads((f / "summary.json").read_text())]}
    return [(sums[pid][0], sums[pid][1], t[pid]) for pid in sorted(t)]


@pytest.mark.parametrize("launcher", ["torchrun", "spawn"])
def test_each_rank_is_profiled_and_ends_well(runs, launcher):
    d, p = runs[launcher]
    assert p.returncode == 0, p.stdout + p.stderr
    assert "dropped" not in p.stderr and "lost" not in p.stderr, p.stderr
    for folder, s, truth in rank_folders(d, p):
        assert s["ended"] == {"how": "exit", "code": 0, "text": "exited with code 0"}, s["ended"]
        assert s["complete"] is True and s["dropped"] == 0, s
        assert s["steps"] == 6, s["steps"]  # the six optimizer steps
        assert list(folder.glob("report_*.html")), sorted(x.name for x in folder.iterdir())
        assert f"msmemscope: pid {truth['pid']} (" in p.stdout and "exited with code 0" in p.stdout
        # Python-side collection in every rank: tensors with the rank's own
        # Python lines, and operator rows
        (dump,) = dump_files(folder)
        pta = user = ops = 0
        with open(dump, newline="") as f:
            for row in csv.DictReader(f):
                if row["Event"] == "MALLOC" and row["Event Type"] == "PTA":
                    pta += 1
                    user += "train_ddp.py(" in row["Call Stack(Python)"]
                elif row["Event Type"] == "ATEN_START":
                    ops += 1
        assert pta > 100 and user > pta // 2 and ops > 100, (folder.name, pta, user, ops)


def ranked_pids(p):
    """The console's process table: pid -> its rank column."""
    table = p.stdout[p.stdout.index("\n  pid     ppid    rank  "):]
    return {int(m.group(1)): m.group(2) for m in re.finditer(r"^  (\d+)\s+\S+\s+(\S+)\s", table, re.M)}


def folder_ts(folder):
    """The timestamp of a process's capture, as its files' names have it."""
    (log,) = (folder / "msmemscope_logs").glob("msmemscope_*.log")
    return log.stem[len("msmemscope_"):]


def renamed_line(pid, ts, rank):
    return (f"  folder: renamed from msmemscope_{pid}_{ts}_cpu at the end (rank {rank} from torch.distributed, "
            "known after the folder was made)")


@pytest.mark.parametrize("launcher", ["torchrun", "spawn"])
def test_ranks_are_named(runs, launcher):
    d, p = runs[launcher]
    folders = process_dirs(d / "out")
    # torchrun: the launcher and two ranks; mp.spawn: the program, two ranks
    # and multiprocessing's resource tracker
    assert len(folders) == (3 if launcher == "torchrun" else 4), [f.name for f in folders]
    table = ranked_pids(p)
    assert sorted(r for r in table.values() if r != "-") == ["0", "1"], table
    ranked = rank_folders(d, p)
    for folder, s, truth in ranked:
        pid, rank, ts = truth["pid"], truth["rank"], folder_ts(folder)
        assert s["rank"] == rank, (folder.name, s["rank"])
        assert table[pid] == str(rank), table
        # torchrun's RANK names the folder from the start; mp.spawn's rank,
        # from torch.distributed after the folder was made, renames it at
        # the end: the same name either way
        name = f"msmemscope_{pid}_{ts}_cpu_rank{rank}"
        assert folder.name == name and s["folder"] == name, (folder.name, s["folder"])
        assert not (d / "out" / f"msmemscope_{pid}_{ts}_cpu").exists()
        block = console_block(p.stdout, name)  # its summary says the folder by its name
        if launcher == "spawn":
            assert renamed_line(pid, ts, rank) in block, "\n".join(block)
        # the leak report's sites, the files listed: in the folder as it is named
        assert f"  files (in out/{name}):" in block, "\n".join(block)
    if launcher == "torchrun":
        assert "  folder: renamed from" not in p.stdout, p.stdout
    # the processes without a rank keep the name they were given
    others = [f for f in folders if f not in [r[0] for r in ranked]]
    for f in others:
        s = json.loads((f / "summary.json").read_text())
        assert s["rank"] is None and f.name == s["folder"] == f"msmemscope_{s['pid']}_{folder_ts(f)}_cpu", f.name
    # index.html links every process's report, by the folder's final name
    index = (d / "out" / "index.html").read_text()
    links = re.findall(r'href="([^"]+)"', index)
    assert len(links) == len(folders) and all((d / "out" / link).is_file() for link in links), links
    for folder, s, truth in ranked:
        (report,) = folder.glob("report_*.html")
        assert f'href="{folder.name}/{report.name}"' in index, index
    # torchrun's RANK and torch.distributed's agree: no warning
    assert "torch.distributed's rank" not in p.stderr, p.stderr


@pytest.mark.parametrize("launcher", ["torchrun", "spawn"])
def test_each_ranks_step_warnings_name_its_pid_and_rank(runs, launcher):
    # Both ranks leak from step 2 on: their lines on the one console read
    # alike but for the process named (mp.spawn's rank from torch.distributed,
    # known before the first step); each log keeps upstream's words.
    d, p = runs[launcher]
    warned = [l for l in p.stderr.splitlines() if "lasted for" in l]
    for folder, s, truth in rank_folders(d, p):
        named = f"[msmemscope] warning: [pid {truth['pid']}, rank {truth['rank']}] "
        mine = [l[len(named):] for l in warned if l.startswith(named)]
        assert mine and all(l.startswith("leaks: [device cpu][step ") for l in mine), p.stderr
        (log,) = (folder / "msmemscope_logs").glob("msmemscope_*.log")
        logged = [l.split("[warning] ", 1)[1] for l in log.read_text().splitlines() if "lasted for" in l]
        assert logged == mine, log.read_text()
    assert len(warned) == sum(1 for l in warned if re.match(r"\[msmemscope\] warning: \[pid \d+, rank [01]\] ", l)), \
        p.stderr


@pytest.mark.parametrize("launcher", ["torchrun", "spawn"])
def test_decompose_owners_are_torchs_figures(runs, launcher):
    d, p = runs[launcher]
    for folder, s, truth in rank_folders(d, p):
        peaks = owner_peaks(console_block(p.stdout, folder.name))
        assert peaks.get("PTA@weight") == truth["params"], peaks
        assert peaks.get("PTA@gradient") == truth["grads"], peaks
        assert peaks.get("PTA@optimizer_state") == truth["optim"], peaks
        # the rebuilt bucket: one (under DDP's 25 MiB cap) of every
        # gradient's bytes; the rebuild's few small index tensors beside it
        (dump,) = dump_files(folder)
        with open(dump, newline="") as f:
            sizes = sorted(int(r["attr"]["size"]) for r in map(_with_attr, csv.DictReader(f))
                           if r["Event"] == "MALLOC" and r["attr"].get("owner") == "PTA@ddp_buckets")
        assert sizes[-1] == truth["grads"] and sum(sizes[:-1]) < 256, sizes


@pytest.mark.parametrize("launcher", ["torchrun", "spawn"])
def test_each_rank_leaks_its_own_tensor_and_nothing_of_ddp(runs, launcher):
    d, p = runs[launcher]
    for folder, s, truth in rank_folders(d, p):
        block = console_block(p.stdout, folder.name)
        text = "\n".join(block)
        # upstream's report: the one block the rank kept, from step 4 (made
        # after the third optimizer step)
        direct = [line for line in block if line.startswith("Direct ")]
        assert len(direct) == 1 and re.fullmatch(
            rf"Direct Pytorch Caching memory pool leak of {truth['leak'] / 2**20:f} Mb\(s\) at 0x[0-9a-f]+ "
            r"in kernel_\d+ at step 4\.", direct[0]), direct
        assert f"====== SUMMARY: {truth['leak'] / 2**20:g} Mb(s) leaked in 1 allocation(s) ======" in block, text
        assert (f"    1 block(s), {truth['leak']} bytes (step 4): allocated by: operator "
                f"torch._ops.aten.empty.memory_format, called from {d}/train_ddp.py({LEAK_LINE}): train") in block, text
        # DDP's rebuilt bucket: said, not judged
        assert ("  Note: DDP's gradient buckets, rebuilt once after its first iteration (owner PTA@ddp_buckets), "
                f"are its set-up and not checked for leaks; on device cpu, 1 block(s) ({truth['grads']} bytes) "
                "were still live when step 6 (the last) ended.") in block, text
        leaks = [x for x in s["top_sites"] if x["kind"] == "leak"]
        assert [(x["bytes"], x["site"].rsplit(", called from ", 1)[1]) for x in leaks] == \
            [(truth["leak"], f"{d}/train_ddp.py({LEAK_LINE}): train")], leaks


@pytest.mark.parametrize("launcher", ["torchrun", "spawn"])
def test_merge_combines_the_ranks(runs, launcher):
    d, p = runs[launcher]
    ranks = rank_folders(d, p)
    n = len(process_dirs(d / "out"))
    m = run_cli(["--merge=out", "-o", "merged"], d, env=env(), timeout=120, check_rc=0)
    assert f"msmemscope: merged {n} processes (2 with a rank) from 1 folder(s)" in m.stdout, m.stdout
    with open(d / "merged" / "merge.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert [r["rank"] for r in rows] == ["0", "1"] + [""] * (n - 2), rows  # ranks first, then the others
    for (folder, s, truth), row in zip(ranks, rows):
        assert (int(row["pid"]), row["folder"]) == (truth["pid"], folder.name), row
        assert int(row["leaked_bytes"]) == s["leaks"]["bytes"], (row, s["leaks"])
        assert int(row["cpu/PTA peak_bytes"]) == s["pools"]["cpu/PTA"]["peak_bytes"], row
    with open(d / "merged" / "merge_imbalance.csv", newline="") as f:
        imb = {(r["metric"], r["pool"]): r for r in csv.DictReader(f)}
    # the ranks differ by the tensors they keep: rank 1's is 100000 bytes more
    # in their step leaks; their totals also hold what each still had at exit,
    # which a C++ thread of c10d's may leave or not (a 3072-byte block without
    # a Python stack in one rank now and then): the imbalance is the totals'
    step = [sum(t["bytes"] for t in s["top_sites"] if t["kind"] == "leak") for _, s, _ in ranks]
    assert step[1] - step[0] == ranks[1][2]["leak"] - ranks[0][2]["leak"] == 100000, (step, ranks)
    totals = [s["leaks"]["bytes"] for _, s, _ in ranks]
    assert int(imb[("leaks", "")]["max_minus_min_bytes"]) == max(totals) - min(totals), (imb, totals)
    assert imb[("leaks", "")]["max_at"] == "out rank 1", imb
    # its index.html links each process folder (or its report) where it is
    index = (d / "merged" / "index.html").read_text()
    links = re.findall(r'href="([^"]+)"', index)
    assert len(links) == n and all((d / "merged" / link).exists() for link in links), links
    for folder, s, truth in ranks:
        assert any(f"/{folder.name}/" in link or link.endswith(f"/{folder.name}") for link in links), links


KEEPS = textwrap.dedent('''\
    import os, sys
    import torch
    import torch.distributed as dist
    import torch.multiprocessing as mp

    KEEP = []


    def worker(rank, port):
        dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
        model = torch.nn.Linear(8, 8)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        for step in range(6):
            opt.zero_grad()
            model(torch.randn(4, 8)).sum().backward()
            opt.step()
            if step == 3:
                KEEP.extend(torch.empty(1000 + i) for i in range(3))  # three leaks
        os.write(1, f"KEPT {rank} {os.getpid()}\\n".encode())  # one write: the ranks share the pipe
        dist.barrier()
        dist.destroy_process_group()


    if __name__ == "__main__":
        mp.spawn(worker, args=(int(sys.argv[1]),), nprocs=2, join=True)
    ''')


def test_the_leak_reports_full_list_is_where_the_report_says(tmp_path):
    # the report names the full list's file by the folder's final name: a
    # path the leaks analyzer made from the folder's first one, given the
    # new name with the folder
    pytest.importorskip("torch.distributed")
    (tmp_path / "keeps.py").write_text(KEEPS)
    p = run_cli(["--device=cpu", "--plugin-option=leaks.max_lines=1", "--output=out", "--", "/usr/bin/python3",
                 "keeps.py", str(free_port())], tmp_path, env=env(), timeout=120, check_rc=0)
    kept = sorted((int(r), int(pid)) for r, pid in re.findall(r"KEPT (\d) (\d+)", p.stdout))
    assert [r for r, _ in kept] == [0, 1], p.stdout + p.stderr
    for rank, pid in kept:
        (folder,) = [f for f in process_dirs(tmp_path / "out") if f.name.startswith(f"msmemscope_{pid}_")]
        ts = folder_ts(folder)
        assert folder.name == f"msmemscope_{pid}_{ts}_cpu_rank{rank}", folder.name
        block = console_block(p.stdout, folder.name)
        assert renamed_line(pid, ts, rank) in block, "\n".join(block)
        direct = [line for line in block if line.startswith("Direct ")]
        assert len(direct) == 1, direct
        assert f"... 2 more in out/{folder.name}/leaks_{ts}.txt" in block, "\n".join(block)
        full = [line for line in (folder / f"leaks_{ts}.txt").read_text().splitlines() if line.startswith("Direct ")]
        assert len(full) == 3 and full[0] == direct[0], full


API_SPAWN = textwrap.dedent('''\
    import os, sys
    import torch
    import torch.distributed as dist
    import torch.multiprocessing as mp


    def worker(rank, port):
        import msmemscope
        msmemscope.config(device="cpu", analysis="leaks", output="out")
        msmemscope.start()
        dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
        keep = torch.ones(1000)
        dist.barrier()
        os.chdir("/")  # the folder finish() returns does not depend on the working folder
        if rank == 1:
            dist.barrier()  # after rank 0's: each host's report whole on the stdout they share
        folder = msmemscope.finish()
        os.write(1, f"FOLDER {rank} {os.getpid()} {folder}\\n".encode())  # one write: the ranks share the pipe
        if rank == 0:
            dist.barrier()
        dist.destroy_process_group()


    if __name__ == "__main__":
        mp.spawn(worker, args=(int(sys.argv[1]),), nprocs=2, join=True)
    ''')


def test_the_python_apis_finish_returns_the_folder_by_its_rank_name(tmp_path):
    # each mp.spawn rank starts its own session (no CLI): finish() returns
    # the folder as the host named it at the end, with the rank
    pytest.importorskip("torch.distributed")
    (tmp_path / "api_spawn.py").write_text(API_SPAWN)
    p = subprocess.run(["/usr/bin/python3", "api_spawn.py", str(free_port())], cwd=tmp_path,
                       env=clean_env(OMP_NUM_THREADS="1"), capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stdout + p.stderr
    got = sorted((int(r), int(pid), folder) for r, pid, folder in re.findall(r"^FOLDER (\d) (\d+) (\S+)$", p.stdout, re.M))
    assert [r for r, _, _ in got] == [0, 1], p.stdout + p.stderr
    assert len(process_dirs(tmp_path / "out")) == 2
    for rank, pid, folder in got:
        (f,) = [f for f in process_dirs(tmp_path / "out") if f.name.startswith(f"msmemscope_{pid}_")]
        ts = folder_ts(f)
        name = f"msmemscope_{pid}_{ts}_cpu_rank{rank}"
        assert folder == str(tmp_path / "out" / name), folder
        s = json.loads((tmp_path / "out" / name / "summary.json").read_text())
        assert (s["pid"], s["rank"], s["folder"]) == (pid, rank, name), s
        # the host's report (the session's own, on the program's stdout)
        assert f"  output: out/{name}\n{renamed_line(pid, ts, rank)}\n" in p.stdout, p.stdout


ALONE = textwrap.dedent('''\
    import os, sys
    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{sys.argv[1]}", rank=0, world_size=1)
    keep = torch.ones(1000)
    print("PID", os.getpid(), flush=True)
    dist.destroy_process_group()
    ''')


def test_a_world_of_one_has_no_rank(tmp_path):
    # one process is no set of ranks (upstream names none): no rank anywhere
    pytest.importorskip("torch.distributed")
    (tmp_path / "alone.py").write_text(ALONE)
    p = run_cli(["--device=cpu", "--output=out", "--", "/usr/bin/python3", "alone.py", str(free_port())],
                tmp_path, env=env(), timeout=120, check_rc=0)
    (folder,) = process_dirs(tmp_path / "out")
    assert json.loads((folder / "summary.json").read_text())["rank"] is None
    assert not folder.name.endswith(tuple(f"_rank{i}" for i in range(10))), folder.name


def test_the_environments_rank_wins_and_a_different_one_is_warned(tmp_path):
    # mp.spawn under a launcher that set LOCAL_RANK=7 (a second node's, say):
    # the environment's rank stays, torch.distributed's 0 and 1 are warned about
    pytest.importorskip("torch.distributed")
    for f, text in (("train_ddp.py", TRAIN), ("train_spawn.py", SPAWN)):
        (tmp_path / f).write_text(text)
    p = run_cli(["--device=cpu", "--output=out", "--", "/usr/bin/python3", "train_spawn.py", str(free_port())],
                tmp_path, env=dict(env(), LOCAL_RANK="7"), timeout=300, check_rc=0)
    for folder, s, truth in rank_folders(tmp_path, p):
        assert s["rank"] == 7 and folder.name.endswith("_rank7"), (folder.name, s["rank"])
        assert (f"msmemscope: warning: pid {truth['pid']}: its environment's rank 7 and torch.distributed's "
                f"rank {truth['rank']} differ; the environment's is kept\n") in p.stderr, p.stderr
    assert p.stderr.count("torch.distributed's rank") == 2, p.stderr


FORKS = textwrap.dedent('''\
    import os, sys
    import torch
    import torch.distributed as dist
    import torch.multiprocessing as mp


    def worker(rank, port):
        dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
        pid = os.fork()  # as a DataLoader worker is
        if pid == 0:
            os._exit(0)
        os.waitpid(pid, 0)
        print("FORKED", rank, os.getpid(), pid, flush=True)
        dist.barrier()
        dist.destroy_process_group()


    if __name__ == "__main__":
        mp.spawn(worker, args=(int(sys.argv[1]),), nprocs=2, join=True)
    ''')


def test_a_child_forked_after_init_has_its_parents_rank(tmp_path):
    # as an inherited RANK would give it
    pytest.importorskip("torch.distributed")
    (tmp_path / "forks.py").write_text(FORKS)
    p = run_cli(["--device=cpu", "--output=out", "--", "/usr/bin/python3", "forks.py", str(free_port())],
                tmp_path, env=env(), timeout=120, check_rc=0)
    forked = [tuple(map(int, m.groups())) for m in re.finditer(r"FORKED (\d) (\d+) (\d+)", p.stdout)]
    assert len(forked) == 2, p.stdout + p.stderr
    ranks = {s["pid"]: s["rank"] for f in process_dirs(tmp_path / "out")
             for s in [json.loads((f / "summary.json").read_text())]}
    for rank, parent, child in forked:
        assert (ranks[parent], ranks[child]) == (rank, rank), ranks
