"""The `msmemscope` console command of a pip install: runs the msmemscope
binary installed with this package (msmemscope/_prefix/bin/msmemscope) with
the same arguments, as that process (exec), so that signals, the exit status
and the terminal are the binary's own."""
import os
import sys


def main():
    from ._paths import PREFIX

    exe = os.path.join(PREFIX, "bin", "msmemscope")
    if not os.access(exe, os.X_OK):
        sys.stderr.write(f"msmemscope: error: the msmemscope binary is missing: {exe} (reinstall the package)\n")
        return 70
    os.execv(exe, [exe] + sys.argv[1:])


if __name__ == "__main__":
    sys.exit(main())
