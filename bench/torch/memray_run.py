#!/usr/bin/env python3
"""What `memray run [--native] -q -o OUT SCRIPT ARGS...` does (memray's
commands/run.py, _run_tracker), through memray's Python API: a Tracker
writing OUT around runpy.run_path(SCRIPT). run.py uses it because memray's
command line imports its live viewer's `textual` (>= 0.41) at start-up,
which Debian 12 packages only as 0.1.13; the tracking is the same.

Usage: memray_run.py [--native] OUT SCRIPT [ARGS...]
"""
import os
import pathlib
import runpy
import sys

import memray


def main(argv):
    native = bool(argv) and argv[0] == "--native"
    if native:
        argv = argv[1:]
    if len(argv) < 2:
        sys.exit(__doc__)
    out, script, args = argv[0], argv[1], argv[2:]
    with memray.Tracker(destination=memray.FileDestination(out, overwrite=True), native_traces=native):
        sys.path[0] = str(pathlib.Path(script).resolve().parent)
        sys.argv = [script, *args]
        runpy.run_path(script, run_name="__main__")


if __name__ == "__main__":
    main(sys.argv[1:])
