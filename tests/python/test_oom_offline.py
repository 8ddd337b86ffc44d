"""`msmemscope --analyze=oom` of a live run's dump with an out-of-memory
failure (a C program whose malloc fails under the RLIMIT_AS it set) says
what the run said of the failure, and nothing it did not do. Before: the
offline end-of-run line said "1 detail dump(s) written (OOM_DETAIL rows)"
though an offline analysis writes no row (it runs with no sink), and the
warning named the dump's row ("OOM_Trigger of N bytes failed") instead of
the failing call the run named (malloc, from the row's Attr func)."""
import shutil

import pytest

from conftest import TEST_BIN, dump_files, process_dirs, read_dump, run_cli


def oom_warnings(stderr):
    return [l for l in stderr.splitlines() if l.startswith("[msmemscope] warning: oom:")]


@pytest.fixture(scope="module")
def live(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("oom_live")
    p = run_cli(["--device=cpu", "--call-stack=c:16", "--analysis=oom:3", "--sinks=csv,db", "--output=out", "--",
                 TEST_BIN / "analyzers_oom"], tmp, check_rc=3)
    assert "malloc failed as expected" in p.stdout
    [folder] = process_dirs(tmp / "out")
    return p, folder


@pytest.mark.parametrize("ext", ["csv", "db"])
def test_analyze_oom_of_a_dump_says_the_failing_call_and_writes_nothing(tmp_path, live, ext):
    p, folder = live
    assert "oom: 1 out-of-memory failure(s), 1 detail dump(s) written (OOM_DETAIL rows)" in p.stdout
    [said] = oom_warnings(p.stderr)
    assert said.startswith("[msmemscope] warning: oom: malloc of 68719476736 bytes failed on device cpu with "), said
    [csv] = dump_files(folder)
    rows = len(read_dump(csv))
    dump = tmp_path / f"memscope_dump_copy.{ext}"
    shutil.copyfile(csv.with_suffix("." + ext), dump)
    before = dump.read_bytes()

    off = run_cli(["--analyze=oom", f"--input={dump}", "--output=offline_out"], tmp_path, check_rc=0)
    assert off.stdout.splitlines() == [f"msmemscope: analysed {dump} ({rows} rows) with oom",
                                       "oom: 1 out-of-memory failure(s)"], off.stdout
    # the failing call as the run named it, with the same numbers
    assert oom_warnings(off.stderr) == [said], off.stderr
    # nothing written: not into the dump, nor an output folder
    assert dump.read_bytes() == before
    assert not (tmp_path / "offline_out").exists()


@pytest.fixture(scope="module")
def live_without_oom(tmp_path_factory):
    """The same failure recorded with the default analysis (leaks): the
    dump holds the failure as its OOM_Snapshot row alone, as upstream's."""
    tmp = tmp_path_factory.mktemp("oom_live_default")
    p = run_cli(["--device=cpu", "--sinks=csv,db", "--output=out", "--", TEST_BIN / "analyzers_oom"], tmp,
                check_rc=3)
    assert "malloc failed as expected" in p.stdout
    [folder] = process_dirs(tmp / "out")
    return p, folder


@pytest.mark.parametrize("ext", ["csv", "db"])
def test_analyze_oom_of_a_default_dump_tells_the_failure_from_its_snapshot(tmp_path, live_without_oom, ext):
    # Before: the dump has no OOM_Trigger row, and `--analyze=oom` said
    # nothing of the failure, as if the run had hit none.
    p, folder = live_without_oom
    [said] = oom_warnings(p.stderr)
    prefix = "[msmemscope] warning: oom: malloc of 68719476736 bytes failed on device cpu with "
    assert said.startswith(prefix), said
    [csv] = dump_files(folder)
    rows = read_dump(csv)
    assert [r["Name"] for r in rows if r["Name"].startswith("OOM_")] == ["OOM_Snapshot"], rows
    dump = tmp_path / f"memscope_dump_copy.{ext}"
    shutil.copyfile(csv.with_suffix("." + ext), dump)

    off = run_cli(["--analyze=oom", f"--input={dump}"], tmp_path, check_rc=0)
    assert off.stdout.splitlines() == [
        f"msmemscope: analysed {dump} ({len(rows)} rows) with oom",
        "oom: 1 out-of-memory failure(s), 1 of them known from an OOM_Snapshot row alone: the dump was recorded "
        "without --analysis=oom, so it does not say which call failed nor for how many bytes"], off.stdout
    # the device and the allocated bytes the run said; the call and its size it cannot
    allocated = said[len(prefix):]
    assert oom_warnings(off.stderr) == [f"[msmemscope] warning: oom: an allocation failed on device cpu with "
                                        f"{allocated}"], off.stderr
