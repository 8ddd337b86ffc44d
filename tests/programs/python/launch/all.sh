# Every way a shell script commonly reaches a Python interpreter; each must be
# profiled as Python (tests/python/test_python_any_launch.py).
set -e
python3 prog.py bash
sh -c '/usr/bin/python3 prog.py sh'
env python3 prog.py env
nohup /usr/bin/python3 prog.py nohup < /dev/null
echo xargs | xargs /usr/bin/python3 prog.py
./shebang.py shebang
./py prog.py symlink
python3 -m prog module
