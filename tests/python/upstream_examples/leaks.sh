#!/bin/bash
# Adapted from upstream's example/leaks/python/test_leaks.sh: sets the
# library path the way upstream's script does (LD_PRELOAD of the tool's
# hook libraries; here TOOL_PRELOAD, given by the test, names a library to
# preload, and may be empty), then runs the Python example.
if [ -n "${TOOL_PRELOAD}" ]; then
    export LD_PRELOAD=${TOOL_PRELOAD}
fi
export LD_LIBRARY_PATH=${TOOL_LIB_PATH}:${LD_LIBRARY_PATH}
"${PYTHON:-python3}" leaks_api.py
