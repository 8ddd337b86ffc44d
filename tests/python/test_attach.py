"""msmemscope --attach=PID (issue #31 items 1, 2, 5): attach to a program
started without msmemscope, collect, detach; the program goes on and ends
with exactly its own results. And the targets that cannot be attached.

Every wait is on a barrier: the program's ready file (it holds the pid),
msmemscope's "attached to pid" line, the program's own answer lines, the
tracer field of /proc/PID/status."""
import json
import re
import os
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

from conftest import BUILD, CLI, SOURCE, TEST_BIN, dump_files, log_messages, process_dirs, read_dump

pytestmark = pytest.mark.skipif(shutil.which("gdb") is None, reason="msmemscope --attach needs gdb")

TRAIN = SOURCE / "tests" / "programs" / "attach" / "attach_train.py"
UNTAKEABLE = SOURCE / "tests" / "programs" / "attach" / "attach_py_untakeable.py"
IS_ROOT = os.geteuid() == 0


def clean_env():
    e = dict(os.environ)
    for k in list(e):
        if k == "LD_PRELOAD" or k.startswith("MSMEMSCOPE_"):
            e.pop(k)
    e.pop("PYTHONPATH", None)  # the training script runs without the package on its path
    return e


def wait_for_file(path, proc, what="the program"):
    """The program's ready barrier (it writes its pid there)."""
    deadline = time.monotonic() + 120
    while not Path(path).exists() or not Path(path).read_text():
        assert proc.poll() is None, f"{what} ended before it was ready (rc {proc.returncode})"
        assert time.monotonic() < deadline, f"{what} never wrote {path}"
        time.sleep(0.01)
    return int(Path(path).read_text())


def reachable_by(user, *paths):
    """Whether user can run these programs of the build: a checkout under a
    private folder (mktemp -d makes 0700 ones) is not, and the tests that
    run the CLI as another user cannot say anything there."""
    if not IS_ROOT or not shutil.which("setpriv"):
        return False
    script = 'for p; do test -r "$p" && test -x "$p" || exit 1; done'
    return subprocess.run(["setpriv", f"--reuid={user}", "--regid=nogroup", "--clear-groups", "/bin/sh", "-c", script,
                           "sh", *map(str, paths)], env=clean_env(), cwd="/").returncode == 0


NOBODY_RUNS_BUILD = reachable_by("nobody", CLI, CLI.parent / "msmemscope.bin", TEST_BIN / "attach_loop")
AS_NOBODY = pytest.mark.skipif(not NOBODY_RUNS_BUILD, reason="needs root, setpriv and a build that user nobody can "
                               "reach (no private folder above it)")


def attach(pid, out, *extra, user=None, device="cpu"):
    cmd = [str(CLI), f"--attach={pid}", f"--device={device}", f"--output={out}"] + list(extra)
    if user:
        cmd = ["setpriv", f"--reuid={user}", "--regid=nogroup", "--clear-groups"] + cmd
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=clean_env(),
                            cwd="/")


def wait_attached(host, pid, prog=None):
    """msmemscope's own barrier: its 'attached' line on stderr. prog: the
    target's Popen, whose end (a signal: negative) a failure then says."""
    seen = []
    for line in host.stderr:
        seen.append(line)
        if line.startswith(f"msmemscope: attached to pid {pid};"):
            return seen
    out, err = host.communicate(timeout=60)
    ended = ""
    if prog is not None:
        try:
            ended = f"; the target's returncode: {prog.wait(timeout=10)}"
        except subprocess.TimeoutExpired:
            ended = "; the target still runs"
    pytest.fail(f"no attach (rc {host.returncode}{ended}):\n{''.join(seen)}{err}\n{out}")


def finish(host):
    out, err = host.communicate(timeout=300)
    return host.returncode, out, err


def threads(pid):
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("Threads:"):
            return int(line.split()[1])
    return -1


def wait_threads(pid, n):
    """The agent's thread ends just after it released the capture, which is
    what ends msmemscope's wait: on a busy machine it may still be there for
    a moment when msmemscope's outputs are written."""
    deadline = time.monotonic() + 60
    while threads(pid) != n:
        assert time.monotonic() < deadline, f"pid {pid} has {threads(pid)} threads, not {n}"
        time.sleep(0.01)


def tracer(pid):
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("TracerPid:"):
            return int(line.split()[1])
    return 0


def start_loop(tmp_path, *mode, user=None, program="attach_loop", env=None):
    ready = tmp_path / f"ready{len(list(tmp_path.glob('ready*')))}"
    cmd = [str(TEST_BIN / program), *mode, str(ready)]
    if user:  # a folder the user can reach (pytest's are root's, 0700)
        ready = Path(tempfile.mkdtemp(prefix="msms_attach_")) / "ready"
        os.chmod(ready.parent, 0o777)
        cmd = [str(TEST_BIN / program), *mode, str(ready)]
        cmd = ["setpriv", f"--reuid={user}", "--regid=nogroup", "--clear-groups"] + cmd
    p = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                         env={**clean_env(), **(env or {})}, cwd=str(tmp_path))
    pid = wait_for_file(ready, p)
    if user:
        shutil.rmtree(ready.parent, ignore_errors=True)
    return p, pid


def say(p, line):
    p.stdin.write(line + "\n")
    p.stdin.flush()


