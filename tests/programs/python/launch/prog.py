"""Started by tests/python/test_python_any_launch.py in many ways (a shell
script, sh -c, env, nohup, xargs, a #! line, a symlinked interpreter,
python -m): allocates one 3 MiB + 1 block from make() and says who it is."""
import os
import subprocess
import sys


def make():
    return bytearray(3 << 20)


keep = make()
# What a child that is not Python sees of PYTHONPATH (our boot path must not leak into it).
child = subprocess.run(["/bin/sh", "-c", 'printf %s "${PYTHONPATH-<unset>}"'], capture_output=True, text=True).stdout
print("TAG", sys.argv[1] if len(sys.argv) > 1 else "module", os.getpid(),
      repr(os.environ.get("PYTHONPATH")), repr(child), flush=True)
