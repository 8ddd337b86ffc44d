"""The command line as msMemScope's current parser reads it (COMPAT §8): our
options anywhere before '--' (also after the program name), short options and
upstream's names, and --events as the set of rows WRITTEN (Dump::ShouldDumpEvent):
frees are still collected for the analyses when --events=alloc writes none."""
import glob
import json
import re
import sqlite3

from conftest import TEST_BIN, dump_files, process_dirs, read_dump, run_cli

LEAK = TEST_BIN / "analyzers_host_leak"


def leak_lines(stdout):
    return [l for l in stdout.splitlines() if ("leak" in l.lower() or "still allocated" in l) and " pid " not in l]


def test_options_after_the_program_name_are_ours(tmp_path):
    # msmemscope bash train.sh --device=cpu --level=kernel: getopt permutes argv
    p = run_cli([TEST_BIN / "known_allocs", "7", "--dev=cpu", "--events=alloc,free", "--analysis=none",
                 "-o", tmp_path / "out"], cwd=tmp_path, check_rc=7)
    d = process_dirs(tmp_path / "out")
    assert len(d) == 1 and d[0].name.endswith("_cpu"), p.stderr


def test_an_unknown_option_after_the_program_says_to_use_dashes(tmp_path):
    p = run_cli([TEST_BIN / "known_allocs", "--lr=0.1", "--device=cpu"], cwd=tmp_path, check_rc=2)
    assert p.stderr == ("msmemscope: error: unknown option '--lr'; put the program's own options after '--' "
                        "(msmemscope [options] -- <prog> [args])\n")
    # after '--' the same word is the program's
    p = run_cli(["--device=cpu", "--analysis=", f"--output={tmp_path}/o", "--", TEST_BIN / "known_allocs", "0",
                 "--lr=0.1"], cwd=tmp_path)
    assert p.returncode == 0, p.stderr


def test_prog_dash_h_prints_help_and_capital_v_the_version(tmp_path):
    p = run_cli(["bash", "train.sh", "-h"], cwd=tmp_path, check_rc=0)
    assert p.stdout.startswith("Description:\n") and "\nUsage:\n" in p.stdout
    assert "--data-format" not in p.stdout  # the hidden alias, as upstream
    p = run_cli(["-V"], cwd=tmp_path, check_rc=0)
    assert p.stdout.startswith("msmemscope ")
    p = run_cli(["-v"], cwd=tmp_path, check_rc=2)  # -v is --verbose now; nothing to run
    assert "no program given" in p.stderr


def test_ambiguous_prefix_and_repeated_option(tmp_path):
    p = run_cli(["--de=cpu", "--", "/bin/true"], cwd=tmp_path, check_rc=2)
    assert p.stderr == "msmemscope: error: option '--de' is ambiguous (could be --debug, --device)\n"
    p = run_cli(["--device=npu", "--device=cpu", "--analysis=", f"--output={tmp_path}/o", "--", "/bin/true"],
                cwd=tmp_path, check_rc=0)
    assert process_dirs(tmp_path / "o")[0].name.endswith("_cpu")


def test_oom_zero_warns_and_none_mixed_warns(tmp_path):
    p = run_cli(["--device=cpu", "--analysis=oom:0", "--events=alloc,none", f"--output={tmp_path}/o", "--",
                 "/bin/true"], cwd=tmp_path, check_rc=0)
    assert ("msmemscope: warning: --analysis: invalid OOM top-K value '0' (allowed: 1..1000); using the default 10\n"
            in p.stderr)
    assert "msmemscope: warning: --events: 'none' mixed with other event types; no events are written\n" in p.stderr


def test_events_alloc_writes_no_free_rows_but_leaks_still_sees_the_frees(tmp_path):
    both = run_cli(["--device=cpu", "--events=alloc,free", "--analysis=leaks", f"--output={tmp_path}/both", "--",
                    LEAK], cwd=tmp_path, check_rc=0)
    only = run_cli(["--device=cpu", "--events=alloc", "--analysis=leaks", f"--output={tmp_path}/alloc", "--",
                    LEAK], cwd=tmp_path, check_rc=0)
    rows_both = read_dump(dump_files(process_dirs(tmp_path / "both")[0])[0])
    rows_alloc = read_dump(dump_files(process_dirs(tmp_path / "alloc")[0])[0])
    frees = [r for r in rows_both if r["Event"] == "FREE"]
    assert frees, "the program frees most of its blocks"
    assert [r for r in rows_alloc if r["Event"] == "FREE"] == []
    assert (len([r for r in rows_alloc if r["Event"] == "MALLOC"]) ==
            len([r for r in rows_both if r["Event"] == "MALLOC"]))
    # the leak report is the same: frees were collected, only not written
    assert leak_lines(only.stdout) == leak_lines(both.stdout) and leak_lines(both.stdout)


def test_db_sink_writes_only_the_listed_events_too(tmp_path):
    run_cli(["--device=cpu", "--events=free", "--analysis=", "--format=db", f"--output={tmp_path}/o", "--", LEAK],
            cwd=tmp_path, check_rc=0)
    db = glob.glob(f"{tmp_path}/o/*/device_cpu/dump/memscope_dump_*.db")[0]
    kinds = dict(sqlite3.connect(db).execute("select Event, count(*) from memscope_dump group by Event").fetchall())
    assert kinds.get("FREE", 0) > 0 and "MALLOC" not in kinds, kinds
    run_cli(["--device=cpu", "--events=none", "--analysis=none", "--format=db", f"--output={tmp_path}/n", "--",
             LEAK], cwd=tmp_path, check_rc=0)
    db = glob.glob(f"{tmp_path}/n/*/device_cpu/dump/memscope_dump_*.db")[0]
    kinds = dict(sqlite3.connect(db).execute("select Event, count(*) from memscope_dump group by Event").fetchall())
    assert "MALLOC" not in kinds and "FREE" not in kinds, kinds


