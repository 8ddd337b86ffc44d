"""Ranks across machines (issue #28 item 9): every process folder carries
summary.json (pid, rank, how it ended, peak per pool, leaks, steps, top
sites), and `msmemscope --merge=<folder>[,<folder>...]` combines the runs of
several nodes into one cross-rank table: merge.csv, merge_imbalance.csv,
merge.db (SQLite, readable with ATTACH) and index.html, printed on the
console too. Two "nodes" here are two torchrun runs of 2 ranks each, written
into two output folders.
"""
import csv
import json
import os
import re
import shutil
import socket
import sqlite3

import pytest

from conftest import SOURCE, process_dirs, run_cli

DDP = SOURCE / "tests" / "programs" / "python" / "launch" / "ddp.py"


def env():
    # Debian's python3 (with torch) first, whatever the caller's PATH prefers.
    return {"PATH": "/usr/bin:/bin", "LD_PRELOAD": "", "PYTHONPATH": ""}


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def human(n):
    """framework/host/session.cpp's human(): what the console prints."""
    units = ["B", "KiB", "MiB", "GiB", "TiB"]
    v, u = float(n), 0
    while abs(v) >= 1024 and u < 4:
        v /= 1024
        u += 1
    return f"{n} B" if u == 0 else f"{v:.1f} {units[u]}"


def console_blocks(stdout):
    """Process folder name -> {pool: (peak text, final text)} from the
    per-process summary lines of a run's console."""
    out, current = {}, None
    for line in stdout.splitlines():
        m = re.match(r"^  output: (.+)$", line)
        if m:
            current = os.path.basename(m.group(1))
            out[current] = {}
            continue
        m = re.match(r"^  (\S+/\S+): peak (.+), final (.+)$", line)
        if m and current:
            out[current][m.group(1)] = (m.group(2), m.group(3))
    return out


