"""Issue 3 §5: fork, exec, bash scripts and torchrun-like launchers: one
folder per process, nothing shared or interleaved; --follow-fork=false."""
import json
import re
from collections import Counter

from capture_util import assert_nothing_lost, iter_rows, only_dump, sizes, summary_blocks
from conftest import process_dirs

PAIRS = 2000


def test_forked_workers_each_own_folder(cli, test_bin, tmp_path):
    p = cli(["--device=cpu", "--events=alloc,free", "--analysis=", f"--output={tmp_path}/out", "--",
             test_bin / "cap_fork", 4, PAIRS], tmp_path, check_rc=0)
    assert_nothing_lost(p.stdout)
    dirs = process_dirs(tmp_path / "out")
    assert len(dirs) == 5
    by_sizes = {}
    for d in dirs:
        rows = list(iter_rows(only_dump(d)))
        pids = {r[5] for r in rows}
        assert pids == {d.name.split("_")[1]}  # no stream shared
        m = sorted(s for s in sizes(d) if 50 <= s < 110)
        by_sizes[tuple(sorted(set(m)))] = (d, len(m), len([r for r in rows if r[1] == "FREE"]))
    assert set(by_sizes) == {(50,), (100,), (101,), (102,), (103,)}
    assert by_sizes[(50,)][1] == 3
    for k in range(4):
        d, n, _ = by_sizes[(100 + k,)]
        assert n == PAIRS
        assert sizes(d, "FREE").count(100 + k) == PAIRS
    blocks = summary_blocks(p.stdout)
    for k in range(4):
        pid = int(by_sizes[(100 + k,)][0].name.split("_")[1])
        assert blocks[pid][0].endswith(f") exited with code {k}")


def test_follow_fork_false_profiles_only_the_program(cli, test_bin, tmp_path):
    p = cli(["--device=cpu", "--events=alloc,free", "--analysis=", "--follow-fork=false",
             f"--output={tmp_path}/out", "--", test_bin / "cap_fork", 4, PAIRS], tmp_path, check_rc=0)
    dirs = process_dirs(tmp_path / "out")
    assert len(dirs) == 1
    assert sorted(set(s for s in sizes(dirs[0]) if 50 <= s < 110)) == [50]


def test_launcher_ranks(cli, test_bin, tmp_path):
    """A launcher that forks and execs 4 workers with RANK/LOCAL_RANK set, the
    way torchrun and mpirun do: each worker's folder carries _rank{R}."""
    p = cli(["--device=cpu", "--events=alloc,free", "--analysis=", f"--output={tmp_path}/out", "--",
             test_bin / "cap_launcher", 4, PAIRS, test_bin / "cap_worker"], tmp_path, check_rc=0)
    assert_nothing_lost(p.stdout)
    ranked = {}
    for d in process_dirs(tmp_path / "out"):
        m = re.search(r"_rank(\d+)", d.name)
        if m:
            ranked[int(m.group(1))] = d
    assert sorted(ranked) == [0, 1, 2, 3]
    for r, d in ranked.items():
        s = sizes(d)
        assert s.count(200 + r) == PAIRS
        assert [x for x in s if 200 <= x < 204 and x != 200 + r] == []
        assert sizes(d, "FREE").count(200 + r) == PAIRS


def test_bash_script_runs_several_programs(cli, test_bin, tmp_path):
    script = tmp_path / "user.sh"
    script.write_text(f"{test_bin}/cap_worker {PAIRS}\nRANK=1 {test_bin}/cap_worker {PAIRS}\n"
                      f"{test_bin}/cap_fork 2 {PAIRS}\n")
    p = cli(["--device=cpu", "--events=alloc,free", "--analysis=", f"--output={tmp_path}/out", "--",
             "bash", script], tmp_path, check_rc=0)
    assert_nothing_lost(p.stdout)
    found = {}
    want = {200: PAIRS, 201: PAIRS, 100: PAIRS, 101: PAIRS, 50: 3}
    for d in process_dirs(tmp_path / "out"):
        c = Counter(sizes(d))
        for s, n in want.items():
            if c[s] == n:  # bash's own small blocks are not counted as ours
                found.setdefault(s, []).append(d)
    assert {k: len(v) for k, v in found.items()} == {200: 1, 201: 1, 100: 1, 101: 1, 50: 1}
    assert found[201][0].name.endswith("_rank1_exec1")
    assert sizes(found[200][0]).count(200) == PAIRS
    assert sizes(found[201][0]).count(201) == PAIRS


