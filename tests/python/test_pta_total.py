"""A framework pool row's Attr `total`, the pool's bytes after the event.
The Python bindings send it in the capture record's aux1, as total + 1
(framework/common/capture_format.h, kGeneric). The Attr text is interned,
and a running total in it was a new string for nearly every row (~1,500
a training step). The host turns aux1 into the row's `total`. A total
written in the Attr text, as older bindings and other collectors do, is
read as before."""
import textwrap

from conftest import parse_attr, process_dirs, read_dump, run_cli, dump_files

TORCH_PROGRAM = textwrap.dedent("""
    import torch
    keep = []
    for i in range(40):
        t = torch.empty(1000 + 7 * i, dtype=torch.uint8)
        if i % 3:
            keep.append(t)
        del t
    keep.clear()
""")


def pta_rows(proc):
    [dump] = dump_files(proc)
    return [r for r in read_dump(dump) if r["Event Type"] == "PTA"]


def test_pta_rows_total_is_the_pools_bytes_after_each_row(tmp_path):
    (tmp_path / "prog.py").write_text(TORCH_PROGRAM)
    run_cli(["--device=cpu", "--events=alloc,free", "--analysis=none", f"--output={tmp_path}/out", "--",
             "/usr/bin/python3", tmp_path / "prog.py"], tmp_path, check_rc=0)
    [proc] = process_dirs(tmp_path / "out")
    rows = pta_rows(proc)
    sizes = {1000 + 7 * i for i in range(40)}
    mine = [r for r in rows if int(parse_attr(r["Attr"])["size"]) in sizes]
    assert len(mine) == 80, [r["Attr"] for r in rows]
    live, total = {}, None
    for r in rows:
        a = parse_attr(r["Attr"])
        # the pool's bytes as the bindings counted them, where the keys of
        # every memory row are (not a second "total", not a missing one)
        assert list(a)[:5] == ["allocation_id", "addr", "size", "total", "used"], r["Attr"]
        if r["Event"] == "MALLOC":
            live[a["addr"]] = int(a["size"])
        else:
            live.pop(a["addr"])
        total = int(a["total"])
        # collection ran from the start: what the host counted is the same
        assert total == sum(live.values()) == int(a["used"]), (r["Attr"], sum(live.values()))
    assert total == 0


API_PROGRAM = textwrap.dedent("""
    import msmemscope
    from msmemscope._shared import ext
    EV, T, CPU = ext.EV, ext.T, ext.DEV["CPU"]
    # as the bindings write it now: the total in aux1, + 1
    ext.event(EV["MALLOC"], T["PTA"], CPU, -1, 0x10000, 64, 0, 4097, "", "owner:PTA@weight")
    # as a total in the Attr text (older bindings, other collectors)
    ext.event(EV["MALLOC"], T["PTA"], CPU, -1, 0x20000, 32, 0, 0, "", "owner:PTA@gradient,total:8192")
    # aux1 = 1: a total of 0
    ext.event(EV["FREE"], T["PTA"], CPU, -1, 0x10000, 0, 0, 1, "", "")
""")


def test_total_from_aux1_and_from_the_attr_text(tmp_path):
    (tmp_path / "prog.py").write_text(API_PROGRAM)
    run_cli(["--device=cpu", "--events=alloc,free", "--analysis=none", f"--output={tmp_path}/out", "--",
             "/usr/bin/python3", tmp_path / "prog.py"], tmp_path, check_rc=0)
    [proc] = process_dirs(tmp_path / "out")
    # (the blocks still live at the end also get the package's shadow FREE)
    got = [(r["Event"], parse_attr(r["Attr"])) for r in pta_rows(proc) if "shadow" not in r["Attr"]]
    assert [(e, a["addr"], a["total"], a.get("owner")) for e, a in got] == [
        ("MALLOC", "0x0000000000010000", "4096", "PTA@weight"),
        ("MALLOC", "0x0000000000020000", "8192", "PTA@gradient"),
        ("FREE", "0x0000000000010000", "0", None),
    ], got
    # one total each, in the place of a memory row's total
    for _, a in got:
        assert list(a)[:4] == ["allocation_id", "addr", "size", "total"], a
