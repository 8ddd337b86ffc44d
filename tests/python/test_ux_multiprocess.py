"""Issue #19 item 5: several processes under one run (a launcher script with
two programs, ranks from RANK): after the per-process output, one combined
table and <output>/index.html linking each process's report; a shell's
pre-exec image reports no leaks."""
import html.parser
import os
import re
import subprocess
from pathlib import Path

from conftest import CLI, TEST_BIN, process_dirs

DEMO = TEST_BIN / "demo_train"


def _run(args, cwd):
    e = dict(os.environ)
    e.pop("LD_PRELOAD", None)
    return subprocess.run([str(CLI)] + [str(a) for a in args], cwd=str(cwd), env=e, capture_output=True, text=True,
                          timeout=300)


class Links(html.parser.HTMLParser):
    def __init__(self):
        super().__init__()
        self.links, self.cells = [], []

    def handle_starttag(self, tag, attrs):
        if tag == "a":
            self.links.append(dict(attrs)["href"])

    def handle_data(self, data):
        self.cells.append(data)


def test_launcher_script_gets_a_combined_table_and_index(tmp_path):
    script = tmp_path / "user.sh"
    script.write_text(f"RANK=0 {DEMO}\nRANK=1 {DEMO}\n")
    p = _run(["--device=cpu", "--sinks=html", "--output=out", "--", "bash", script], tmp_path)
    assert p.returncode == 0, p.stderr
    out = p.stdout
    # bash, two forked children that exec'ed (their pre-exec images), two programs.
    pids = re.findall(r"^msmemscope: pid (\d+) \((.*?)\) (.*)$", out, re.M)
    execed = [x for x in pids if x[2].startswith("replaced by exec")]
    assert len(execed) == 2, out
    # A pre-exec image of bash reports no leaks (its memory went with exec).
    blocks = re.split(r"^msmemscope: pid ", out, flags=re.M)[1:]
    for b in blocks:
        if "replaced by exec" in b.splitlines()[0]:
            assert "Detected memory leaks" not in b, b
    # The combined table.
    m = re.search(r"^msmemscope: (\d+) processes\n  pid +ppid +rank +ended +leaked +peak +command\n((?:  \d+ .*\n)+)"
                  r"  index: (.*)$", out, re.M)
    assert m, out
    assert int(m[1]) == len(pids) >= 5
    rows = m[2].splitlines()
    assert len(rows) == len(pids)
    # The two programs, with their ranks, leaks and peaks; the two pre-exec images: no leaks.
    # How each ended in the words of its summary line (the programs returned
    # from main: their agents saw no status), and each one's parent: bash.
    root = re.match(r"^  (\d+) +\d+ +- +exited with code 0 +", rows[0])
    assert root, rows
    prog = re.compile(r"^  \d+ +(\d+) +(\d+) +exited (?:with code 0|normally) +(\d+\.\d KiB) +cpu/HOST 111\.8 KiB +"
                      + re.escape(str(DEMO)) + "$")
    progs = [prog.match(r) for r in rows if prog.match(r)]
    assert sorted(x[2] for x in progs) == ["0", "1"], rows
    assert all(x[3] == "11.8 KiB" for x in progs)
    assert all(x[1] == root[1] for x in progs), rows
    execed_rows = [r for r in rows if re.match(r"^  \d+ +" + root[1] + r" +\S+ +replaced by exec +- ", r)]
    assert len(execed_rows) == 2, rows
    index = Path(m[3])
    assert index == (tmp_path / "out" / "index.html").resolve() or index == tmp_path / "out" / "index.html"
    parser = Links()
    parser.feed(index.read_text())
    # Every process that wrote a report is linked, relative to the index, and the links resolve.
    reports = sorted(str(p.relative_to(tmp_path / "out")) for p in (tmp_path / "out").glob("msmemscope_*/report_*.html"))
    assert sorted(l for l in parser.links if l.endswith(".html")) == reports
    for l in parser.links:
        assert (tmp_path / "out" / l).exists(), l
    assert f"{len(pids)} processes" in " ".join(parser.cells)


def test_single_process_has_no_combined_table(tmp_path):
    p = _run(["--device=cpu", "--output=out", "--", DEMO], tmp_path)
    assert p.returncode == 0
    assert "processes\n" not in p.stdout and not (tmp_path / "out" / "index.html").exists()