# ---------------------------------------------------------------- C program
def test_attach_c_program_finds_its_leak_and_leaves_it_running(tmp_path):
    prog, pid = start_loop(tmp_path)
    try:
        assert threads(pid) == 1
        host = attach(pid, tmp_path / "out", "--call-stack=c")
        wait_attached(host, pid)
        say(prog, "leak 5")  # five blocks of 3000 bytes, never freed, all after the attach
        assert prog.stdout.readline() == "leaked 5\n"
        host.send_signal(signal.SIGINT)  # Ctrl-C: detach
        rc, out, err = finish(host)
        assert rc == 0, err + out
        assert f"msmemscope: pid {pid} ({TEST_BIN / 'attach_loop'} " in out
        assert ") detached (it goes on running)" in out, out
        assert ("  attached to a running process: host and driver blocks allocated before the attach are unknown "
                "(their frees are ignored); CPU tensors alive at the attach are shadow rows") in out
        # the leak: the five blocks are in the leak analysis's report of live host memory
        # (the range ended when msmemscope detached: the program called no stop())
        assert "Host memory still allocated when msmemscope detached on device cpu" in out, out
        (procdir,) = process_dirs(tmp_path / "out")
        rows = read_dump(dump_files(procdir)[0])
        leaked = [r for r in rows if r["Event"] == "MALLOC" and r["attr"].get("size") == "3000"]
        assert len(leaked) == 5, leaked
        for r in leaked:  # never freed after it (the end of the range writes shadow FREE rows)
            later = rows[rows.index(r) + 1:]
            assert not any(x["Event"] == "FREE" and x["Ptr"] == r["Ptr"] and not x["attr"].get("shadow")
                           for x in later)
        assert all(r["Call Stack(C)"] for r in leaked)  # --call-stack=c works after an attach
        assert all(r["Process Id"] == str(pid) for r in leaked)
        # The process goes on: the agent's thread is gone, the program answers as before.
        assert prog.poll() is None
        wait_threads(pid, 1)
        assert tracer(pid) == 0
        say(prog, "leak 2")
        assert prog.stdout.readline() == "leaked 2\n"
        say(prog, "quit")
        rest, _ = prog.communicate(timeout=60)
        assert prog.returncode == 0
        assert rest == "done\n"  # its own stdout: nothing of ours in it
    finally:
        if prog.poll() is None:
            prog.kill()


def test_attach_npu_program_collects_its_driver_blocks(tmp_path):
    # --device=npu after an attach (issue #31 item 1, the accelerator half):
    # the hal collector's hooks go into the GOT slots of the running program
    # and of the simulated libascendcl (tests/fixtures/ascend), as LD_PRELOAD
    # would have interposed them; the 4 MiB block allocated before the attach
    # is not known, the blocks after it are, with their device and sizes.
    prog, pid = start_loop(tmp_path, program="attach_npu_loop", env={"ASCEND_SIM_DEVICE_MEM": str(128 << 20)})
    try:
        host = attach(pid, tmp_path / "out", device="npu")
        seen = wait_attached(host, pid)
        assert not [l for l in seen if "warning: --attach" in l], seen  # every library's hooks went in
        say(prog, "npu 3")
        line = prog.stdout.readline()
        assert line.startswith("npu 3 at 0x"), line
        first = int(line.split()[-1], 16)
        host.send_signal(signal.SIGINT)
        rc, out, err = finish(host)
        assert rc == 0, err + out
        assert "no Ascend NPU driver" not in err, err
        (procdir,) = process_dirs(tmp_path / "out")
        rows = read_dump(dump_files(procdir, device="0")[0])
        hal = [r for r in rows if r["Event Type"] == "HAL" and not r["attr"].get("shadow")]
        mallocs = [r for r in hal if r["Event"] == "MALLOC"]
        # three 1 MiB blocks through aclrtMalloc (libascendcl's slot), one
        # 2 MiB through halMemAlloc (the program's own slot) and its FREE
        assert sorted(int(r["attr"]["size"]) for r in mallocs) == [1 << 20] * 3 + [2 << 20], mallocs
        assert int(mallocs[0]["Ptr"], 16) == first
        assert all(r["Device Id"] == "0" for r in mallocs)
        frees = [r for r in hal if r["Event"] == "FREE"]
        assert [int(r["Ptr"], 16) for r in frees] == [int(mallocs[-1]["Ptr"], 16)], frees
        # the program goes on with its own results
        say(prog, "quit")
        rest, _ = prog.communicate(timeout=60)
        assert prog.returncode == 0 and rest == "done\n"
    finally:
        if prog.poll() is None:
            prog.kill()


@pytest.mark.parametrize("mode", ["immediate", "deferred"])
def test_attach_npu_free_of_a_block_made_before_the_attach_is_named_as_such(tmp_path, mode):
    # The program frees its 4 MiB block allocated before the attach: a free
    # of a block never recorded. The warning said "made before the hooks
    # went in: without the CLI, before the first msmemscope.start()", words
    # of the Python API alone. With --collect-mode=deferred (collection
    # starts at the attach all the same, and is never off) it also said "or
    # while collection was off and the agent could not remember them".
    prog, pid = start_loop(tmp_path, program="attach_npu_loop", env={"ASCEND_SIM_DEVICE_MEM": str(128 << 20)})
    try:
        host = attach(pid, tmp_path / "out", f"--collect-mode={mode}", device="npu")
        wait_attached(host, pid)
        say(prog, "quit")  # frees everything, the block made before the attach too, and exits
        rest, _ = prog.communicate(timeout=60)
        assert prog.returncode == 0 and rest == "done\n"
        rc, out, err = finish(host)
        assert rc == 0, err + out
        assert ("[msmemscope] warning: 0/HAL: 1 free(s) of block(s) whose allocation was never recorded (made before "
                "the attach) were not written; the pool's figures and the leak analysis leave those blocks out\n"
                in err), err
        assert "without the CLI" not in err + out, err + out
        assert re.search(r"^msmemscope: pid \d+ \(.*attach_npu_loop .*\) exited with code 0$", out, re.M), out
    finally:
        if prog.poll() is None:
            prog.kill()