def test_output_path_character_rules(tmp_path):
    p = run_cli(["--device=cpu", "--output=out?", "--", "/bin/true"], cwd=tmp_path, check_rc=2)
    assert p.stderr == ("msmemscope: error: --output: invalid character '?' in 'out?' (allowed: letters, digits, '.', "
                        "'/', '_', '-', '~', spaces, Chinese characters)\n")
    p = run_cli(["--device=cpu", "-o", " ", "--", "/bin/true"], cwd=tmp_path, check_rc=2)
    assert p.stderr == "msmemscope: error: -o: empty value (allowed: a folder path)\n"


def test_npu_runs_are_named_ascend_and_a_replay_keeps_the_recorded_devices(tmp_path):
    run_cli(["--device=cpu,npu:0", "--analysis=", "--save-capture=true", f"--output={tmp_path}/rec", "--",
             TEST_BIN / "known_allocs", "0"], cwd=tmp_path, check_rc=0)
    (rec,) = process_dirs(tmp_path / "rec")
    assert rec.name.endswith("_ascend"), rec.name  # msMemScope's name whenever an npu is collected
    (capture,) = rec.glob("capture_*.msmcap")
    # no --device: the devices come from the capture (its host rows), not from the default npu
    p = run_cli([f"--replay={capture}", "--analysis=", f"--output={tmp_path}/rep"], cwd=tmp_path, check_rc=0)
    (rep,) = process_dirs(tmp_path / "rep")
    assert rep.name.endswith("_cpu"), rep.name
    assert read_dump(dump_files(rep)[0]) and "events: 0," not in p.stdout
    assert json.loads((rep / "config.json").read_text())["device"] == ["cpu"]


def test_compare_writes_under_output_compare_with_its_log(tmp_path):
    for name in ("a", "b"):
        run_cli(["--device=cpu", "--analysis=", f"--output={tmp_path}/{name}", "--", TEST_BIN / "known_allocs", "0"],
                cwd=tmp_path, check_rc=0)
    p = run_cli(["--compare", f"-i{tmp_path}/a,{tmp_path}/b", "-o", tmp_path / "cmp"], cwd=tmp_path, check_rc=0)
    (csv_file,) = (tmp_path / "cmp" / "compare").glob("memory_compare_*.csv")
    assert csv_file.read_text().startswith(",,,Base,Compare\n")
    (log,) = (tmp_path / "cmp" / "compare" / "msmemscope_logs").glob("msmemscope_*.log")
    text = log.read_text()
    assert "[INFO]  Start to compare memory data.\n" in text
    assert "[INFO]  The memory comparison has been completed in a total time of " in text, p.stdout


def compare_log_messages(output):
    """The --compare log (<output>/compare/msmemscope_logs/msmemscope_<ts>.log,
    upstream's format) as "[LEVEL] text", the time left out."""
    (log,) = (output / "compare" / "msmemscope_logs").glob("msmemscope_*.log")
    return [re.sub(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d ", "", l) for l in log.read_text().splitlines()]


def warnings_said(stderr):
    """The warnings on stderr as the log writes them ("[WARN]  text")."""
    prefix = "msmemscope: warning: "
    return [f"[WARN]  {l[len(prefix):]}" for l in stderr.splitlines() if l.startswith(prefix)]


def test_the_compare_log_says_what_the_console_said(tmp_path):
    """Everything the compare printed is in its log, in the console's words
    and order (the warnings said before it, e.g. as root, first)."""
    for name in ("a", "b"):
        run_cli(["--device=cpu", "--analysis=", f"--output={tmp_path}/{name}", "--", TEST_BIN / "known_allocs", "0"],
                cwd=tmp_path, check_rc=0)
    p = run_cli(["--compare", f"-i{tmp_path}/a,{tmp_path}/b", "-o", tmp_path / "cmp"], cwd=tmp_path, check_rc=0)
    said = p.stdout.splitlines()
    assert len(said) == 2 and said[-1].startswith("msmemscope: compare: ") and " row(s) written to " in said[-1], said
    log = compare_log_messages(tmp_path / "cmp")
    assert log[:-1] == warnings_said(p.stderr) + ["[INFO]  Start to compare memory data."] + \
        [f"[INFO]  {l}" for l in said], log
    assert log[-1].startswith("[INFO]  The memory comparison has been completed in a total time of "), log

    # a failure: the error as stderr said it, then upstream's closing line
    (tmp_path / "junk.csv").write_text("x,y\n")
    p = run_cli(["--compare", f"-i{tmp_path}/a,{tmp_path}/junk.csv", "-o", tmp_path / "bad"], cwd=tmp_path,
                check_rc=2)
    err = p.stderr.splitlines()[-1]
    assert err.startswith(f"msmemscope: error: --input: {tmp_path}/junk.csv:1: not a memscope_dump CSV"), p.stderr
    assert compare_log_messages(tmp_path / "bad") == warnings_said(p.stderr) + [
        "[INFO]  Start to compare memory data.", f"[ERROR] {err[len('msmemscope: error: '):]}",
        "[ERROR] Memory comparison failed!"]
