#!/usr/bin/env bash
# Capture-path scaling without the host competing for the cores.
#
# On a 2-vCPU machine the host process (decode + CSV) needs one core while the
# program runs, so "2 threads vs 1" there measures the machine, not the
# capture path. The agent never waits for the host (records go into the
# capture file), so here the host -- the CLI and its pipeline worker, every
# process of the run but the workload -- is stopped (SIGSTOP) while the
# workload runs and resumed afterwards to write everything; the workload
# times its own loop. Usage: bench/capture/scaling_host_stopped.sh [build] [pairs] [repeat]
set -euo pipefail
build=${1:-build}
pairs=${2:-300000}
repeat=${3:-3}
W="$build/bench/bin/bench_capture_workload"
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
best() { sort -n | head -1; }
for t in 1 2; do
  for r in $(seq "$repeat"); do
    rm -rf "$out/o"
    "$build/bin/msmemscope" --device=cpu --events=alloc,free --analysis= --output="$out/o" -- "$W" "$t" "$pairs" \
        > "$out/log" 2>&1 &
    host=$!
    # The whole host: the CLI and every child of it but the workload (the
    # pipeline worker that reads the capture is the CLI's child). Stopped
    # twice over: a worker forked while the first round of signals went out
    # is stopped by the second.
    prog=
    for _ in $(seq 2000); do
      prog=$(pgrep -P "$host" -f bench_capture_workload || true)
      [ -n "$prog" ] || ! kill -0 "$host" 2> /dev/null && break
      sleep 0.005
    done
    [ -n "$prog" ] || { echo "the workload was not seen running (ended already? give more pairs)" >&2; exit 1; }
    stopped=()
    for pass in 1 2; do
      for p in "$host" $(pgrep -P "$host" || true); do
        [ "$p" = "$prog" ] && continue
        kill -STOP "$p" 2> /dev/null && stopped+=("$p")
      done
    done
    while kill -0 "$prog" 2> /dev/null && ! ps -o stat= -p "$prog" | grep -q "^Z"; do sleep 0.02; done
    for p in "${stopped[@]}"; do kill -CONT "$p" 2> /dev/null || true; done
    wait "$host"
    grep -q "dropped: 0" "$out/log" || { echo "events were dropped" >&2; exit 1; }
    sed -n 's/.*loop_ns=\([0-9]*\).*/\1/p' "$out/log"
  done | best > "$out/t$t"
done
t1=$(cat "$out/t1"); t2=$(cat "$out/t2")
awk -v t1="$t1" -v t2="$t2" -v p="$pairs" 'BEGIN {
  r1 = 2 * p / (t1 / 1e9); r2 = 2 * 2 * p / (t2 / 1e9);
  printf "threads  loop ms   M events/s  vs 1 thread\n";
  printf "1        %7.1f   %9.2f   1.00\n", t1 / 1e6, r1 / 1e6;
  printf "2        %7.1f   %9.2f   %.2f\n", t2 / 1e6, r2 / 1e6, r2 / r1 }'