def test_attach_cuda_program_collects_driver_calls_and_dlsym_lookups(tmp_path):
    # --device=cuda after an attach: the cuda collector's hooks replace the
    # program's GOT slots (cuMemAlloc_v2 ...) and dlsym, so a pointer looked
    # up after the attach is the hook too; a runtime that resolved its driver
    # table before the attach is named as not seen.
    prog, pid = start_loop(tmp_path, program="attach_cuda_loop")
    try:
        host = attach(pid, tmp_path / "out", device="cuda")
        seen = wait_attached(host, pid)
        assert [l.strip() for l in seen if "warning: --attach" in l] == [
            "msmemscope: warning: --attach: a CUDA runtime that started before the attach found its driver functions "
            "then (cuGetProcAddress): its allocations are not seen; calls a program makes to libcuda itself are"], seen
        say(prog, "cuda 2")
        line = prog.stdout.readline()
        assert line.startswith("cuda 2 at 0x"), line
        first = int(line.split()[-1], 16)
        host.send_signal(signal.SIGINT)
        rc, out, err = finish(host)
        assert rc == 0, err + out
        (procdir,) = process_dirs(tmp_path / "out")
        # The warning and the status line came before the process's log
        # opened: the log has each once, in the console's words.
        said = [l.strip() for l in seen] + err.splitlines()
        assert len([l for l in said if "a CUDA runtime" in l]) == 1, said
        log = [m for _, m in log_messages(procdir)]
        assert [m for m in log if "--attach: " in m or "attached to pid" in m] == [
            "[warning] --attach: a CUDA runtime that started before the attach found its driver functions then "
            "(cuGetProcAddress): its allocations are not seen; calls a program makes to libcuda itself are",
            f"[info] msmemscope: attached to pid {pid}; Ctrl-C detaches (the process goes on running)"], log
        rows = read_dump(dump_files(procdir, device="0")[0])
        dev = [r for r in rows if r["Event Type"] == "HAL" and not r["attr"].get("shadow")]
        mallocs = [r for r in dev if r["Event"] == "MALLOC"]
        assert [int(r["attr"]["size"]) for r in mallocs] == [1 << 20, 1 << 20, 2 << 20], mallocs
        assert int(mallocs[0]["Ptr"], 16) == first
        assert all(r["attr"].get("driver") == "cuda" for r in mallocs)
        assert [r["Ptr"] for r in dev if r["Event"] == "FREE"] == [mallocs[-1]["Ptr"]]
        say(prog, "quit")
        rest, _ = prog.communicate(timeout=60)
        assert prog.returncode == 0 and rest == "done\n"
    finally:
        if prog.poll() is None:
            prog.kill()


CUSTOM_POOL = BUILD / "tests" / "lib" / "custom_pool"


def collector_whose_library_cannot_load(folder):
    """The custom_pool fixture collector in `folder` (a --plugin-path of its
    own), its target library needing a libgcc_q.so.1 that no process has:
    the attached process cannot load it. Returns the library's path."""
    folder.mkdir()
    shutil.copy(CUSTOM_POOL / "libmsmemscope_plugin_custom_pool.so", folder)
    hook = folder / "libmsms_custom_pool_hook.so"
    elf = (CUSTOM_POOL / hook.name).read_bytes()
    assert b"libgcc_s.so.1\0" in elf  # its DT_NEEDED, renamed in place (same length)
    hook.write_bytes(elf.replace(b"libgcc_s.so.1\0", b"libgcc_q.so.1\0"))
    return hook


def test_attach_collector_whose_library_cannot_load_is_warned_of_in_the_log_too(tmp_path):
    # The warning and the "attached" line are said before the attached
    # process's log opens: a reader of the log alone (a cluster's job) saw
    # neither. The log has each once, in the console's words; the console
    # says each once.
    hook = collector_whose_library_cannot_load(tmp_path / "pool")
    prog, pid = start_loop(tmp_path)
    try:
        host = attach(pid, tmp_path / "out", f"--plugin-path={hook.parent}", "--events=alloc,free")
        seen = wait_attached(host, pid)
        say(prog, "leak 1")
        assert prog.stdout.readline() == "leaked 1\n"
        host.send_signal(signal.SIGINT)
        rc, out, err = finish(host)
        assert rc == 0, err + out
        warning = (f"--attach: {hook.name}: cannot load {hook}: libgcc_q.so.1: cannot open shared object file: "
                   "No such file or directory; collecting without it")
        attached = f"msmemscope: attached to pid {pid}; Ctrl-C detaches (the process goes on running)"
        said = [l.rstrip("\n") for l in seen] + err.splitlines()
        assert said.count(f"msmemscope: warning: {warning}") == 1, said
        assert said.count(attached) == 1 and attached not in out, said
        (procdir,) = process_dirs(tmp_path / "out")
        log = [m for _, m in log_messages(procdir)]
        assert [m for m in log if "--attach: " in m or "attached to pid" in m] == \
            [f"[warning] {warning}", f"[info] {attached}"], log
        say(prog, "quit")
        rest, _ = prog.communicate(timeout=60)
        assert (prog.returncode, rest) == (0, "done\n")
    finally:
        if prog.poll() is None:
            prog.kill()


def warnings_and_errors(text):
    return [l for l in text.splitlines() if l.startswith(("msmemscope: warning: ", "msmemscope: error: "))]


