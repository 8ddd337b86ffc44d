#!/bin/bash
# Issue #18 items 1 and 2 on a noisy machine: msmemscope (--data-format=db
# or csv, --call-stack=c:32) and heaptrack run the same workload one after
# the other, round after round, so that both see the same machine; prints
# every round's wall and CPU seconds and their ratio, then the median ratio.
#
#   bench/scale/rounds_vs_heaptrack.sh [build dir] [rounds] [db|csv] [pairs]
#
# Defaults: build, 7 rounds, db, 500000 malloc/free pairs (1M rows).
set -eu
build=${1:-build}
rounds=${2:-7}
format=${3:-db}
pairs=${4:-500000}
prog="$build/bench/bin/bench_capture_workload"
cli="$build/bin/msmemscope"
command -v heaptrack >/dev/null || { echo "heaptrack is not installed (apt-get install heaptrack)" >&2; exit 2; }
[ -x "$prog" ] && [ -x "$cli" ] || { echo "build $build first (bench_capture_workload, msmemscope)" >&2; exit 2; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# wall, user+system CPU of one command (its output thrown away)
timed() {
    /usr/bin/time -o "$work/time" -f "%e %U %S" "$@" >/dev/null 2>&1
    awk '{printf "%.2f %.2f", $1, $2 + $3}' "$work/time"
}

echo "workload: $pairs malloc/free pairs, 20 frames deep, --call-stack=c:32, --data-format=$format; load $(cut -d' ' -f1 /proc/loadavg)"
printf '%-6s %22s %22s %8s\n' round "msmemscope wall/CPU s" "heaptrack wall/CPU s" ratio
ratios=()
for i in $(seq "$rounds"); do
    rm -rf "$work/out" "$work/ht"
    mkdir -p "$work/ht"
    read -r ow oc <<<"$(timed "$cli" --device=cpu --events=alloc,free --analysis= --call-stack=c:32 \
        --data-format="$format" --output="$work/out" -- "$prog" 1 "$pairs")"
    read -r hw hc <<<"$(timed heaptrack -o "$work/ht/trace" "$prog" 1 "$pairs")"
    r=$(awk -v a="$ow" -v b="$hw" 'BEGIN{printf "%.2f", a / b}')
    ratios+=("$r")
    printf '%-6s %15s / %-5s %15s / %-5s %8s\n' "$i" "$ow" "$oc" "$hw" "$hc" "$r"
done
printf '%s\n' "${ratios[@]}" | sort -n | awk '{a[NR]=$1} END{printf "median ratio (msmemscope / heaptrack, wall): %s over %d rounds; best %s, worst %s\n", a[int((NR+1)/2)], NR, a[1], a[NR]}'
