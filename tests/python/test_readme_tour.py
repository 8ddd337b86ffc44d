"""The README's tour, every command of its "More" block run as written, from
a copy of the repository's root (the build linked in, configs/ and
bench/views/ copied: the YAML profile writes beside itself), in order (the
replay and the offline analysis read run1, the compare reads runA and
runB). Each command's answer is checked for what its comment promises, not
only its exit status; a command added to the block without an expectation
here fails the test, so the tour cannot drift from what works."""
import os
import re
import shutil
import subprocess

from conftest import BUILD, SOURCE, process_dirs


def tour_commands():
    text = (SOURCE / "README.md").read_text()
    start = text.index("More, from the repository's root")
    block = text[text.index("```sh\n", start) + 6:]
    block = block[:block.index("```\n")]
    cmds = []
    for line in block.splitlines():
        line = re.sub(r"\s+#.*$", "", line).strip()  # the trailing comments, as bash reads them
        if line and not line.startswith("#"):
            cmds.append(line)
    return cmds


def env():
    e = dict(os.environ)
    e.pop("LD_PRELOAD", None)
    e.pop("LD_LIBRARY_PATH", None)
    # A fresh Debian 12's python3, which has torch (another python3 may be first here).
    e["PATH"] = "/usr/bin:" + e.get("PATH", "")
    return e


def only_dir(root):
    [d] = process_dirs(root)
    return d


def summary_lines(out):
    return re.findall(r"^msmemscope: pid \d+ \((.*?)\) (.*)$", out, re.M)


def check_events(p, root):
    assert re.search(r"^  cpu/HOST: peak [\d.]+ KiB, final [\d.]+ KiB$", p.stdout, re.M), p.stdout
    assert "--events got" not in p.stderr


def check_shell(p, root, out="memscopeDumpResults"):
    # bash, then the Python it started, profiled as Python (its PTA pool), and one table of all.
    table = re.search(r"^msmemscope: (\d+) processes\n(  pid +ppid.*)\n((?:  \d+ .*\n)+)", p.stdout, re.M)
    assert table, p.stdout
    rows = table[3].splitlines()
    # Every command starts under the header's "command", the Python row's two pools' peaks too.
    col = table[2].index("command")
    assert [r[col:] for r in rows] == [r[col:].strip() for r in rows] and all(r[col - 1] == " " for r in rows), \
        table[0]
    assert any(r.endswith("/usr/bin/bash bench/views/train.sh") and "(shell)" in r for r in rows), rows
    [py] = [r for r in rows if r.endswith("python3 bench/views/gpt_keep_loss.py")]
    assert "exited with code 0" in py and "cpu/PTA" in py, py
    assert (root / out / "index.html").is_file()


def check_yaml(p, root):
    assert re.search(r"^  output: configs/memscopeDumpResults/msmemscope_\d+_\d+_cpu$", p.stdout, re.M), p.stdout
    assert "Host memory still allocated at exit on device cpu: 9 block(s), 12124 bytes" in p.stdout


def check_db(p, root):
    d = only_dir(root / "memscopeDumpResults")
    names = [f.name for f in d.rglob("*") if f.is_file()]
    assert any(n.endswith(".db") for n in names), names
    assert any(n.startswith("report_") and n.endswith(".html") for n in names), names
    assert any("trace" in n and n.endswith(".json") for n in names), names


def check_suppress(p, root):
    assert "Host memory still allocated at exit on device cpu: 8 block(s), 8028 bytes, from 1 allocation site(s)" \
        in p.stdout, p.stdout
    assert re.search(r"^  1 allocation site\(s\) suppressed on device cpu \(1 block\(s\), 4096 bytes\): 1 by "
                     r"\S+/configs/known-leaks\.supp$", p.stdout, re.M), p.stdout