# A parent that ends before its forked child: the child waits (a pipe: EOF
# once the parent is gone) until the host has read the parent's capture to its
# end and emptied it (the file is truncated to nothing), then keeps 100 blocks
# and ends with _exit(0). Its memory went with it, whatever happened to its
# parent: "_exit after fork" comes from the child's own capture (the agent's
# fork handler records the parent it was forked from), not from the parent's.
ORPHAN = r'''
import os, sys, time
r, w = os.pipe()
parent = os.getpid()  # not the child's getppid(): the parent may be gone by then
pid = os.fork()
if pid == 0:
    os.close(w)
    cap = os.path.join(os.environ["MSMEMSCOPE_SESSION"], f"{parent}.0.msmcap")
    kept = [bytearray(4096) for _ in range(100)]
    os.read(r, 1)  # EOF: the parent has ended
    deadline = time.monotonic() + 120
    while os.stat(cap).st_size != 0:  # the host has read it and emptied it
        if time.monotonic() > deadline:
            os._exit(9)
        time.sleep(0.01)
    os._exit(0)
os.close(r)
print("parent", os.getpid(), "child", pid, flush=True)
'''


def test_exit_after_fork_when_the_parent_ended_first(cli, tmp_path):
    (tmp_path / "orphan.py").write_text(ORPHAN)
    p = cli(["--device=cpu", "--analysis=leaks", "--sinks=csv", f"--output={tmp_path}/out", "--",
             "/usr/bin/python3", "orphan.py"], tmp_path, env={"PYTHONPATH": ""}, check_rc=0)
    m = re.search(r"^parent (\d+) child (\d+)$", p.stdout, re.M)
    assert m, p.stdout
    parent, child = int(m[1]), int(m[2])
    lines = {int(x[1]): x[2] for x in re.finditer(r"^msmemscope: pid (\d+) \(.*?\) (.*)$", p.stdout, re.M)}
    assert lines[parent] == "exited with code 0", p.stdout
    assert lines[child] == "exited with code 0 (_exit after fork)", p.stdout
    block = re.split(r"^msmemscope: pid ", p.stdout, flags=re.M)
    (mine,) = [b for b in block if b.startswith(f"{child} ")]
    assert "still allocated at exit" not in mine and "Detected memory leaks" not in mine, mine
    # the table: its parent, its ending, no step leak (what it held at its _exit is not judged)
    (row,) = [r for r in p.stdout.splitlines() if re.match(rf"^  {child} +{parent} ", r)]
    assert "exited with code 0 (_exit after fork)" in row and re.search(r"\(_exit after fork\) +0 B \(steps\) ", row), row
    assert "\nleaks: not judged at its end: what it held at its _exit (" in mine, mine
    # summary.json in the console's words (it said "(_exit)")
    (folder,) = [d for d in process_dirs(tmp_path / "out") if d.name.startswith(f"msmemscope_{child}_")]
    ended = json.loads((folder / "summary.json").read_text())["ended"]
    assert ended == {"how": "exit", "code": 0, "text": "exited with code 0 (_exit after fork)"}, ended


DAEMONIZE = r'''
import os
for _ in range(10):
    r, w = os.pipe()
    middle = os.fork()
    if middle == 0:
        grandchild = os.fork()
        if grandchild == 0:
            os.close(r)
            os.write(w, b"%d\n" % os.getpid())
            os._exit(0)
        os._exit(0)  # at once: the grandchild's agent may still be opening its capture
    os.close(w)
    os.waitpid(middle, 0)
    line = b""
    while not line.endswith(b"\n"):
        line += os.read(r, 64)
    os.close(r)
    print("middle", middle, "grandchild", line.split()[0].decode(), flush=True)
'''


def test_a_daemonized_grandchild_names_the_process_that_forked_it(cli, tmp_path):
    # The middle process of a double fork exits at once; the grandchild's
    # ppid came from getppid() when its capture opened, which named the CLI
    # (the subreaper) whenever the middle had already gone (3 runs in 7).
    (tmp_path / "daemonize.py").write_text(DAEMONIZE)
    p = cli(["--device=cpu", "--analysis=", "--sinks=csv", f"--output={tmp_path}/out", "--",
             "/usr/bin/python3", "daemonize.py"], tmp_path, env={"PYTHONPATH": ""}, check_rc=0)
    pairs = re.findall(r"^middle (\d+) grandchild (\d+)$", p.stdout, re.M)
    assert len(pairs) == 10, p.stdout
    for middle, grandchild in pairs:
        (row,) = [r for r in p.stdout.splitlines() if re.match(rf"^  {grandchild} +\d+ ", r)]
        assert re.match(rf"^  {grandchild} +{middle} ", row), (middle, row)
        (folder,) = [d for d in process_dirs(tmp_path / "out") if d.name.startswith(f"msmemscope_{grandchild}_")]
        assert json.loads((folder / "summary.json").read_text())["ppid"] == int(middle)


