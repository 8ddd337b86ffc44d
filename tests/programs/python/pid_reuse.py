"""pid_reuse.py: two processes of one run get the same pid, deterministically
(tests/python/test_hardening_low_items.py). In a new pid namespace (needs
CAP_SYS_ADMIN: root) its first process, pid 1 there, forks A, which holds a
block of 3 MiB and is killed by SIGKILL (no end record); then it sets the
namespace's last pid (ns_last_pid) so that its next child, B, gets A's pid,
and B exits 0. Prints "reused PID" (the pid in the namespace), or "not
reused A B" and exits 3; "no pid namespace: WHY" and exits 4 where unshare
is refused."""
import ctypes
import os
import signal
import sys

CLONE_NEWPID = 0x20000000

libc = ctypes.CDLL(None, use_errno=True)
if libc.unshare(CLONE_NEWPID) != 0:
    print("no pid namespace:", os.strerror(ctypes.get_errno()), flush=True)
    sys.exit(4)
init = os.fork()  # pid 1 of the namespace: nothing else forks in it
if init == 0:
    ready_r, ready_w = os.pipe()
    a = os.fork()
    if a == 0:
        held = bytearray(3 << 20)
        os.write(ready_w, b"x")
        while True:
            signal.pause()  # until killed
    os.read(ready_r, 1)
    os.kill(a, signal.SIGKILL)
    os.waitpid(a, 0)
    with open("/proc/sys/kernel/ns_last_pid", "w") as f:
        f.write(str(a - 1))
    b = os.fork()
    if b == 0:
        os._exit(0)
    os.waitpid(b, 0)
    if a != b:
        print("not reused", a, b, flush=True)
        os._exit(3)
    print("reused", a, flush=True)
    os._exit(0)
_, status = os.waitpid(init, 0)
sys.exit(os.waitstatus_to_exitcode(status))
