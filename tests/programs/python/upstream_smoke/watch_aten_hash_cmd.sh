export PYTHONPATH="${MSMEMSCOPE_PYTHON:?}:$PYTHONPATH"

python3 watch_aten.py
