"""Issue 29 items 6 and 9: every option that names an input file refuses a
FIFO, a pipe or a device with one clear error before opening it (a FIFO used
to hang the tool, `--config=<(yes ...)` was read without bound); `--output`
refuses control characters; text from outside (program arguments, file
names) reaches the terminal with its control characters escaped; JSON
outputs stay valid UTF-8 whatever bytes a program path holds."""
import json
import os
import subprocess

import pytest

from conftest import CLI, process_dirs

ARGS = ["--device=cpu", "--events=alloc,free", "--analysis="]


def run(args, cwd, pass_fds=(), timeout=60):
    e = dict(os.environ)
    e.pop("LD_PRELOAD", None)
    return subprocess.run([os.fsencode(str(CLI))] + [a if isinstance(a, bytes) else os.fsencode(str(a)) for a in args],
                          cwd=str(cwd), env=e, capture_output=True, timeout=timeout, pass_fds=pass_fds)


def last_error(p):
    return p.stderr.decode("utf-8", "strict").strip().splitlines()[-1]


@pytest.fixture
def fifo(tmp_path):
    f = tmp_path / "in.fifo"
    os.mkfifo(f)
    return f


@pytest.mark.parametrize("option,extra,give", [
    ("--config", ["--", "/bin/true"], "a file"),
    ("--replay", [], "a file"),
    ("--suppress", ["--", "/bin/true"], "a file"),
])
def test_a_fifo_is_refused_for_every_file_option(tmp_path, fifo, option, extra, give):
    # Nothing writes into the FIFO: opening it for reading would block forever.
    p = run(ARGS + [f"{option}={fifo}", f"--output={tmp_path}/o"] + extra, tmp_path)
    assert p.returncode == 2, p.stderr
    assert last_error(p) == f"msmemscope: error: {option}: '{fifo}' is not a regular file (a FIFO); give {give}"
    assert not (tmp_path / "o").exists()


def test_a_fifo_is_refused_as_analyze_and_compare_input(tmp_path, fifo):
    p = run([f"--analyze=leaks", f"--input={fifo}", f"--output={tmp_path}/o"], tmp_path)
    assert p.returncode == 2, p.stderr
    assert last_error(p) == (f"msmemscope: error: --input: '{fifo}' is not a regular file (a FIFO); "
                             "give a file or a folder")
    real = tmp_path / "dump.csv"
    real.write_text("x\n")
    p = run(["--compare", f"--input={real},{fifo}", f"--output={tmp_path}/o"], tmp_path)
    assert p.returncode == 2, p.stderr
    assert last_error(p) == (f"msmemscope: error: --input: '{fifo}' is not a regular file (a FIFO); "
                             "give a file or a folder")
    # A device: named as one (it used to be read as a dump).
    p = run([f"--analyze=leaks", "--input=/dev/zero", f"--output={tmp_path}/o"], tmp_path)
    assert p.returncode == 2, p.stderr
    assert last_error(p) == ("msmemscope: error: --input: '/dev/zero' is not a regular file (a character device); "
                             "give a file or a folder")


def test_a_fifo_named_in_a_profile_is_refused(tmp_path, fifo):
    prof = tmp_path / "p.yaml"
    prof.write_text(f"replay: {fifo.name}\n")
    p = run([f"--config={prof}", f"--output={tmp_path}/o"], tmp_path)
    assert p.returncode == 2, p.stderr
    assert last_error(p) == f"msmemscope: error: {prof}:1: replay: '{fifo}' is not a regular file (a FIFO); give a file"


def test_config_from_a_pipe_is_refused_not_read_without_bound(tmp_path):
    # `--config=<(yes a: b)`: a pipe whose writer never ends.
    r, w = os.pipe()
    try:
        os.set_blocking(w, False)
        try:
            while True:
                os.write(w, b"a: b\n" * 4096)
        except BlockingIOError:
            pass
        p = run([f"--config=/dev/fd/{r}", f"--output={tmp_path}/o", "--", "/bin/true"], tmp_path, pass_fds=(r,))
    finally:
        os.close(r)
        os.close(w)
    assert p.returncode == 2, p.stderr
    assert last_error(p) == f"msmemscope: error: --config: '/dev/fd/{r}' is not a regular file (a FIFO); give a file"


