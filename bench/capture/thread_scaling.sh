#!/usr/bin/env bash
# Issue #18 item 5: msmemscope's 2-thread speed-up over 1 thread against the
# bare program's own, on the same machine, in one run. Each round runs the
# workload bare and under msmemscope (no stacks, default CSV output), with 1
# and then 2 threads, one after the other; the workload times its own loop.
# Printed: every round's speed-ups and their ratio, then the ratio from the
# best loop time of each configuration and the median of the rounds' ratios
# (the bare speed-up itself varies from round to round on a shared VM).
#
# Usage: bench/capture/thread_scaling.sh [build] [pairs per thread] [rounds]
set -euo pipefail
build=${1:-build}
pairs=${2:-2000000}
rounds=${3:-5}
W="$build/bench/bin/bench_capture_workload"
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
loop() { sed -n 's/.*loop_ns=\([0-9]*\).*/\1/p'; }
for r in $(seq "$rounds"); do
  for t in 1 2; do
    echo "$r bare $t $("$W" "$t" "$pairs" | loop)"
    rm -rf "$out/o"
    echo "$r msmemscope $t $("$build/bin/msmemscope" --device=cpu --events=alloc,free --analysis= \
        --output="$out/o" -- "$W" "$t" "$pairs" 2>/dev/null | loop)"
  done
done | awk -v n="$pairs" -v rounds="$rounds" '
  { t[$1, $2, $3] = $4; k = $2 " " $3; if (!(k in best) || $4 < best[k]) best[k] = $4 }
  END {
    printf "round  bare 1->2  msmemscope 1->2  ratio\n"
    for (r = 1; r <= rounds; r++) {
      b = t[r, "bare", 1] / t[r, "bare", 2] * 2; m = t[r, "msmemscope", 1] / t[r, "msmemscope", 2] * 2
      ratio[r] = m / b
      printf "%5d  %9.2f  %15.2f  %5.2f\n", r, b, m, m / b }
    b = best["bare 1"] / best["bare 2"] * 2; m = best["msmemscope 1"] / best["msmemscope 2"] * 2
    printf "best loop of each: bare %.2f Mpairs/s -> %.2f (%.2fx), msmemscope %.2f -> %.2f (%.2fx): ratio %.2f\n",
      n / best["bare 1"] * 1e3, 2 * n / best["bare 2"] * 1e3, b,
      n / best["msmemscope 1"] * 1e3, 2 * n / best["msmemscope 2"] * 1e3, m, m / b
    # median of the rounds ratios (insertion sort: rounds is small)
    for (i = 2; i <= rounds; i++) { v = ratio[i]; j = i - 1; while (j >= 1 && ratio[j] > v) { ratio[j + 1] = ratio[j]; j-- } ratio[j + 1] = v }
    med = rounds % 2 ? ratio[(rounds + 1) / 2] : (ratio[rounds / 2] + ratio[rounds / 2 + 1]) / 2
    printf "median ratio over %d rounds: %.2f\n", rounds, med }'
uptime