def check_step_on(p, root):
    assert "kv_infer: 24 tokens" in p.stdout
    # The steps are the function's returns: the leak analysis judged them and found the kept cache.
    assert "====== ERROR: Detected memory leaks on device cpu ======" in p.stdout, p.stdout
    assert re.search(r"at step \d+\.$", p.stdout, re.M), p.stdout


def check_save(p, root):
    assert list((root / "run1").glob("msmemscope_*/capture_*.msmcap")), list((root / "run1").rglob("*"))


def check_replay(p, root):
    assert "events: 60, dropped: 0" in p.stdout, p.stdout
    assert only_dir(root / "run1b").name.endswith("_cpu")


def check_aggregate(p, root):
    d = only_dir(root / "memscopeDumpResults")
    assert list(d.glob("report_*.html")) and not list(d.rglob("*.csv")), list(d.rglob("*"))


def check_analyze(p, root):
    assert re.search(r"^msmemscope: analysed run1/msmemscope_\d+_\d+_cpu/device_cpu/dump/memscope_dump_\d+\.csv "
                     r"\(\d+ rows\) with inefficient$", p.stdout, re.M), p.stdout


def check_run(name):
    def check(p, root):
        assert [c for c, _ in summary_lines(p.stdout)] == ["/usr/bin/python3 bench/views/kv_infer.py"], p.stdout
        assert only_dir(root / name)
    return check


def check_compare(p, root):
    m = re.search(r"^msmemscope: compare: (\d+) row\(s\) written to cmp/compare/memory_compare_\d+\.csv$",
                  p.stdout, re.M)
    assert m and int(m[1]) > 0, p.stdout + p.stderr


def check_plugins(p, root):
    for name in ("csv", "db", "html", "trace", "memory_viz", "leaks", "decompose"):
        assert re.search(rf"^{name} +(sink|analyzer) +\d", p.stdout, re.M), (name, p.stdout)


# Each command of the block by what makes it itself, and what it must show.
EXPECT = [
    ("--events=alloc,free -- build/tests/bin/demo_train", check_events),
    ("--device=cpu bash bench/views/train.sh", check_shell),
    ("bash bench/views/train.sh --device=cpu -o out", lambda p, root: check_shell(p, root, "out")),
    ("--config configs/cpu-leaks.yaml", check_yaml),
    ("--data-format=db --sinks=trace,html", check_db),
    ("--suppress=configs/known-leaks.supp", check_suppress),
    ("--step-on=__main__:generate_token", check_step_on),
    ("--save-capture=true --output=run1 ", check_save),
    ("--replay=run1/", check_replay),
    ("--aggregate", check_aggregate),
    ("--analyze=inefficient --input=run1/", check_analyze),
    ("--output=runA ", check_run("runA")),
    ("--output=runB ", check_run("runB")),
    ("--compare --input=runA,runB", check_compare),
    ("--list-plugins", check_plugins),
]


def test_every_command_of_the_tour_works_as_written(tmp_path):
    cmds = tour_commands()
    assert len(cmds) == len(EXPECT), cmds
    (tmp_path / "build").symlink_to(BUILD)
    shutil.copytree(SOURCE / "configs", tmp_path / "configs", ignore=shutil.ignore_patterns("memscopeDumpResults"))
    (tmp_path / "bench").mkdir()
    shutil.copytree(SOURCE / "bench" / "views", tmp_path / "bench" / "views",
                    ignore=shutil.ignore_patterns("__pycache__"))
    for cmd, (key, check) in zip(cmds, EXPECT):
        assert cmd.startswith("build/bin/msmemscope ") and key in cmd + " ", (cmd, key)
        # Each run's default output folder starts empty, so a check sees its own run.
        shutil.rmtree(tmp_path / "memscopeDumpResults", ignore_errors=True)
        p = subprocess.run(["bash", "-c", cmd], cwd=tmp_path, env=env(), capture_output=True, text=True,
                           timeout=600)
        assert p.returncode == 0, (cmd, p.stdout[-3000:], p.stderr[-3000:])
        check(p, tmp_path)