def read_csv(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


@pytest.fixture(scope="module")
def nodes(tmp_path_factory):
    """Two nodes' runs: <tmp>/nodeA and <tmp>/nodeB, 2 ranks each."""
    pytest.importorskip("torch.distributed")
    wd = tmp_path_factory.mktemp("merge")
    shutil.copy(DDP, wd / "ddp.py")
    consoles = {}
    for node in ("nodeA", "nodeB"):
        # torchrun's static rendezvous on a free port (--standalone's fixed
        # port may be taken by another run); --redirects/--tee 1: torch 1.13's
        # default "0" is not a member of its Std enum under Python 3.11.
        cmd = (f"python3 -m torch.distributed.run --nnodes=1 --nproc_per_node=2 --master_addr=127.0.0.1 "
               f"--master_port={free_port()} --redirects=1 --tee=1 ddp.py")
        p = run_cli(["--device=cpu", "--events=alloc,free,launch", "--analysis=leaks", "-o", node, "--",
                     "bash", "-c", cmd], wd, env=env(), timeout=600, check_rc=0)
        assert "rank 0 done" in p.stdout and "rank 1 done" in p.stdout, p.stdout + p.stderr
        consoles[node] = p.stdout
    return wd, consoles


def summaries(folder):
    return {d.name: json.loads((d / "summary.json").read_text()) for d in process_dirs(folder)}


def test_each_process_folder_has_a_summary(nodes):
    wd, consoles = nodes
    for node in ("nodeA", "nodeB"):
        sums = summaries(wd / node)
        shown = console_blocks(consoles[node])
        assert set(sums) == set(shown), (sorted(sums), sorted(shown))
        ranks = {s["rank"]: (name, s) for name, s in sums.items() if s["rank"] is not None}
        assert sorted(ranks) == [0, 1], sorted(sums)
        for name, s in sums.items():
            assert s["format"] == "msmemscope-process-summary" and s["format_version"] == 1
            assert s["folder"] == name and name.startswith(f"msmemscope_{s['pid']}_")
            # the peaks and finals the console printed for this process
            assert {pool: (human(v["peak_bytes"]), human(v["final_bytes"])) for pool, v in s["pools"].items()} \
                == shown[name], (name, s["pools"], shown[name])
            assert s["complete"] is True and s["dropped"] == 0 and s["events"] > 0
            assert s["leaks"] is not None  # --analysis=leaks ran
        for rank, (name, s) in ranks.items():
            assert name.endswith(f"_rank{rank}"), name
            assert s["command"] == "/usr/bin/python3 -u ddp.py", s["command"]
            assert s["ended"]["how"] == "exit" and s["ended"]["code"] == 0, s["ended"]
            assert s["steps"] == 5, s["steps"]  # ddp.py's five optimizer steps
            assert s["pools"]["cpu/PTA"]["peak_bytes"] > 0 and s["pools"]["cpu/HOST"]["peak_bytes"] > 0
            # leaks: the leak report's exact bytes (its step leaks by site,
            # the host blocks live at exit), largest sites first
            block = consoles[node].split(f"  output: {node}/{name}\n", 1)[1]
            block = block.split("\nmsmemscope: ", 1)[0]
            live = [int(b) for b in re.findall(r"Host memory still allocated at exit on device cpu: \d+ block\(s\), "
                                               r"(\d+) bytes", block)]
            step = [int(b) for b in re.findall(r"Leaked blocks on device cpu by site, largest first: \d+ block\(s\), "
                                               r"(\d+) bytes", block)]
            assert live, block
            assert s["leaks"]["bytes"] == sum(live) + sum(step), (s["leaks"], live, step)
            sizes = [t["bytes"] for t in s["top_sites"]]
            assert sizes and sizes == sorted(sizes, reverse=True) and len(sizes) <= 10, s["top_sites"]
            assert s["ppid"] and s["ppid"] != s["pid"]
        # the shell exec'ed the launcher: its first image ended by exec
        launcher = [s for s in sums.values() if s["rank"] is None]
        assert sorted(s["ended"]["how"] for s in launcher) == ["exec", "exit"], [s["ended"] for s in launcher]


def test_merge_two_nodes(nodes):
    wd, _ = nodes
    p = run_cli(["--merge=nodeA,nodeB", "-o", "merged"], wd, check_rc=0)
    out = wd / "merged"
    sums = {}
    for node in ("nodeA", "nodeB"):
        for name, s in summaries(wd / node).items():
            sums[(node, s["pid"], name)] = s

    # merge.csv: one row per process, the ranks first
    rows = read_csv(out / "merge.csv")
    assert len(rows) == len(sums), rows
    ranked = [r for r in rows if r["rank"] != ""]
    assert sorted((r["node"], int(r["rank"])) for r in ranked) == \
        [("nodeA", 0), ("nodeA", 1), ("nodeB", 0), ("nodeB", 1)], ranked
    assert rows[:4] == ranked
    pools = sorted({pool for s in sums.values() for pool in s["pools"]})
    for r in rows:
        s = sums[(r["node"], int(r["pid"]), r["folder"])]
        for pool in pools:
            want = s["pools"].get(pool)
            assert r[f"{pool} peak_bytes"] == (str(want["peak_bytes"]) if want else ""), (r, pool)
            assert r[f"{pool} final_bytes"] == (str(want["final_bytes"]) if want else ""), (r, pool)
        assert r["leaked_bytes"] == str(s["leaks"]["bytes"])
        assert r["leaked_allocations"] == str(s["leaks"]["allocations"])
        assert r["steps"] == str(s["steps"]) and r["ended"] == s["ended"]["text"]
        assert r["command"] == s["command"] and r["hostname"] == s["hostname"]

    # the imbalance between the four ranks, per pool and for leaks
    imb = {(r["metric"], r["pool"]): r for r in read_csv(out / "merge_imbalance.csv")}
    rank_sums = [s for s in sums.values() if s["rank"] is not None]
    assert len(rank_sums) == 4
    expected = {("peak", pool): [s["pools"].get(pool, {"peak_bytes": 0})["peak_bytes"] for s in rank_sums]
                for pool in pools if any(pool in s["pools"] for s in rank_sums)}
    expected[("leaks", "")] = [s["leaks"]["bytes"] for s in rank_sums]
    assert set(imb) == set(expected), imb
    # "nodeA rank 0" -> that rank's values
    who = {}
    for k, s in sums.items():
        if s["rank"] is not None:
            who[f"{k[0]} rank {s['rank']}"] = {key: vals[rank_sums.index(s)] for key, vals in expected.items()}
    for key, values in expected.items():
        r = imb[key]
        lo, hi = min(values), max(values)
        assert (int(r["ranks"]), int(r["min_bytes"]), int(r["max_bytes"]), int(r["max_minus_min_bytes"])) == \
            (4, lo, hi, hi - lo), (key, r, values)
        assert r["max_over_min"] == (f"{hi / lo:.6f}" if lo else ""), (key, r)
        assert who[r["min_at"]][key] == lo and who[r["max_at"]][key] == hi, (key, r)
        # and on the console
        what = f"{key[1]} peak" if key[0] == "peak" else "leaked"
        assert f"    {what}: min {human(lo)} ({r['min_at']}), max {human(hi)} ({r['max_at']}), " \
               f"max-min {human(hi - lo)} ({hi - lo} bytes)" in p.stdout, p.stdout

    # the console table: a line per rank with its peaks
    for r in ranked:
        s = sums[(r["node"], int(r["pid"]), r["folder"])]
        peaks = "; ".join(f"{pool} {human(v['peak_bytes'])}" for pool, v in sorted(s["pools"].items()))
        assert re.search(rf"^  {r['node']}\s+{r['rank']}\s+{r['pid']}\s+exit 0\s+5\s+{re.escape(human(s['leaks']['bytes']))}"
                         rf"\s+{re.escape(peaks)}$", p.stdout, re.M), p.stdout

    # merge.db: the same rows, through ATTACH
    con = sqlite3.connect(":memory:")
    con.execute("ATTACH DATABASE ? AS m", (str(out / "merge.db"),))
    got = con.execute('SELECT node, rank, pid, "cpu/HOST peak_bytes", "cpu/PTA peak_bytes", leaked_bytes, steps '
                      "FROM m.ranks WHERE rank IS NOT NULL ORDER BY node, rank").fetchall()
    assert got == [(r["node"], int(r["rank"]), int(r["pid"]), int(r["cpu/HOST peak_bytes"]),
                    int(r["cpu/PTA peak_bytes"]), int(r["leaked_bytes"]), 5)
                   for r in sorted(ranked, key=lambda r: (r["node"], int(r["rank"])))], got
    assert con.execute("SELECT count(*) FROM m.ranks").fetchone()[0] == len(rows)
    assert con.execute("SELECT min_bytes, max_bytes, max_minus_min_bytes FROM m.imbalance "
                       "WHERE metric='peak' AND pool='cpu/HOST'").fetchone() == \
        (int(imb[("peak", "cpu/HOST")]["min_bytes"]), int(imb[("peak", "cpu/HOST")]["max_bytes"]),
         int(imb[("peak", "cpu/HOST")]["max_minus_min_bytes"]))
    assert con.execute("SELECT count(*) FROM m.pools WHERE rank IS NOT NULL").fetchone()[0] == 8  # 4 ranks x 2 pools
    assert con.execute("SELECT count(*) FROM m.sites").fetchone()[0] == sum(len(s["top_sites"]) for s in sums.values())

    # index.html: each rank's row, linking its folder
    html = (out / "index.html").read_text()
    for r in ranked:
        assert f'<td class="n">{r["rank"]}</td><td class="n">{r["pid"]}</td>' in html, r
        assert f'href="../{r["node"]}/{r["folder"]}/"' in html, r
    assert "Imbalance between ranks" in html


def fake_summary(pid, rank, peak, command="python3 x.py"):
    return {"format": "msmemscope-process-summary", "format_version": 1, "hostname": "h", "pid": pid,
            "ppid": 1, "rank": rank, "command": command, "folder": "",
            "ended": {"how": "exit", "code": 0, "text": "exited with code 0"}, "events": 10, "dropped": 0,
            "complete": True, "incomplete": [], "pools": {"cpu/HOST": {"peak_bytes": peak, "final_bytes": 0}},
            "leaks": None, "steps": 3, "top_sites": []}


def test_merge_refuses_links_and_bad_files_and_escapes(tmp_path):
    node = tmp_path / "n1"
    for pid, rank, peak in [(11, 0, 1000), (12, 1, 4000)]:
        d = node / f"msmemscope_{pid}_20260101000000_cpu_rank{rank}"
        d.mkdir(parents=True)
        (d / "summary.json").write_text(json.dumps(fake_summary(pid, rank, peak, "<script>alert(1)</script> &")))
    # a summary.json that is a link (to a valid summary), a FIFO, too large,
    # not JSON, and a folder without one: each left out with a warning
    bad = {}
    for pid, kind in [(21, "link"), (22, "fifo"), (23, "big"), (24, "junk"), (25, "none")]:
        d = node / f"msmemscope_{pid}_20260101000000_cpu_rank{pid}"
        d.mkdir()
        f = d / "summary.json"
        if kind == "link":
            (tmp_path / "elsewhere.json").write_text(json.dumps(fake_summary(pid, 9, 1)))
            f.symlink_to(tmp_path / "elsewhere.json")
        elif kind == "fifo":
            os.mkfifo(f)
        elif kind == "big":
            f.write_text(" " * (2 << 20))
        elif kind == "junk":
            f.write_text('{"format": "msmemscope-process-summary", ')
        bad[pid] = d
    # a process folder that is itself a link is not followed
    real = tmp_path / "real_proc"
    real.mkdir()
    (real / "summary.json").write_text(json.dumps(fake_summary(31, 5, 1)))
    (node / "msmemscope_31_20260101000000_cpu_rank5").symlink_to(real)

    p = run_cli(["--merge=n1", "-o", "out"], tmp_path, timeout=60, check_rc=0)
    rows = read_csv(tmp_path / "out" / "merge.csv")
    assert [(r["pid"], r["rank"]) for r in rows] == [("11", "0"), ("12", "1")], rows
    for pid, d in bad.items():
        assert f"n1/{d.name}/summary.json: " in p.stderr, (pid, p.stderr)
    assert "symbolic link (refused)" in p.stderr and "a FIFO (refused)" in p.stderr
    assert "larger than 1048576 bytes (refused)" in p.stderr
    imb = read_csv(tmp_path / "out" / "merge_imbalance.csv")
    assert [(r["metric"], r["min_bytes"], r["max_bytes"], r["max_minus_min_bytes"], r["max_over_min"]) for r in imb] \
        == [("peak", "1000", "4000", "3000", "4.000000")], imb
    html = (tmp_path / "out" / "index.html").read_text()
    assert "<script>" not in html and "&lt;script&gt;alert(1)&lt;/script&gt; &amp;" in html
    # CSV cells are never formulas; SQLite holds the text as it is
    con = sqlite3.connect(":memory:")
    con.execute("ATTACH DATABASE ? AS m", (str(tmp_path / "out" / "merge.db"),))
    assert con.execute("SELECT command FROM m.ranks WHERE pid = 11").fetchone() == \
        ("<script>alert(1)</script> &",)

    # a folder that is not there: 2; nothing to merge: 2
    p = run_cli(["--merge=n1,missing", "-o", "out2"], tmp_path, timeout=60)
    assert p.returncode == 2 and "'missing' does not exist" in p.stderr, p.stderr
    (tmp_path / "empty").mkdir()
    p = run_cli(["--merge=empty", "-o", "out3"], tmp_path, timeout=60)
    assert p.returncode == 2 and "nothing to merge" in p.stderr, p.stderr
    # --merge runs alone
    p = run_cli(["--merge=n1", "--", "true"], tmp_path, timeout=60)
    assert p.returncode == 2 and "--merge runs alone" in p.stderr, p.stderr


def test_a_process_folder_named_twice_is_counted_once(tmp_path):
    # --merge=n1,n1 (or a run folder and one of its process folders) counted
    # the same processes twice: "merged 4 processes (4 with a rank)", and the
    # imbalance over 4 ranks.
    node = tmp_path / "n1"
    for pid, rank, peak in [(11, 0, 1000), (12, 1, 4000)]:
        d = node / f"msmemscope_{pid}_20260101000000_cpu_rank{rank}"
        d.mkdir(parents=True)
        (d / "summary.json").write_text(json.dumps(fake_summary(pid, rank, peak)))
    one = "n1/../n1/msmemscope_11_20260101000000_cpu_rank0"
    p = run_cli(["--merge=n1,n1," + one, "-o", "out"], tmp_path, timeout=60, check_rc=0)
    assert "msmemscope: merged 2 processes (2 with a rank) from 1 folder(s)" in p.stdout, p.stdout
    assert [(r["pid"], r["rank"]) for r in read_csv(tmp_path / "out" / "merge.csv")] == [("11", "0"), ("12", "1")]
    assert [r["ranks"] for r in read_csv(tmp_path / "out" / "merge_imbalance.csv")] == ["2"]
    warned = [l for l in p.stderr.splitlines() if l.startswith("msmemscope: warning: --merge: ")]
    assert warned == [
        "msmemscope: warning: --merge: 'n1/msmemscope_11_20260101000000_cpu_rank0' is named more than once; "
        "counted once",
        "msmemscope: warning: --merge: 'n1/msmemscope_12_20260101000000_cpu_rank1' is named more than once; "
        "counted once",
        f"msmemscope: warning: --merge: '{one}' is 'n1/msmemscope_11_20260101000000_cpu_rank0' again; counted once",
    ], p.stderr


def merge_log_messages(out):
    """The merge's log (<out>/msmemscope_logs/msmemscope_<ts>.log, msMemScope's
    format) as "[LEVEL] text", the time left out."""
    (log,) = (out / "msmemscope_logs").glob("msmemscope_*.log")
    return [re.sub(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d ", "", l) for l in log.read_text().splitlines()]


def test_the_merge_keeps_a_log_of_what_it_said_beside_its_table(tmp_path):
    """The merged folder is read later or elsewhere than the console: its log
    has the warnings and the table, in the console's words, in its order."""
    node = tmp_path / "n1"
    for pid, rank, peak in [(11, 0, 1000), (12, 1, 4000)]:
        d = node / f"msmemscope_{pid}_20260101000000_cpu_rank{rank}"
        d.mkdir(parents=True)
        (d / "summary.json").write_text(json.dumps(fake_summary(pid, rank, peak)))
    p = run_cli(["--merge=n1,n1", "-o", "out"], tmp_path, timeout=60, check_rc=0)
    warned = [l for l in p.stderr.splitlines() if l.startswith("msmemscope: warning: ")]  # as root: that first
    assert [w for w in warned if w.startswith("msmemscope: warning: --merge: ")] == warned[-2:], p.stderr
    printed = p.stdout.splitlines()
    assert printed[0] == "msmemscope: merged 2 processes (2 with a rank) from 1 folder(s)", p.stdout
    assert printed[-1].startswith("  files: out/merge.csv, "), p.stdout
    assert merge_log_messages(tmp_path / "out") == \
        [f"[WARN]  {w[len('msmemscope: warning: '):]}" for w in warned] + [f"[INFO]  {l}" for l in printed]
    # a merge that stops before its output folder is made makes none for its log
    (tmp_path / "empty").mkdir()
    p = run_cli(["--merge=empty", "-o", "out2"], tmp_path, timeout=60)
    assert p.returncode == 2 and not (tmp_path / "out2").exists(), p.stderr


def test_the_table_says_how_each_process_ended_as_its_run_did(tmp_path):
    # A DataLoader worker's "exited with code 0 (_exit after fork)" was
    # "exit 0" in the merged table, and a killed process "signal".
    node = tmp_path / "n1"
    ends = {11: ("exit", 0, "exited with code 0 (_exit after fork)"), 12: ("exit", 3, "exited with code 3 (_exit)"),
            13: ("signal", None, "killed by signal 15 (SIGTERM)"), 14: ("exit", 0, "exited with code 0")}
    for pid, (how, code, text) in ends.items():
        d = node / f"msmemscope_{pid}_20260101000000_cpu"
        d.mkdir(parents=True)
        s = fake_summary(pid, None, 1000)
        s["ended"] = {"how": how, "code": code, "text": text}
        (d / "summary.json").write_text(json.dumps(s))
    p = run_cli(["--merge=n1", "-o", "out"], tmp_path, timeout=60, check_rc=0)
    shown = dict(re.findall(r"^  n1\s+-\s+(\d+)\s+(.+?)\s{2,}3\s", p.stdout, re.M))
    assert shown == {"11": "_exit 0 after fork", "12": "_exit 3", "13": "signal 15 (SIGTERM)", "14": "exit 0"}, \
        p.stdout


def test_an_api_runs_summary_counts_what_is_live_at_stop(tmp_path):
    # Under the Python API the leak report says "still allocated at stop()":
    # summary.json's leaks and sites are read from that wording too.
    import subprocess
    from conftest import BUILD
    (tmp_path / "api.py").write_text(
        "import msmemscope\n"
        "msmemscope.config(device='cpu', analysis='leaks', output='out', default_suppressions=False)\n"
        "msmemscope.start()\n"
        "keep = [bytearray(100000) for _ in range(3)]\n"
        "msmemscope.stop()\n")
    e = dict(os.environ, PYTHONPATH=str(BUILD / "python"))
    e.pop("LD_PRELOAD", None)
    e.pop("MSMEMSCOPE_SESSION", None)
    p = subprocess.run(["/usr/bin/python3", "api.py"], cwd=tmp_path, env=e, capture_output=True, text=True,
                       timeout=300)
    assert "Host memory still allocated at stop() on device cpu: 3 block(s), 300003 bytes" in p.stdout, p.stdout
    (d,) = process_dirs(tmp_path / "out")
    s = json.loads((d / "summary.json").read_text())
    assert s["leaks"] == {"bytes": 300003, "allocations": 3, "exit_judged": True,
                          "not_judged_before_start": {"blocks": 0, "bytes": 0}}
    assert [(x["kind"], x["blocks"], x["bytes"]) for x in s["top_sites"]] == [("live_at_exit", 3, 300003)]
