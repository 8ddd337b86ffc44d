"""How a process ended by a signal, and the handlers that note it kept out of
the program's sight.

A worker that a multiprocessing pool's terminate() ends with SIGTERM, `yes`
in a pipeline ended by SIGPIPE: their agent saw no end and the table,
summary.json and index.html said "ended without an end record (killed by
SIGKILL or the OOM killer)". The agent now notes every signal whose default
action ends the process. Its handlers are hidden: a program that asked for
SIGABRT's handler and put it back got None from Python's
signal.getsignal() under msmemscope, and signal.signal(SIGABRT, None) raised
TypeError -- the program failed where it ran fine without the profiler.
"""
import json
import re
import subprocess
import textwrap

from conftest import process_dirs

PROG = textwrap.dedent(r"""
    #define _GNU_SOURCE  /* sigset, sigignore */
    #include <signal.h>
    #include <stdio.h>
    #include <stdlib.h>
    #include <string.h>
    #include <sys/wait.h>
    #include <unistd.h>

    static volatile sig_atomic_t handled;
    static void on_term(int sig) { (void)sig; handled = 1; }

    /* A child that ends by signal `sig` sent to itself; its pid and how
       waitpid saw it printed by the parent. */
    static void child_killed(int sig, int redefault) {
        fflush(stdout);
        pid_t c = fork();
        if (c == 0) {
            volatile char* p = malloc(4444);
            p[0] = 1;
            if (redefault) {  /* ignored, then the default again: still noted */
                signal(sig, SIG_IGN);
                signal(sig, SIG_DFL);
            }
            kill(getpid(), sig);
            for (;;) pause();
        }
        int st = 0;
        waitpid(c, &st, 0);
        printf("child %d signal %d\n", (int)c, WIFSIGNALED(st) ? WTERMSIG(st) : -1);
    }

    int main(int argc, char** argv) {
        if (argc > 1 && strcmp(argv[1], "children") == 0) {
            child_killed(SIGTERM, 0);
            child_killed(SIGUSR1, 0);
            child_killed(SIGHUP, 1);
            /* SIGPIPE: writing to a pipe nobody reads */
            int fd[2];
            if (pipe(fd) != 0) return 2;
            fflush(stdout);
            pid_t c = fork();
            if (c == 0) {
                close(fd[0]);
                for (;;) (void)!write(fd[1], "x", 1);
            }
            close(fd[0]);
            close(fd[1]);
            int st = 0;
            waitpid(c, &st, 0);
            printf("child %d signal %d\n", (int)c, WIFSIGNALED(st) ? WTERMSIG(st) : -1);
            return 0;
        }
        if (!strcmp(argv[1], "sysv")) {
            /* the System V calls: what they set is what a later query sees */
            struct sigaction q;
            printf("sigset returned the default: %d\n", sigset(SIGTERM, on_term) == SIG_DFL);
            sigaction(SIGTERM, NULL, &q);
            printf("SIGTERM is the handler: %d\n", q.sa_handler == on_term);
            sigignore(SIGHUP);
            sigaction(SIGHUP, NULL, &q);
            printf("SIGHUP ignored: %d\n", q.sa_handler == SIG_IGN);
            printf("held, the default before: %d\n", sigset(SIGUSR1, SIG_HOLD) == SIG_DFL);
            sigset_t m;
            sigprocmask(SIG_BLOCK, NULL, &m);
            printf("SIGUSR1 blocked: %d\n", sigismember(&m, SIGUSR1));
            printf("released, held before: %d\n", sigset(SIGUSR1, SIG_DFL) == SIG_HOLD);
            raise(SIGTERM);
            printf("handled: %d\n", (int)handled);
            return 0;
        }
        /* "query": what the program sees is the default; a server that puts
           its own SIGTERM handler only over the default does so, and it runs */
        struct sigaction old;
        memset(&old, 0, sizeof old);
        sigaction(SIGTERM, NULL, &old);
        printf("SIGTERM default: %d\n", old.sa_handler == SIG_DFL);
        sigaction(SIGSEGV, NULL, &old);
        printf("SIGSEGV default: %d\n", old.sa_handler == SIG_DFL);
        printf("signal(SIGUSR1) returned the default: %d\n", signal(SIGUSR1, SIG_IGN) == SIG_DFL);
        if (signal(SIGTERM, SIG_DFL) != SIG_DFL) return 3;
        struct sigaction sa;
        memset(&sa, 0, sizeof sa);
        sa.sa_handler = on_term;
        sigemptyset(&sa.sa_mask);
        sigaction(SIGTERM, &sa, &old);
        printf("old was the default: %d\n", old.sa_handler == SIG_DFL);
        raise(SIGTERM);
        printf("handled: %d\n", (int)handled);
        return 0;
    }
""")


def build(tmp_path):
    src = tmp_path / "sig.c"
    src.write_text(PROG)
    subprocess.run(["cc", "-O0", "-o", str(tmp_path / "sig"), str(src)], check=True, timeout=120)
    return str(tmp_path / "sig")