def test_a_regular_profile_still_loads(tmp_path):
    prof = tmp_path / "p.yaml"
    prof.write_text("data_format: bogus\n")
    p = run([f"--config={prof}", f"--output={tmp_path}/o", "--", "/bin/true"], tmp_path)
    assert p.returncode == 2
    assert last_error(p) == f"msmemscope: error: {prof}:1: data_format: invalid value 'bogus' (allowed: csv, db)"


@pytest.mark.parametrize("ch,shown", [("\n", "\\n"), ("\r", "\\r"), ("\t", "\\t"), ("\v", "\\x0b"), ("\f", "\\x0c"),
                                      ("\x1b", "\\x1b")])
def test_output_refuses_control_characters(tmp_path, ch, shown):
    p = run(ARGS + [f"-o", f"out{ch}dir", "--", "/bin/true"], tmp_path)
    assert p.returncode == 2, p.stderr
    assert p.stderr.decode() == (f"msmemscope: error: -o: invalid character '{shown}' in 'out{shown}dir' (allowed: "
                                 "letters, digits, '.', '/', '_', '-', '~', spaces, Chinese characters)\n")
    assert os.listdir(tmp_path) == []


def test_escape_sequences_in_values_never_reach_the_terminal(tmp_path):
    p = run(ARGS + ["--data-format=\x1b]0;pwned\x07", "--", "/bin/true"], tmp_path)
    assert p.returncode == 2
    assert b"\x1b" not in p.stderr and b"\x07" not in p.stderr
    assert last_error(p) == "msmemscope: error: --data-format: invalid value '\\x1b]0;pwned\\x07' (allowed: csv, db)"


def test_program_arguments_and_paths_shown_escaped_and_json_stays_utf8(tmp_path):
    prog = os.path.join(os.fsencode(str(tmp_path)), b"tr\xffue")
    with open("/bin/true", "rb") as src, open(prog, "wb") as dst:
        dst.write(src.read())
    os.chmod(prog, 0o755)
    p = run(ARGS + ["--sinks=trace", f"--output={tmp_path}/o", "--", prog, b"\x1b[31mred\x9b"], tmp_path)
    assert p.returncode == 0, p.stderr
    assert b"\x1b" not in p.stdout and b"\xff" not in p.stdout, p.stdout
    line = [l for l in p.stdout.decode("utf-8", "strict").splitlines() if l.startswith("msmemscope: pid ")][0]
    assert f"({tmp_path}/tr\\xffue \\x1b[31mred\\x9b) exited with code 0" in line, line
    d = process_dirs(tmp_path / "o")[0]
    config = (d / "config.json").read_bytes()
    text = config.decode("utf-8", "strict")  # valid UTF-8: the byte 0xff is written as U+00FF
    assert "tr\u00ffue" in json.dumps(json.loads(text), ensure_ascii=False)
    for trace in d.glob("trace_*.json"):
        trace.read_bytes().decode("utf-8", "strict")
        json.loads(trace.read_text())


def test_a_fifo_given_to_the_leaks_analyzer_directly_is_refused(tmp_path, fifo):
    # --plugin-option passes the path to the plugin without --suppress's check:
    # the analyzer itself opens it without blocking and refuses it.
    p = run(ARGS[:2] + ["--analysis=leaks", f"--plugin-option=leaks.suppress={fifo}", f"--output={tmp_path}/o",
                        "--", "/bin/true"], tmp_path)
    assert (f"[msmemscope] error: leaks: the suppression file '{fifo}' is not a regular file"
            in p.stderr.decode().splitlines()), p.stderr
