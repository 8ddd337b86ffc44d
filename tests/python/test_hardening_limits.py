"""Issue 16 §1, §5: resource limits and the tool's own failures never cost the
profiled program; the exit status says when an output is incomplete (70);
captures and thread chunks are given back as soon as they are read."""
import contextlib
import os
import re
import resource
import subprocess
import struct
import time

import pytest

from capture_util import first_chunk_in_place
from conftest import CLI, process_dirs

ARGS = ["--device=cpu", "--events=alloc,free", "--analysis="]
# Offset of CaptureHeader::chunks_taken (framework/common/capture_format.h, format 2).
CHUNKS_TAKEN_OFFSET = 1632


def run_limited(args, cwd, limits, umask=None, timeout=300):
    def pre():
        for res, val in limits:
            resource.setrlimit(res, (val, val))
        if umask is not None:
            os.umask(umask)
    env = dict(os.environ)
    env.pop("LD_PRELOAD", None)
    return subprocess.run([str(CLI)] + [str(a) for a in args], cwd=str(cwd), env=env, capture_output=True,
                          text=True, timeout=timeout, preexec_fn=pre)


@contextlib.contextmanager
def mounted_tmpfs(path, options):
    """A small tmpfs at path for the test's --output (root only: mount)."""
    path.mkdir()
    if os.geteuid() != 0 or subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(path)],
                                           capture_output=True).returncode != 0:
        pytest.skip(f"needs root to mount a tmpfs ({options})")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)])


def test_file_size_limit_never_kills_the_program(test_bin, tmp_path):
    # ulimit -f 2000 (2 MB): the capture (about 5 MB) and the CSV (tens of MB)
    # both outgrow it. The program must end normally; the host says what was
    # lost and why, and exits with 70.
    limit = 2000 * 1024
    p = run_limited(ARGS + [f"--output={tmp_path}/out", "--", test_bin / "sinks_alloc_loop", 400000], tmp_path,
                    [(resource.RLIMIT_FSIZE, limit)])
    assert p.returncode == 70, p.stdout + p.stderr
    assert re.search(r"msmemscope: pid \d+ \(\S*sinks_alloc_loop 400000\) exited with code 0", p.stdout), p.stdout
    assert ("[msmemscope] warning: collection turned off: the capture file reached the file-size limit "
            "(ulimit -f)") in p.stderr
    lines = [l for l in p.stderr.splitlines() if l.startswith("msmemscope: error:")]
    assert any(re.fullmatch(r"msmemscope: error: pid \d+: output incomplete: \d+ event\(s\) could not be "
                            r"recorded \(the capture reached the file-size limit, ulimit -f\)", l) for l in lines), lines
    # The CSV sink met the same limit: EFBIG, reported (the host was not killed by SIGXFSZ).
    # (the sink's own message comes with it: plugin ABI 1.1 last_error)
    assert any(re.fullmatch(r"msmemscope: error: pid \d+: output incomplete: plugin 'csv': failed on event \d+: "
                            r"cannot write \S+\.csv: File too large; "
                            r"continuing without it \(memscope_dump_\d+\.csv reached the file-size limit, "
                            r"ulimit -f\)", l) for l in lines), lines
    dropped = int(re.search(r"dropped: (\d+)", p.stdout).group(1))
    events = int(re.search(r"events: (\d+)", p.stdout).group(1))
    # Every event is either written or counted as dropped (about 400000
    # pairs; without a limit the same run has 799873 events).
    assert events + dropped >= 799000, (events, dropped)
    assert dropped > 0


def test_tiny_file_size_limit_leaves_the_program_alone(test_bin, tmp_path):
    # Smaller than one chunk: no capture at all, said; the program runs to
    # its end, and the run is 70: a process was not recorded
    # (test_hardening_exit_status.py).
    p = run_limited(ARGS + [f"--output={tmp_path}/out", "--", test_bin / "sinks_alloc_loop", 1000], tmp_path,
                    [(resource.RLIMIT_FSIZE, 16384)])
    assert "the file-size limit, ulimit -f, is smaller than one capture chunk" in p.stderr, p.stderr
    assert p.returncode == 70, p.stdout + p.stderr


def session_kib(d):
    total = 0
    for n in os.listdir(d):
        try:
            total += os.stat(os.path.join(d, n)).st_blocks // 2
        except FileNotFoundError:
            pass
    return total