def test_a_detach_the_agent_does_not_answer_is_said_in_the_log_too(tmp_path):
    # The program is stopped (SIGSTOP) once attached: the agent's thread,
    # which answers the detach request, is stopped with it, and the host
    # detaches through gdb after MSMEMSCOPE_DETACH_TIMEOUT_S. Those lines
    # were on the console only: a reader of the log alone did not learn why
    # the detach took long (or failed). Each is said once on the console,
    # and the log has each, in the console's words.
    prog, pid = start_loop(tmp_path)
    try:
        env = {**clean_env(), "MSMEMSCOPE_DETACH_TIMEOUT_S": "1", "MSMEMSCOPE_ATTACH_TIMEOUT_S": "5"}
        host = subprocess.Popen([str(CLI), f"--attach={pid}", "--device=cpu", f"--output={tmp_path / 'out'}"],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd="/")
        wait_attached(host, pid)
        os.kill(pid, signal.SIGSTOP)
        host.send_signal(signal.SIGINT)
        rc, out, err = finish(host)
        said = warnings_and_errors(err)  # (after the "attached" line)
        unanswered = f"pid {pid} did not answer the detach request within 1 s; detaching through gdb"
        assert said[0] == f"msmemscope: warning: {unanswered}", err + out
        assert said.count(said[0]) == 1, said
        (procdir,) = process_dirs(tmp_path / "out")
        log = [m for _, m in log_messages(procdir)]
        # every line the detach said (the first, and what gdb's detach said
        # after it, if anything) is in the log once
        for line in said:
            level, text = line[len("msmemscope: "):].split(": ", 1)
            assert log.count(f"[{level}] {text}") == 1, (line, log)
        assert f"[warning] {unanswered}" in log, log
    finally:
        if prog.poll() is None:
            os.kill(pid, signal.SIGCONT)
            prog.kill()


