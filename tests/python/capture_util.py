"""Helpers shared by the test_capture_*.py suites (streaming CSV reads: the
thread test writes millions of rows)."""
import csv
import re
from pathlib import Path

from conftest import DUMP_HEADER, dump_files, parse_attr, process_dirs


def iter_rows(path):
    with open(path, newline="") as f:
        r = csv.reader(f)
        assert next(r) == DUMP_HEADER
        for rec in r:
            assert len(rec) == 12, rec
            yield rec


def size_of(attr_text):
    m = re.search(r"size:(\d+)", attr_text)
    return int(m.group(1)) if m else None


def alloc_id(attr_text):
    m = re.search(r"allocation_id:(\d+)", attr_text)
    return int(m.group(1)) if m else None


def first_chunk_in_place(capture):
    """Index of the first chunk written to its place in a capture file
    (format 4: a thread's first chunk index is its staging slot, magic
    "STGE"; the chunks it fills are copied after it, magic "CHNK")."""
    with open(capture, "rb") as f:
        i = 0
        while True:
            f.seek(4096 + i * 65536)
            magic = f.read(4)
            assert len(magic) == 4, f"{capture}: no chunk in place"
            if magic == b"CHNK":
                return i
            i += 1


def only_dump(procdir):
    files = dump_files(procdir)
    assert len(files) == 1, files
    return files[0]


def sizes(procdir, event="MALLOC"):
    """Sizes of the rows of one event kind in the process folder's dump."""
    return [size_of(rec[9]) for rec in iter_rows(only_dump(procdir)) if rec[1] == event]


def summary_list(stdout):
    """The end-of-run summary as a list of (pid, lines), one per capture."""
    out = []
    for line in stdout.splitlines():
        m = re.match(r"msmemscope: pid (\d+) \(", line)
        if m:
            out.append((int(m.group(1)), []))
        if out:
            out[-1][1].append(line)
    return out


def summary_blocks(stdout):
    """{pid: lines} of the summary; for a pid that exec'ed, its last capture."""
    return {pid: lines for pid, lines in summary_list(stdout)}


def assert_nothing_lost(stdout):
    lines = [l for l in stdout.splitlines() if l.strip().startswith("events:")]
    assert lines, stdout
    for l in lines:
        assert ", dropped: 0" in l and "late" not in l and "corrupt" not in l, l