def test_children_ended_by_a_signal_are_named_by_it(cli, tmp_path):
    prog = build(tmp_path)
    p = cli(["--device=cpu", "--analysis=leaks", f"--output={tmp_path}/out", "--", prog, "children"], tmp_path,
            check_rc=0)
    seen = {int(m[1]): int(m[2]) for m in re.finditer(r"^child (\d+) signal (\d+)$", p.stdout, re.M)}
    assert sorted(seen.values()) == [1, 10, 13, 15], p.stdout
    names = {1: "SIGHUP", 10: "SIGUSR1", 13: "SIGPIPE", 15: "SIGTERM"}
    for pid, sig in seen.items():
        words = f"killed by signal {sig} ({names[sig]})"
        assert f"msmemscope: pid {pid} ({prog} children) {words}\n" in p.stdout, p.stdout
        (row,) = [r for r in p.stdout.splitlines() if re.match(rf"^  {pid} +\d+ ", r)]
        assert f" {words} " in row, row
        (folder,) = [d for d in process_dirs(tmp_path / "out") if d.name.startswith(f"msmemscope_{pid}_")]
        ended = json.loads((folder / "summary.json").read_text())["ended"]
        assert ended == {"how": "signal", "code": None, "signal": sig, "text": words}, ended
    assert "without an end record" not in p.stdout + p.stderr


def test_the_program_sees_the_default_dispositions(cli, tmp_path):
    prog = build(tmp_path)
    bare = subprocess.run([prog, "query"], capture_output=True, text=True, timeout=60)
    p = cli(["--device=cpu", f"--output={tmp_path}/out", "--", prog, "query"], tmp_path, check_rc=0)
    assert bare.stdout == ("SIGTERM default: 1\nSIGSEGV default: 1\nsignal(SIGUSR1) returned the default: 1\n"
                           "old was the default: 1\nhandled: 1\n"), bare.stdout
    assert p.stdout.startswith(bare.stdout), p.stdout


def test_the_system_v_calls_are_seen_by_a_later_query(cli, tmp_path):
    # sigset() and sigignore() reach glibc's internal sigaction, past the
    # agent's: a later sigaction() query answered the default the agent
    # hides its own handler behind, not the program's handler.
    prog = build(tmp_path)
    bare = subprocess.run([prog, "sysv"], capture_output=True, text=True, timeout=60)
    assert bare.stdout == ("sigset returned the default: 1\nSIGTERM is the handler: 1\nSIGHUP ignored: 1\n"
                           "held, the default before: 1\nSIGUSR1 blocked: 1\nreleased, held before: 1\n"
                           "handled: 1\n"), bare.stdout
    p = cli(["--device=cpu", f"--output={tmp_path}/out", "--", prog, "sysv"], tmp_path, check_rc=0)
    assert p.stdout.startswith(bare.stdout), p.stdout


def test_python_saves_and_restores_a_handler(cli, tmp_path):
    (tmp_path / "restore.py").write_text(textwrap.dedent("""
        import signal
        print(sorted((s.name, str(signal.getsignal(s))) for s in
                     (signal.SIGABRT, signal.SIGSEGV, signal.SIGTERM, signal.SIGUSR1)))
        for s in (signal.SIGABRT, signal.SIGTERM):
            old = signal.getsignal(s)
            signal.signal(s, lambda *a: None)
            signal.signal(s, old)  # TypeError when old was None
        print("restored")
    """))
    bare = subprocess.run(["/usr/bin/python3", "restore.py"], cwd=tmp_path, capture_output=True, text=True,
                          timeout=60)
    p = cli(["--device=cpu", f"--output={tmp_path}/out", "--", "/usr/bin/python3", "restore.py"], tmp_path,
            env={"PYTHONPATH": ""}, check_rc=0)
    assert bare.stdout.count(", '0')") == 4 and bare.stdout.endswith("restored\n"), bare.stdout
    assert p.stdout.startswith(bare.stdout), p.stdout + p.stderr


def test_a_pool_terminated_names_its_workers_sigterm(cli, tmp_path):
    # `with Pool() as p:` ends with terminate(): SIGTERM to the workers still
    # running. Each worker says it has its task (a byte on a pipe: the
    # barrier), then waits on a pipe nobody writes, so both are running when
    # terminate() comes.
    (tmp_path / "pool.py").write_text(textwrap.dedent("""
        import multiprocessing as mp
        import os

        def work(_):
            os.write(ENTERED, b"x")
            os.read(NEVER, 1)

        if __name__ == "__main__":
            NEVER, _w = os.pipe()
            _r, ENTERED = os.pipe()
            mp.set_start_method("fork")
            pool = mp.Pool(2)
            workers = list(pool._pool)
            pool.map_async(work, range(2), chunksize=1)
            got = b""
            while len(got) < 2:
                got += os.read(_r, 2 - len(got))
            pool.terminate()
            pool.join()
            print("workers", *sorted(w.pid for w in workers), "exitcodes", *sorted(w.exitcode for w in workers),
                  flush=True)
    """))
    p = cli(["--device=cpu", f"--output={tmp_path}/out", "--", "/usr/bin/python3", "pool.py"], tmp_path,
            env={"PYTHONPATH": ""}, check_rc=0)
    m = re.search(r"^workers (\d+) (\d+) exitcodes -15 -15$", p.stdout, re.M)
    assert m, p.stdout + p.stderr
    for pid in (m[1], m[2]):
        (row,) = [r for r in p.stdout.splitlines() if re.match(rf"^  {pid} +\d+ ", r)]
        assert "killed by signal 15 (SIGTERM)" in row, p.stdout