FORK_EXIT = """
import os
keep = []
pid = os.fork()
if pid == 0:
    keep.append(bytearray(300000))
    print("child", os.getpid(), flush=True)
    os._exit(0)
os.waitpid(pid, 0)
"""


def final_text(block):
    return re.search(r"^  cpu/HOST: peak .*?, final (.*)$", block, re.M).group(1)


def test_a_child_ended_by_exit_after_fork_shows_what_it_held_alike_everywhere(cli, tmp_path):
    # Its memory went with it: no leak. Its console block said "final 293.3
    # KiB" and, just below, decompose's "HOST Live 0": the release of its
    # blocks reached the decompose analysis too. Now the table is what was
    # live when the image ended, as the pool's final figure and summary.json.
    (tmp_path / "prog.py").write_text(FORK_EXIT)
    p = cli(["--device=cpu", "--analysis=leaks,decompose", "--output=out", "--", "/usr/bin/python3", "prog.py"],
            tmp_path, env={"PYTHONPATH": ""}, check_rc=0)
    child = re.search(r"^child (\d+)$", p.stdout, re.M).group(1)
    block = summary_blocks(p.stdout)[int(child)]
    assert block[0].endswith(") exited with code 0 (_exit after fork)"), block
    text = "\n".join(block)
    assert "still allocated" not in text, text
    # not judged, and said so with what it held
    assert f"\nleaks: not judged at its end: what it held at its _exit (cpu/HOST {final_text(text)}) went with it" in text, text
    (folder,) = [d for d in process_dirs(tmp_path / "out") if d.name.split("_")[1] == child]
    final = json.loads((folder / "summary.json").read_text())["pools"]["cpu/HOST"]["final_bytes"]
    assert final >= 300000, final
    live = re.search(r"^  HOST +(\d+) +(\d+) +(\d+)$", text, re.M)
    assert live and int(live.group(1)) == final, text
    # its rows: each block still live gets a FREE saying the image ended with it
    frees = [rec for rec in iter_rows(only_dump(folder)) if rec[1] == "FREE" and "shadow:true" in rec[9]]
    assert frees and all(rec[9].endswith(",shadow:true,image_ended:true}") for rec in frees), frees[:3]
    # --analyze of its dump says the same: no leak, the same table
    import shutil
    shutil.copytree(folder, tmp_path / "copy" / folder.name)
    off = cli(["--analyze=leaks,decompose", "--input-path=copy"], tmp_path, check_rc=0)
    assert "still allocated" not in off.stdout and "Detected memory leaks" not in off.stdout, off.stdout
    assert re.search(r"^  HOST +(\d+) ", off.stdout, re.M).group(1) == str(final), off.stdout


def test_the_html_of_a_child_ended_by_exit_after_fork_says_what_was_not_judged(cli, tmp_path):
    # Its page said "The leaks analysis reported no leak." and nothing more,
    # beside a site table of the 300,000 bytes it held at its _exit.
    from test_html_truth import dom_of, page_data
    (tmp_path / "prog.py").write_text(FORK_EXIT)
    p = cli(["--device=cpu", "--analysis=leaks", "--sinks=html", "--output=out", "--", "/usr/bin/python3", "prog.py"],
            tmp_path, env={"PYTHONPATH": ""}, check_rc=0)
    child = re.search(r"^child (\d+)$", p.stdout, re.M).group(1)
    (folder,) = [d for d in process_dirs(tmp_path / "out") if d.name.split("_")[1] == child]
    (page,) = folder.glob("report_*.html")
    blocks, size = page_data(page)["image_ended"]
    final = json.loads((folder / "summary.json").read_text())["pools"]["cpu/HOST"]["final_bytes"]
    assert size == final >= 300000 and blocks >= 1
    dom = dom_of(page, tmp_path)
    assert '<p class="empty" id="no-leaks">The leaks analysis reported no leak.</p>' in dom
    m = re.search(r'<p class="note" id="image-ended">Not judged: what the process held when its image ended '
                  r'\((\d+) block\(s\), ([\d.]+ \w?i?B): an exec, or _exit after fork\) went with it; its step leaks '
                  r"are judged as any process's\.</p>", dom)
    assert m and int(m.group(1)) == blocks, dom[dom.find("no-leaks") - 200:][:1200]
    # the parent's page says nothing of the kind
    (parent,) = [d for d in process_dirs(tmp_path / "out") if d != folder]
    assert page_data(next(parent.glob("report_*.html")))["image_ended"] == [0, 0]
