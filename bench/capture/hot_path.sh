#!/usr/bin/env bash
# The capture hot path's cost per malloc/free pair (issue #18 items 5 and 6),
# measured in a way that survives a loaded machine: the workload reports its
# own user and kernel CPU time, runs bare and under each given build's
# msmemscope (no stacks) alternate, and the minimum of each over the rounds is
# kept. With --perf, a cpu-clock profile of the target under the first build
# is broken down per function into ns per pair (its share of the target's
# samples times the run's own CPU per pair).
#
# Usage: bench/capture/hot_path.sh [--perf] THREADS PAIRS ROUNDS BUILD [BUILD...]
#   e.g. bench/capture/hot_path.sh 1 1000000 5 build
#        bench/capture/hot_path.sh 2 1000000 5 build           (2 threads: CPU per pair per thread)
#        bench/capture/hot_path.sh --perf 1 3000000 1 build
set -euo pipefail
perf_mode=0
if [ "${1:-}" = "--perf" ]; then perf_mode=1; shift; fi
T=$1 N=$2 R=$3
shift 3
W="$1/bench/bin/bench_capture_workload"
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
base=(--device=cpu --events=alloc,free --analysis=)
fields() { grep -o 'loop_ns=.*' || { echo "no loop_ns in the output" >&2; exit 1; }; }
for r in $(seq "$R"); do
  echo "bare $("$W" "$T" "$N" | fields)"
  for b in "$@"; do
    rm -rf "$out/o"
    echo "$b $("$b/bin/msmemscope" "${base[@]}" --output="$out/o" -- "$W" "$T" "$N" 2>/dev/null | fields)"
  done
done | awk -v n="$N" -v t="$T" '
  { for (i = 2; i <= NF; i++) { split($i, a, "="); v[a[1]] = a[2] }
    l = v["loop_ns"] / n; u = v["user_ns"] / n / t; s = v["sys_ns"] / n / t; k = $1
    printf "%-30s loop %7.1f  user %6.1f  sys %6.1f  ns/pair\n", k, l, u, s
    if (!(k in ml) || l < ml[k]) ml[k] = l
    if (!(k in mu) || u < mu[k]) mu[k] = u
    if (!(k in ms) || s < ms[k]) ms[k] = s }
  END { print "minimum over the rounds (CPU per pair per thread; added = minus bare):"
        for (k in ml) printf "  %-30s loop %7.1f (+%6.1f)  user %6.1f (+%6.1f)  sys %6.1f (+%5.1f)\n",
          k, ml[k], ml[k] - ml["bare"], mu[k], mu[k] - mu["bare"], ms[k], ms[k] - ms["bare"] }'
if [ "$perf_mode" = 1 ]; then
  rm -rf "$out/o"
  line=$(perf record -q -e cpu-clock -F 4999 -o "$out/perf.data" -- "$1/bin/msmemscope" "${base[@]}" \
         --output="$out/o" -- "$W" "$T" "$N" 2>/dev/null | fields)
  cpu=$(echo "$line" | sed 's/.*cpu_ns=\([0-9]*\).*/\1/')
  echo "perf (cpu-clock), target only, ns per pair per thread from this run's CPU (${cpu} ns in all):"
  perf script -i "$out/perf.data" --comm bench_capture_w -F ip,sym,dso -G 2>/dev/null | awk -v c="$cpu" -v n="$N" -v t="$T" '
    NF >= 2 { dso = $NF; sym = $2; for (i = 3; i < NF; i++) sym = sym " " $i; gsub(/.*\//, "", dso); gsub(/[()]/, "", dso)
              tot++; s[sym " (" dso ")"]++ }
    END { for (k in s) if (s[k] / tot >= 0.004) printf "%7.1f  %5.1f%%  %s\n", c / n / t * s[k] / tot, 100 * s[k] / tot, k }' |
    sort -rn
fi
uptime