def test_a_warning_of_the_attached_pythons_package_reaches_the_console_and_the_log(tmp_path):
    # The package inside the attached interpreter said its failures on the
    # program's stderr, which the user who ran msmemscope --attach does not
    # see: now it goes through the capture to the host, which warns of it in
    # the summary and the log, and the program's stderr has nothing of it.
    ready, patched, stop = tmp_path / "ready", tmp_path / "patched", tmp_path / "stop"
    prog = subprocess.Popen(["/usr/bin/python3", str(UNTAKEABLE), str(ready), str(patched), str(stop)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=clean_env(),
                            cwd=str(tmp_path))
    try:
        pid = wait_for_file(ready, prog, "the Python loop")
        host = attach(pid, tmp_path / "out")
        wait_attached(host, pid)
        wait_for_file(patched, prog, "the Python loop")  # the collectors are in, their removal will fail
        host.send_signal(signal.SIGINT)
        rc, out, err = finish(host)
        assert rc == 0, err + out
        warning = f"pid {pid}: the Python-side collectors were not all taken out at the detach: on purpose"
        assert warnings_and_errors(err) == [f"msmemscope: warning: {warning}"], err  # (after "attached")
        (procdir,) = process_dirs(tmp_path / "out")
        log = [m for _, m in log_messages(procdir)]
        assert log.count(f"[warning] {warning}") == 1, log
        stop.write_text("")
        rest, prog_err = prog.communicate(timeout=60)
        assert (prog.returncode, rest, prog_err) == (0, "done\n", "")
    finally:
        if prog.poll() is None:
            prog.kill()


def test_heap_hooks_loaded_into_a_running_process_serve_every_thread_from_their_first_call():
    # The cause of the flake below ("pid N exited during the attach", the
    # program killed by SIGABRT): the hooks looked the real malloc up at
    # their first call, and while that thread was in dlsym every other
    # thread's malloc was served from a 64 KiB start-up pool, then failed
    # (NULL: the program's abort()). heap_hooks_first_call holds the first
    # call's look-up, should it come, at its own dlsym (a barrier, not luck)
    # while its main thread allocates 64 blocks of 4000 bytes.
    hook = BUILD / "lib" / "msmemscope" / "agent" / "libmsms_host_heap_hook.so"
    r = subprocess.run([str(TEST_BIN / "heap_hooks_first_call"), str(hook)], capture_output=True, text=True,
                       env=clean_env(), timeout=60)
    assert (r.returncode, r.stdout, r.stderr) == (
        0, "first call held in its look-up: no; 64 block(s): 64 from the heap, 0 from the hooks' start-up pool, "
           "0 failed\n", ""), r


def test_attach_and_detach_while_threads_are_inside_malloc(tmp_path):
    # four threads allocate and free without pause: the hooks go in and the
    # capture goes away while they are inside malloc, free and realloc
    prog, pid = start_loop(tmp_path, "--threads")
    try:
        host = attach(pid, tmp_path / "out", "--aggregate")  # millions of events a second: no per-event rows
        # (it failed under load, the target killed by SIGABRT during the attach: the hooks' start-up
        # pool ran out, the test above)
        wait_attached(host, pid, prog)
        say(prog, "leak 4")
        assert prog.stdout.readline() == "leaked 4\n"
        host.send_signal(signal.SIGINT)
        rc, out, err = finish(host)
        assert rc == 0, err + out
        assert ") detached (it goes on running)" in out
        assert "dropped: 0" in out
        assert prog.poll() is None and tracer(pid) == 0
        wait_threads(pid, 5)  # the agent's thread is gone
        say(prog, "leak 1")
        assert prog.stdout.readline() == "leaked 1\n"
        say(prog, "quit")
        rest, _ = prog.communicate(timeout=60)
        assert (prog.returncode, rest) == (0, "done\n")
    finally:
        if prog.poll() is None:
            prog.kill()


def test_attach_while_the_heap_hooks_first_look_up_is_held_leaves_the_threads_allocating(tmp_path):
    # The flake above made certain: attach_loop_held holds the host heap
    # hooks' look-up of the real malloc at its own dlsym while its four
    # threads go on allocating (for ever once the hooks are in its slots).
    # The look-up came at the hooks' first call: the threads' calls were
    # served from the 64 KiB start-up pool until it ran out, malloc returned
    # NULL and the program aborted ("pid N was killed by signal 6 (SIGABRT)
    # during the attach", or just after the "attached" line). Now it comes
    # while the library loads, before any slot points at the hooks.
    prog, pid = start_loop(tmp_path, "--threads", program="attach_loop_held")
    try:
        host = attach(pid, tmp_path / "out", "--aggregate")
        wait_attached(host, pid, prog)
        try:
            say(prog, "leak 4")
            line = prog.stdout.readline()
        except BrokenPipeError:
            line = ""
        assert line == "leaked 4\n", f"the program ended after the attach: returncode {prog.wait(timeout=60)}"
        host.send_signal(signal.SIGINT)
        rc, out, err = finish(host)
        assert rc == 0, err + out
        assert ") detached (it goes on running)" in out
        say(prog, "quit")
        rest, _ = prog.communicate(timeout=60)
        assert (prog.returncode, rest) == (0, "look-up held\ndone\n")  # (the hold happened)
    finally:
        if prog.poll() is None:
            prog.kill()


def test_attach_leaves_the_programs_relro_pages_read_only(tmp_path):
    # The heap hooks are written in the program's GOT slots; linked with
    # -z now, those are in its RELRO pages, which the loader made read-only.
    # Each page gets its protection back after the write: while attached
    # and after the detach, no RELRO page is writable (they all were).
    prog, pid = start_loop(tmp_path)
    try:
        say(prog, "relro")
        read_only = re.compile(r"relro read-only \(\d+ objects\)\n")  # (the agent's libraries are more)
        before = prog.stdout.readline()
        assert read_only.fullmatch(before), before
        host = attach(pid, tmp_path / "out")
        wait_attached(host, pid)
        say(prog, "leak 1")  # the hooks serve the program's calls
        assert prog.stdout.readline() == "leaked 1\n"
        say(prog, "relro")
        line = prog.stdout.readline()
        assert read_only.fullmatch(line), line
        host.send_signal(signal.SIGINT)
        rc, out, err = finish(host)
        assert rc == 0, err + out
        assert ") detached (it goes on running)" in out, out
        wait_threads(pid, 1)
        say(prog, "relro")
        line = prog.stdout.readline()
        assert read_only.fullmatch(line), line
        say(prog, "quit")
        rest, _ = prog.communicate(timeout=60)
        assert prog.returncode == 0 and rest == "done\n", rest
    finally:
        if prog.poll() is None:
            prog.kill()


def test_attach_for_seconds_detaches_by_itself(tmp_path):
    prog, pid = start_loop(tmp_path)
    try:
        host = attach(pid, tmp_path / "out", "--attach-for=1")
        wait_attached(host, pid)
        rc, out, err = finish(host)  # no signal: it ends by itself
        assert rc == 0, err + out
        assert ") detached (it goes on running)" in out
        say(prog, "quit")
        rest, _ = prog.communicate(timeout=60)
        assert (prog.returncode, rest) == (0, "done\n")
    finally:
        if prog.poll() is None:
            prog.kill()


def test_attached_program_that_ends_ends_the_run(tmp_path):
    prog, pid = start_loop(tmp_path)
    try:
        host = attach(pid, tmp_path / "out")
        wait_attached(host, pid)
        say(prog, "leak 3")
        assert prog.stdout.readline() == "leaked 3\n"
        say(prog, "quit")
        rest, _ = prog.communicate(timeout=60)
        assert (prog.returncode, rest) == (0, "done\n")
        rc, out, err = finish(host)  # no signal: the program's end ends the run
        assert rc == 0, err + out
        assert ") exited with code 0\n" in out, out
    finally:
        if prog.poll() is None:
            prog.kill()


def test_attached_program_that_execs_ends_the_run_and_says_so(tmp_path):
    """An attach does not follow an exec (the new image has no agent): the
    run ends there, says so instead of "detached", and what the image held
    went with it (no leaks). The new image runs on."""
    prog, pid = start_loop(tmp_path)
    try:
        host = attach(pid, tmp_path / "out", "--analysis=leaks")
        wait_attached(host, pid)
        say(prog, "leak 3")
        assert prog.stdout.readline() == "leaked 3\n"
        ready = tmp_path / "ready_after_exec"
        say(prog, f"exec {TEST_BIN / 'attach_static'} {ready}")
        assert wait_for_file(ready, prog, "the exec'ed image") == pid
        rc, out, err = finish(host)  # no signal: the exec ends the run
        assert rc == 0, err + out
        words = "replaced by exec, which an attach does not follow (the new image runs on unrecorded)"
        assert f"msmemscope: pid {pid} ({TEST_BIN / 'attach_loop'} {tmp_path / 'ready0'}) {words}\n" in out, out
        assert "detached" not in out and "still allocated" not in out, out
        (summary,) = [json.loads(f.read_text()) for f in (tmp_path / "out").glob("msmemscope_*/summary.json")]
        assert summary["ended"] == {"how": "exec", "code": None, "text": words}, summary
        assert summary["leaks"] == {"bytes": 0, "allocations": 0, "exit_judged": False,
                                    "not_judged_before_start": {"blocks": 0, "bytes": 0}}, summary  # (went with the exec)
        rest, _ = prog.communicate("", timeout=60)  # the new image: stdin's end, then it exits
        assert (prog.returncode, rest) == (0, "static done\n")
    finally:
        if prog.poll() is None:
            prog.kill()


def test_killed_msmemscope_leaves_the_program_running_unprofiled(tmp_path):
    prog, pid = start_loop(tmp_path)
    try:
        host = attach(pid, tmp_path / "out")
        wait_attached(host, pid)
        assert threads(pid) == 2  # the program's and the agent's
        host.kill()  # SIGKILL: no detach request
        host.communicate(timeout=60)
        deadline = time.monotonic() + 60
        while threads(pid) != 1:  # the agent saw msmemscope gone and detached by itself
            assert time.monotonic() < deadline, "the agent did not detach"
            time.sleep(0.01)
        say(prog, "leak 2")
        assert prog.stdout.readline() == "leaked 2\n"
        say(prog, "quit")
        rest, _ = prog.communicate(timeout=60)
        assert (prog.returncode, rest) == (0, "done\n")
    finally:
        if prog.poll() is None:
            prog.kill()


# ---------------------------------------------------------------- PyTorch
def run_train(tmp_path, name, attach_args=None):
    ready, go, result = tmp_path / f"{name}.ready", tmp_path / f"{name}.go", tmp_path / f"{name}.bin"
    if attach_args is None:
        go.write_text("")
    prog = subprocess.Popen(["/usr/bin/python3", str(TRAIN), str(ready), str(go), str(result)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=clean_env(),
                            cwd=str(tmp_path))
    host_out = None
    try:
        pid = wait_for_file(ready, prog, "the training script")
        if attach_args is not None:
            host = attach(pid, tmp_path / "out", *attach_args)
            wait_attached(host, pid)
            go.write_text("")  # the script trains on
            host_out = finish(host)
        out, err = prog.communicate(timeout=300)
    finally:
        if prog.poll() is None:
            prog.kill()
    assert prog.returncode == 0, err
    return pid, out, result.read_bytes(), host_out


def test_attach_pytorch_training_steps_leak_and_identical_results(tmp_path):
    _, ref_out, ref_bin, _ = run_train(tmp_path, "ref")
    pid, out, result, (rc, host_out, host_err) = run_train(tmp_path, "att",
                                                           ["--attach-steps=3", "--call-stack=python"])
    assert rc == 0, host_err + host_out
    # the program's own results and stdout, bit for bit
    assert out == ref_out and out.startswith("final loss ")
    assert result == ref_bin
    assert f"msmemscope: pid {pid} (/usr/bin/python3 {TRAIN} " in host_out
    assert ") detached (it goes on running)" in host_out
    # the leak: one 4 KiB tensor per step, made by aten::full
    assert "====== ERROR: Detected memory leaks on device cpu ======" in host_out, host_out
    assert (f"allocated by: operator torch._ops.aten.full.default, called from {TRAIN}(54): <module>"
            in host_out), host_out  # Python stacks after an attach
    (procdir,) = process_dirs(tmp_path / "out")
    rows = read_dump(dump_files(procdir)[0])
    steps = [r for r in rows if r["Event"] == "SYSTEM" and r["Event Type"] == "STEP"]
    assert [r["Name"] for r in steps] == ["1", "2", "3"], steps  # --attach-steps=3: three steps, then detached
    assert steps[-1] is rows[-1] or all(r["Event"] in ("SYSTEM", "FREE", "ACCESS") or r["attr"].get("shadow")
                                        for r in rows[rows.index(steps[-1]) + 1:])
    pta = [r for r in rows if r["Event"] == "MALLOC" and r["Event Type"] == "PTA"]
    shadow = [r for r in pta if r["attr"].get("shadow") == "true"]
    # the model's parameters (and the data) existed before the attach: shadow rows
    weights = 64 * 128 * 4
    assert any(int(r["attr"].get("size", 0)) == weights for r in shadow), shadow
    assert any(r["attr"].get("shadow") != "true" for r in pta)  # and tensors made after it
    ops = [r for r in rows if r["Event"] == "OP_LAUNCH"]
    assert any("aten::mm" in r["Name"] or "addmm" in r["Name"] for r in ops), {r["Name"] for r in ops}


def test_attached_training_that_ends_ends_the_run(tmp_path):
    _, ref_out, ref_bin, _ = run_train(tmp_path, "ref")
    pid, out, result, (rc, host_out, host_err) = run_train(tmp_path, "end", [])  # no detach: it ends first
    assert rc == 0, host_err + host_out
    assert (out, result) == (ref_out, ref_bin)
    assert f"msmemscope: pid {pid} (/usr/bin/python3 {TRAIN} " in host_out
    assert ") exited with code 0\n" in host_out, host_out
    (procdir,) = process_dirs(tmp_path / "out")
    rows = read_dump(dump_files(procdir)[0])
    assert len([r for r in rows if r["Event"] == "SYSTEM" and r["Event Type"] == "STEP"]) == 12


def test_attach_does_not_record_its_own_start_as_the_program(tmp_path):
    # The Python side's start after an attach (the package's imports, the
    # session, the collectors, the search for the tensors that exist: a list
    # of every live object, ~800 KiB) ran with the hooks on: ~1000 HOST rows
    # (7 MiB) at "<string>(1): <lambda>" (the agent's start string) and
    # before it without a Python stack, the run's HOST peak, and a leak site
    # "<string>(1): <lambda>". They are the profiler's, as at start().
    pid, out, result, (rc, host_out, host_err) = run_train(
        tmp_path, "own", ["--attach-steps=3", "--call-stack=python", "--analysis=leaks"])
    assert rc == 0, host_err + host_out
    assert "<string>" not in host_out, host_out  # no leak site at the agent's start string
    (procdir,) = process_dirs(tmp_path / "out")
    rows = read_dump(dump_files(procdir)[0])
    host = [r for r in rows if r["Event Type"] == "HOST" and r["Event"] == "MALLOC"]
    own = [r for r in host if "<string>(1)" in r["Call Stack(Python)"] or "importlib" in r["Call Stack(Python)"]]
    assert not own, [(r["attr"].get("size"), r["Call Stack(Python)"]) for r in own[:5]]
    # before the first row with a Python stack: the program's rest of a bytecode, not the package's imports
    first_py = next(i for i, r in enumerate(rows) if r["Call Stack(Python)"])
    early = [r for r in rows[:first_py] if r["Event Type"] == "HOST" and r["Event"] == "MALLOC"]
    assert sum(int(r["attr"]["size"]) for r in early) < 64 * 1024, len(early)
    (summary,) = [json.loads(f.read_text()) for f in (tmp_path / "out").glob("msmemscope_*/summary.json")]
    assert summary["pools"]["cpu/HOST"]["peak_bytes"] < 400 * 1024, summary["pools"]
    # the tensors that existed at the attach are still written, as shadow rows
    shadow = [r for r in rows if r["Event"] == "MALLOC" and r["Event Type"] == "PTA" and r["attr"].get("shadow") == "true"]
    assert any(int(r["attr"].get("size", 0)) == 64 * 128 * 4 for r in shadow), shadow


# ---------------------------------------------------------------- errors
def test_attach_errors_no_such_process(tmp_path):
    p = subprocess.Popen(["/bin/true"])
    p.wait()
    gone = p.pid  # reaped: no process has this pid (until reused, which takes a full pid cycle)
    r = subprocess.run([str(CLI), f"--attach={gone}", "--device=cpu", f"--output={tmp_path}/o"],
                       capture_output=True, text=True, env=clean_env(), timeout=60)
    assert r.returncode == 2
    assert f"msmemscope: error: --attach: no process with pid {gone}\n" in r.stderr
    assert not (tmp_path / "o").exists()


def test_attach_option_errors(tmp_path):
    r = subprocess.run([str(CLI), "--attach=abc", "--device=cpu"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 2
    assert ("msmemscope: error: --attach: invalid value 'abc' (allowed: the pid of a running process, "
            "e.g. --attach=12345)") in r.stderr
    r = subprocess.run([str(CLI), "--attach-steps=3", "--device=cpu", "--", "/bin/true"], capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 2
    assert "msmemscope: error: --attach-steps: only valid together with --attach=PID" in r.stderr
    r = subprocess.run([str(CLI), "--attach=1", "--device=cpu", "--", "/bin/true"], capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 2
    assert ("msmemscope: error: --attach: --attach profiles a running process; give no program to start "
            "(got '/bin/true')") in r.stderr


def test_attach_errors_already_profiled(tmp_path):
    ready = tmp_path / "ready"
    e = clean_env()
    run = subprocess.Popen([str(CLI), "--device=cpu", f"--output={tmp_path}/first", "--",
                            str(TEST_BIN / "attach_loop"), str(ready)], stdin=subprocess.PIPE,
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=e)
    try:
        pid = wait_for_file(ready, run)
        r = subprocess.run([str(CLI), f"--attach={pid}", "--device=cpu", f"--output={tmp_path}/o"],
                           capture_output=True, text=True, env=e, timeout=60)
        assert r.returncode == 2
        assert (f"msmemscope: error: --attach: pid {pid} is already being profiled (the msmemscope agent is "
                f"loaded in it") in r.stderr, r.stderr
        run.stdin.write("quit\n")
        run.stdin.flush()
        out, err = run.communicate(timeout=120)
        assert run.returncode == 0, err
    finally:
        if run.poll() is None:
            run.kill()


def test_attach_errors_static_program_left_untouched(tmp_path):
    ready = tmp_path / "ready"
    p = subprocess.Popen([str(TEST_BIN / "attach_static"), str(ready)], stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, text=True, env=clean_env())
    try:
        pid = wait_for_file(ready, p)
        r = subprocess.run([str(CLI), f"--attach={pid}", "--device=cpu", f"--output={tmp_path}/o"],
                           capture_output=True, text=True, env=clean_env(), timeout=60)
        assert r.returncode == 2
        assert (f"msmemscope: error: --attach: pid {pid} is not a dynamically linked glibc program (no libc.so.6 "
                f"and ld-linux in /proc/{pid}/maps: static, or another C library such as musl)") in r.stderr
        assert tracer(pid) == 0
        out, _ = p.communicate("", timeout=60)
        assert (p.returncode, out) == (0, "static done\n")
    finally:
        if p.poll() is None:
            p.kill()


@pytest.mark.parametrize("end", ["stdin", "exit 10", "SIGTERM"])
def test_attach_errors_process_exits_during_the_attach(tmp_path, end):
    # --block: the program waits in read(2) and never enters malloc, so gdb
    # holds on; once it is traced (TracerPid), it ends: its stdin's end
    # (_exit(0)), an 'x' (_exit(10), which gdb writes "012") or a SIGTERM
    # that gdb passes on. How it ended is said: "exited during the attach"
    # alone hid the SIGABRT that the hooks' start-up pool caused (above).
    prog, pid = start_loop(tmp_path, "--block")
    host = attach(pid, tmp_path / "out")
    deadline = time.monotonic() + 120
    while tracer(pid) == 0:
        assert host.poll() is None, host.communicate()
        assert time.monotonic() < deadline
        time.sleep(0.01)
    if end == "stdin":
        prog.stdin.close()
    elif end == "exit 10":
        say(prog, "x")
    else:
        os.kill(pid, signal.SIGTERM)
    prog.wait(timeout=60)
    rc, out, err = finish(host)
    assert rc == 2
    how = {"stdin": "exited with code 0", "exit 10": "exited with code 10",
           "SIGTERM": "was killed by signal 15 (SIGTERM)"}[end]
    assert f"msmemscope: error: pid {pid} {how} during the attach (nothing was collected)\n" in err, err
    assert prog.returncode == {"stdin": 0, "exit 10": 10, "SIGTERM": -signal.SIGTERM}[end]


def assert_left_untouched(prog, pid):
    """A --block program the attach gave up on: running, untraced, without
    the agent; it still calls malloc (no breakpoint of gdb's left in it: that
    was a SIGTRAP), its read ends and it exits 0 (not stopped, no stray
    signal)."""
    assert prog.poll() is None and tracer(pid) == 0
    assert "libmsmemscope_agent" not in Path(f"/proc/{pid}/maps").read_text()
    say(prog, "m")
    assert prog.stdout.readline() == "m\n", prog.wait(timeout=60)
    prog.stdin.close()
    assert prog.wait(timeout=60) == 0


def test_attach_timeout_leaves_a_blocked_program_untouched(tmp_path):
    # --block: no malloc-family call ever; the attach gives up after
    # MSMEMSCOPE_ATTACH_TIMEOUT_S and gdb lets go of the process.
    prog, pid = start_loop(tmp_path, "--block")
    try:
        env = clean_env()
        env["MSMEMSCOPE_ATTACH_TIMEOUT_S"] = "2"
        r = subprocess.run([str(CLI), f"--attach={pid}", "--device=cpu", f"--output={tmp_path}/o"],
                           capture_output=True, text=True, env=env, timeout=120)
        assert r.returncode == 2
        assert (f"msmemscope: error: pid {pid} made no call to malloc, free, calloc or realloc within the attach "
                f"timeout (it may be blocked or sleeping): not attached, it runs on untouched") in r.stderr, r.stderr
        assert_left_untouched(prog, pid)
    finally:
        if prog.poll() is None:
            prog.kill()


HUNG_GDB = """#!/bin/bash
# gdb that does not stop when interrupted: its script's SIGINT neither stops
# the process nor reaches it, so gdb goes on waiting in `continue` with its
# breakpoints in malloc, free, calloc and realloc, until msmemscope kills it.
args=("$@")
for ((i = 0; i < ${#args[@]}; i++)); do
  if [ "${args[$i]}" = -x ]; then
    hung="$HUNG_DIR/script.gdb"
    sed 's/^handle SIGINT stop print nopass$/handle SIGINT nostop noprint nopass/' "${args[$((i + 1))]}" > "$hung"
    grep -q '^handle SIGINT nostop noprint nopass$' "$hung" || exit 99
    args[$((i + 1))]="$hung"
  fi
done
exec %s "${args[@]}"
"""


def test_gdb_killed_in_its_wait_leaves_no_breakpoint_in_the_program(tmp_path):
    # gdb that hangs in its wait is killed 20 s after the interrupts began,
    # with its breakpoints in the process's code: the process, "untouched",
    # died of SIGTRAP at its next malloc. msmemscope now writes their first
    # bytes back from the libc the process has mapped, and says so.
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "gdb").write_text(HUNG_GDB % shutil.which("gdb"))
    (fake / "gdb").chmod(0o755)
    prog, pid = start_loop(tmp_path, "--block")
    try:
        env = clean_env()
        env["MSMEMSCOPE_ATTACH_TIMEOUT_S"] = "1"
        env["HUNG_DIR"] = str(tmp_path)
        env["PATH"] = f"{fake}:{env.get('PATH', '/usr/bin:/bin')}"
        r = subprocess.run([str(CLI), f"--attach={pid}", "--device=cpu", f"--output={tmp_path}/o"],
                           capture_output=True, text=True, env=env, timeout=180)
        assert r.returncode == 2, r.stderr
        assert (tmp_path / "script.gdb").exists()  # the hung gdb ran msmemscope's script
        assert (f"msmemscope: error: cannot attach to pid {pid}: gdb did not stop within 20 s of being interrupted "
                f"and was killed; the 4 breakpoint(s) it left in malloc, free, calloc and realloc were taken out "
                f"(their first bytes written back from libc.so.6): not attached, pid {pid} runs on\n") in r.stderr, \
            r.stderr
        assert_left_untouched(prog, pid)
    finally:
        if prog.poll() is None:
            prog.kill()


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_while_waiting_for_the_first_malloc_leaves_the_program_untouched(tmp_path, sig):
    # Ctrl-C while gdb waited for the process's first malloc was held until
    # that malloc came (or the 60 s timeout), and then the agent went in
    # anyway. Now it stops the wait at once: not attached, untouched.
    prog, pid = start_loop(tmp_path, "--block")
    try:
        host = attach(pid, tmp_path / "out")
        deadline = time.monotonic() + 120
        while tracer(pid) == 0:  # the barrier: gdb holds it, waiting
            assert host.poll() is None, host.communicate()
            assert time.monotonic() < deadline
            time.sleep(0.01)
        host.send_signal(sig)
        rc, out, err = finish(host)
        name = {signal.SIGINT: "SIGINT", signal.SIGTERM: "SIGTERM"}[sig]
        assert rc == 128 + sig, err
        assert (f"msmemscope: --attach: interrupted by {name} while waiting for pid {pid} to call malloc, free, "
                f"calloc or realloc: not attached, it runs on untouched\n") in err, err
        assert_left_untouched(prog, pid)
    finally:
        if prog.poll() is None:
            prog.kill()


@AS_NOBODY
def test_attach_errors_not_ours(tmp_path):
    prog, pid = start_loop(tmp_path)  # root's
    try:
        host = attach(pid, tmp_path / "out", user="nobody")
        rc, out, err = finish(host)
        assert rc == 2
        assert (f"msmemscope: error: --attach: pid {pid} belongs to user root, not to you (nobody); only your own "
                f"processes can be attached (root may attach to any)\n") in err, err
        assert tracer(pid) == 0
        say(prog, "quit")
        assert prog.communicate(timeout=60) == ("done\n", None) and prog.returncode == 0
    finally:
        if prog.poll() is None:
            prog.kill()


@AS_NOBODY
def test_attach_errors_ptrace_not_permitted(tmp_path):
    # nobody's own process, made undumpable: the kernel lets nobody trace it
    # without CAP_SYS_PTRACE.
    prog, pid = start_loop(tmp_path, "--undumpable", user="nobody")
    try:
        host = attach(pid, tmp_path / "out", user="nobody")
        rc, out, err = finish(host)
        assert rc == 2
        assert f"msmemscope: error: --attach: cannot read /proc/{pid}/maps" in err, err
        assert "kernel.yama.ptrace_scope" in err and "CAP_SYS_PTRACE" in err and "--cap-add=SYS_PTRACE" in err
        say(prog, "quit")
        assert prog.communicate(timeout=60) == ("done\n", None) and prog.returncode == 0
    finally:
        if prog.poll() is None:
            prog.kill()