def test_captures_go_as_soon_as_their_process_is_read(tmp_path):
    # A launcher running 30 short processes (60 images with their execs), then
    # waiting: the session folder holds the disk of the processes alive, not
    # of every process ever run (32 MiB each: 1.9 GiB before).
    script = 'for i in $(seq 30); do /bin/true; done; echo "dir=$MSMEMSCOPE_SESSION"; read x'
    env = dict(os.environ)
    env.pop("LD_PRELOAD", None)
    p = subprocess.Popen([str(CLI)] + ARGS + [f"--output={tmp_path}/out", "--", "/bin/sh", "-c", script],
                         cwd=tmp_path, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        line = p.stdout.readline()
        assert line.startswith("dir="), line
        d = line.strip()[4:]
        deadline = time.monotonic() + 60  # a bound, not a timing: it ends as soon as the host caught up
        kib = session_kib(d)
        while kib > 2 * 33 * 1024 and time.monotonic() < deadline:
            time.sleep(0.05)
            kib = session_kib(d)
        p.stdin.write("\n")
        p.stdin.flush()
        out, _ = p.communicate(timeout=120)
    finally:
        if p.poll() is None:
            p.kill()
    assert p.returncode == 0, out
    assert kib <= 2 * 33 * 1024, kib  # the shell and the $(seq) subshell at most
    assert len(process_dirs(tmp_path / "out")) >= 31  # every process still has its output


def test_short_threads_reuse_their_chunks(test_bin, tmp_path):
    # 5,000 threads one after another, 10 malloc/free pairs each: their
    # chunks are handed on, not one sealed 64 KiB chunk per thread.
    p = run_limited(ARGS + ["--save-capture=true", f"--output={tmp_path}/out", "--", test_bin / "short_threads",
                            5000, 10], tmp_path, [])
    assert p.returncode == 0, p.stdout + p.stderr
    d = process_dirs(tmp_path / "out")
    assert len(d) == 1
    cap = next(d[0].glob("*.msmcap"))
    with open(cap, "rb") as f:
        f.seek(CHUNKS_TAKEN_OFFSET)
        taken = struct.unpack("<Q", f.read(8))[0]
    assert taken < 100, taken  # was 5,000+ (320 MiB)
    assert cap.stat().st_size <= 4096 + 32 * 1024 * 1024
    # Nothing lost: every pair is in the dump, each under its own thread.
    rows = [l.split(",") for l in next((d[0] / "device_cpu" / "dump").glob("memscope_dump_*.csv")).open()]
    mallocs = [r for r in rows if len(r) > 6 and r[1] == "MALLOC" and "size:4242" in ",".join(r)]
    assert len(mallocs) == 50000
    assert len({r[6] for r in mallocs}) > 1000  # thread ids kept (tids are reused by the kernel)
    assert "dropped: 0" in p.stdout


def test_replay_of_a_corrupt_capture_exits_70(cli, test_bin, tmp_path):
    cli(ARGS + ["--save-capture=true", f"--output={tmp_path}/out", "--", test_bin / "short_threads", 3, 100],
        tmp_path, check_rc=0)
    cap = next(process_dirs(tmp_path / "out")[0].glob("*.msmcap"))
    first = first_chunk_in_place(cap)
    at = 4096 + first * 65536 + 32 + 10  # inside the first chunk's records
    with open(cap, "r+b") as f:
        f.seek(at)
        b = f.read(1)
        f.seek(at)
        f.write(bytes([b[0] ^ 0x40]))
    p = cli(ARGS + [f"--replay={cap}", f"--output={tmp_path}/again"], tmp_path)
    assert p.returncode == 70, p.stdout + p.stderr
    errs = [l for l in p.stderr.splitlines() if l.startswith("msmemscope: error:")]
    assert errs == [f"msmemscope: error: --replay: {cap}: corrupt capture: 1 damaged part(s) skipped "
                    f"(first: checksum mismatch in chunk {first} at offset 0)"], p.stderr


def test_html_report_over_the_file_size_limit_is_said(test_bin, tmp_path):
    # The html sink renders its page straight into the file, in 256 KiB
    # pieces: a page of ~700 KiB (30000 pairs with C stacks) under ulimit -f
    # 300 KiB (the replay of a saved capture writes nothing else that large)
    # fails at a piece, and the run says so by name and exits 70.
    p = run_limited(["--device=cpu", "--call-stack=c", "--save-capture=true", "--aggregate", "--sinks=html",
                     f"--output={tmp_path}/out", "--", test_bin / "sinks_alloc_loop", 30000], tmp_path, [])
    assert p.returncode == 0, p.stdout + p.stderr
    [d] = process_dirs(tmp_path / "out")
    cap = next(d.glob("*.msmcap"))
    [page] = d.glob("report_*.html")
    assert page.stat().st_size > 600 * 1024
    p = run_limited([f"--replay={cap}", "--aggregate", "--sinks=html", f"--output={tmp_path}/again"], tmp_path,
                    [(resource.RLIMIT_FSIZE, 300 * 1024)])
    assert p.returncode == 70, p.stdout + p.stderr
    [again] = process_dirs(tmp_path / "again")
    out = again / page.name
    assert (f"msmemscope: error: plugin 'html': finish failed: cannot write {out}: File too large; "
            "its output is incomplete and does not say so") in p.stderr.splitlines(), p.stderr
    assert out.stat().st_size == 300 * 1024


def test_full_disk_never_costs_the_program(test_bin, tmp_path):
    # A 4 MiB file system for --output (root only: mount). The program goes on
    # allocating long after the disk is full (2M pairs: far more capture than
    # 4 MiB even when the host keeps pace and releases what it read), so its
    # capture meets the full disk whichever of it and the CSV fills it first.
    with mounted_tmpfs(tmp_path / "small", "size=4m") as small:
        p = run_limited(ARGS + [f"--output={small}/o", "--", test_bin / "sinks_alloc_loop", 2000000], tmp_path, [])
    assert p.returncode == 70, p.stdout + p.stderr
    assert re.search(r"pid \d+ \(\S*sinks_alloc_loop 2000000\) exited with code 0", p.stdout), p.stdout
    assert "[msmemscope] warning: collection turned off: no space left on the disk for the capture file" in p.stderr
    assert re.search(r"msmemscope: error: pid \d+: output incomplete: \d+ event\(s\) could not be recorded "
                     r"\(the disk was full\)", p.stderr), p.stderr
    assert "LOG ERROR" not in p.stderr
    assert re.search(r"msmemscope: error: pid \d+: output incomplete: plugin 'csv': failed on event \d+: "
                     r"cannot write \S+\.csv: No space left on device; continuing without it \(the disk is full\)",
                     p.stderr), p.stderr
    dropped = int(re.search(r"dropped: (\d+)", p.stdout).group(1))
    events = int(re.search(r"events: (\d+)", p.stdout).group(1))
    assert events + dropped >= 799000 and dropped > 0, (events, dropped)


def test_address_space_limit_host_keeps_its_pace(test_bin, tmp_path):
    # ulimit -v 150 MB for the host and the program: glibc's per-thread
    # arenas cannot be made there, and the host's threads used to fall back
    # to one mmap per malloc (a 300k-pair run did not finish in 10 minutes).
    p = run_limited(ARGS + [f"--output={tmp_path}/out", "--", test_bin / "sinks_alloc_loop", 300000], tmp_path,
                    [(resource.RLIMIT_AS, 150 * 1000 * 1024)], timeout=120)
    assert p.returncode == 0, p.stdout + p.stderr
    assert re.search(r"exited with code 0\n.*\n  events: 599873, dropped: 0", p.stdout), p.stdout


def test_open_file_limit_costs_only_the_output(test_bin, tmp_path):
    # ulimit -n 4, 6 and 12 (soft and hard) for the tool and the program: the
    # program runs as always, unrecorded (the tool needs 16 descriptors and
    # cannot raise a hard limit), and the tool says why: exit 70.
    for n in (4, 6, 12):
        p = run_limited(ARGS + [f"--output={tmp_path}/out{n}", "--", "sh", "-c", "echo program ran; exit 3"],
                        tmp_path, [(resource.RLIMIT_NOFILE, n)])
        assert p.returncode == 70, p.stdout + p.stderr
        assert p.stdout == "program ran\n", p.stdout
        assert (f"msmemscope: error: the open-file limit (ulimit -n {n}) leaves msmemscope too few descriptors to "
                "profile (it needs 16); the program ran without being recorded") in p.stderr.splitlines(), p.stderr


def test_a_low_soft_open_file_limit_is_the_programs_only(test_bin, tmp_path):
    # ulimit -Sn 6 under a higher hard limit: the tool raises its own soft
    # limit and profiles; the program gets 6, as without the tool.
    def pre():
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        resource.setrlimit(resource.RLIMIT_NOFILE, (6, hard))
    env = dict(os.environ)
    env.pop("LD_PRELOAD", None)
    p = subprocess.run([str(CLI)] + ARGS + [f"--output={tmp_path}/out", "--", "sh", "-c", "ulimit -n; exit 3"],
                       cwd=str(tmp_path), env=env, capture_output=True, text=True, timeout=300, preexec_fn=pre)
    assert p.returncode == 3, p.stdout + p.stderr
    assert p.stdout.startswith("6\n"), p.stdout
    assert re.search(r"pid \d+ \(\S*sh -c ulimit -n; exit 3\) exited with code 3", p.stdout), p.stdout


def test_read_only_output_disk_is_refused_before_the_program_runs(test_bin, tmp_path):
    # --output on a read-only file system (root only: mount): one clear error,
    # exit 2, and the program is not started with nowhere to write.
    with mounted_tmpfs(tmp_path / "ro", "size=1m,ro") as ro:
        p = run_limited(ARGS + [f"--output={ro}/o", "--", test_bin / "sinks_alloc_loop", 1000], tmp_path, [])
    assert p.returncode == 2, p.stdout + p.stderr
    assert f"msmemscope: error: --output: cannot create or write '{ro}/o': Read-only file system" in p.stderr.splitlines()
    assert "exited with code" not in p.stdout
