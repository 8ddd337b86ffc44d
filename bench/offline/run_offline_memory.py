#!/usr/bin/python3
"""Peak RSS of the offline modes on N-row upstream-format dumps (issue #29 item 6).

bench/offline/run_offline_memory.py [--build DIR] [--rows N]
Prints one line per case: `--analyze` (rows in time order and out of it) and
`--compare` of two runs, with the peak resident memory of the tool and its
analysis worker (/usr/bin/time's %M). The dump is tests/python/test_offline_memory.py's
(mostly PTA malloc/free pairs, an operator every 8th pair, a step every 1000 rows)."""
import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "python"))
os.environ.setdefault("MSMEMSCOPE_BUILD", str(ROOT / "build"))
from test_offline_memory import write_dump  # noqa: E402


def peak(cmd):
    # /usr/bin/time: Linux carries a peak RSS across fork and exec, so a child
    # of this (large) Python process would report at least this one's size.
    with tempfile.NamedTemporaryFile("r") as f, open(os.devnull, "w") as null:
        rc = subprocess.call(["/usr/bin/time", "-f", "%M", "-o", f.name] + cmd, stdout=null, stderr=null)
        return rc, int(f.read().split()[-1]) / 1024


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default=str(ROOT / "build"))
    ap.add_argument("--rows", type=int, default=1_000_000)
    a = ap.parse_args()
    cli = str(Path(a.build) / "bin" / "msmemscope")
    with tempfile.TemporaryDirectory() as t:
        t = Path(t)
        for d in ("s", "u"):
            (t / d).mkdir()
        write_dump(t / "s" / "memscope_dump_1.csv", a.rows)
        write_dump(t / "u" / "memscope_dump_1.csv", a.rows, swap_every=5)
        cases = [
            ("--analyze=leaks,decompose,inefficient, rows in time order",
             [cli, "--analyze=leaks,decompose,inefficient", f"--input={t / 's' / 'memscope_dump_1.csv'}", f"--output={t / 'o'}"]),
            ("--analyze=leaks,decompose,inefficient, rows out of order",
             [cli, "--analyze=leaks,decompose,inefficient", f"--input={t / 'u' / 'memscope_dump_1.csv'}", f"--output={t / 'o'}"]),
            ("--compare (one run out of order)", [cli, "--compare", f"--input={t / 's'},{t / 'u'}", f"--output={t / 'o'}"]),
        ]
        for name, cmd in cases:
            rc, mib = peak(cmd)
            print(f"{a.rows} rows  {name:<60} peak RSS {mib:7.1f} MiB  (exit {rc})")


if __name__ == "__main__":
    main()
