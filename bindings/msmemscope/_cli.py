"""The `msmemscope` console command of a pip install: runs the msmemscope
host binary installed with this package (msmemscope/_prefix/bin/msmemscope.bin)
with the same arguments, as that process (exec), so that signals, the exit
status and the terminal are the binary's own.

As root the binary passes the host's trust check first (#29): MSMEMSCOPE_HOME
may name a tree another user owns. `--load-api-env` / `--unload-api-env`
change the calling shell, so they must be sourced: `source msmemscope
--load-api-env` reads the installed command as a shell script (its shell
part sources _prefix/bin/msmemscope); run as a command they are an error."""
import os
import sys


def main():
    from ._paths import HOST, PREFIX, untrusted_reason

    if len(sys.argv) > 1 and sys.argv[1] in ("--load-api-env", "--unload-api-env"):
        wrapper = os.path.join(PREFIX, "bin", "msmemscope")
        sys.stderr.write(f"msmemscope: error: {sys.argv[1]} must be sourced (from bash or zsh), so that it changes the calling shell's "
                         f"environment: source {sys.argv[0]} {sys.argv[1]} (or: source {wrapper} {sys.argv[1]})\n")
        return 2
    if not os.access(HOST, os.X_OK):
        sys.stderr.write(f"msmemscope: error: the msmemscope binary is missing: {HOST} (reinstall the package)\n")
        return 70
    why = untrusted_reason(HOST)
    if why:
        sys.stderr.write(f"msmemscope: error: the host binary {HOST} is refused: {why}\n")
        return 2
    os.execv(HOST, [HOST] + sys.argv[1:])


if __name__ == "__main__":
    sys.exit(main())
