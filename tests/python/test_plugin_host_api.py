"""The host API a third-party analyzer is given (sdk/include/msmemscope/abi.h)
stays safe to use as documented: an analyzer that calls add_attr and then
reads the event it was given, in the same on_event, reads the event as it was
given (before, the host changed and moved the entries the event's views
point into: a replaced value read through its old view, entries moved by a
growing list read from freed memory). Its changes reach the analyzers after
it and the sinks. Fixture: tests/fixtures/api_plugins/attr_views.cpp."""
import csv
import re

from conftest import BUILD, DUMP_HEADER, dump_files, process_dirs

FIXTURES = BUILD / "tests" / "lib" / "api_plugins"
PROGRAM = ["/usr/bin/python3", "-c", "blocks = [bytearray(4096 * (i + 1)) for i in range(20)]"]


def attrs(field):
    """'{k:v,...}' -> dict (values here have no commas)."""
    return dict(kv.split(":", 1) for kv in field.strip("{}").split(",") if kv)


def test_an_analyzer_reads_its_event_unchanged_after_add_attr(cli, tmp_path):
    out = tmp_path / "out"
    # decompose runs first and gives every MALLOC an owner: the entry the
    # fixture then replaces, with eight more behind it.
    p = cli(["--plugin-path", str(FIXTURES), "--device=cpu", "--events=alloc,free",
             "--analysis=decompose,attr_views", "--output", str(out), "--"] + PROGRAM, cwd=tmp_path, check_rc=0)
    m = re.search(r"^attr_views: (\d+) event\(s\) checked, (\d+) with entries changed under add_attr(.*)$",
                  p.stdout, re.M)
    assert m, p.stdout[-3000:]
    checked, changed = int(m.group(1)), int(m.group(2))
    assert changed == 0, m.group(0)[:2000]
    # What the sinks wrote: every MALLOC row has the fixture's entries, the
    # owner replaced (one owner entry, not two).
    procdir, = process_dirs(out)
    dump, = dump_files(procdir)
    mallocs = 0
    with open(dump, newline="") as f:
        r = csv.reader(f)
        assert next(r) == DUMP_HEADER
        for rec in r:
            if rec[1] != "MALLOC":
                continue
            mallocs += 1
            a = attrs(rec[9])
            assert a["owner"] == f"attr_views_{rec[0]}", rec
            assert rec[9].count("owner:") == 1, rec
            assert [a[f"view_{i}"] for i in range(8)] == [str(i) for i in range(8)], rec
    assert mallocs == checked > 1000, (mallocs, checked)
