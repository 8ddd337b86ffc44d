#!/bin/bash
# Issue #18 items 1 and 2 on a noisy machine: msmemscope (--data-format=db
# or csv, --call-stack=c:32) and heaptrack run the same workload one after
# the other, round after round, so that both see the same machine; prints
# every round's wall and CPU seconds and their ratio, then the median ratio.
#
#   bench/scale/rounds_vs_heaptrack.sh [build] [rounds] [db|csv] [pairs] [reference build]
#
# Defaults: build, 7 rounds, db, 500000 malloc/free pairs (1M rows).
#
# A reference build (another checkout's build folder, e.g. the commit whose
# figure an issue asks to keep) runs the same workload in the same rounds,
# a third column: "what was reached" is then checked on this machine, as
# this build's time over the reference's, whatever heaptrack's ratio is
# here (it moves with the machine: the CPU count, the disk).
set -eu
build=${1:-build}
rounds=${2:-7}
format=${3:-db}
pairs=${4:-500000}
ref=${5:-}
prog="$build/bench/bin/bench_capture_workload"
cli="$build/bin/msmemscope"
command -v heaptrack >/dev/null || { echo "heaptrack is not installed (apt-get install heaptrack)" >&2; exit 2; }
[ -x "$prog" ] && [ -x "$cli" ] || { echo "build $build first (bench_capture_workload, msmemscope)" >&2; exit 2; }
if [ -n "$ref" ]; then
    [ -x "$ref/bin/msmemscope" ] || { echo "reference build $ref has no bin/msmemscope" >&2; exit 2; }
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# wall, user+system CPU of one command (its output thrown away)
timed() {
    /usr/bin/time -o "$work/time" -f "%e %U %S" "$@" >/dev/null 2>&1
    awk '{printf "%.2f %.2f", $1, $2 + $3}' "$work/time"
}
# one msmemscope run of the workload by the CLI $1
ours() {
    rm -rf "$work/out"
    timed "$1" --device=cpu --events=alloc,free --analysis= --call-stack=c:32 \
        --data-format="$format" --output="$work/out" -- "$prog" 1 "$pairs"
}
median() {
    sort -n | awk '{a[NR]=$1} END{printf "%s over %d rounds; best %s, worst %s", a[int((NR+1)/2)], NR, a[1], a[NR]}'
}

echo "workload: $pairs malloc/free pairs, 20 frames deep, --call-stack=c:32, --data-format=$format; load $(cut -d' ' -f1 /proc/loadavg)"
[ -n "$ref" ] && echo "reference build: $ref ($(git -C "$ref" rev-parse --short HEAD 2>/dev/null || echo 'not a git checkout'))"
if [ -n "$ref" ]; then
    printf '%-6s %22s %22s %22s %8s %8s\n' round "msmemscope wall/CPU s" "heaptrack wall/CPU s" "reference wall/CPU s" ratio "vs ref"
else
    printf '%-6s %22s %22s %8s\n' round "msmemscope wall/CPU s" "heaptrack wall/CPU s" ratio
fi
ratios=()
vs_ref=()
for i in $(seq "$rounds"); do
    read -r ow oc <<<"$(ours "$cli")"
    rm -rf "$work/ht"
    mkdir -p "$work/ht"
    read -r hw hc <<<"$(timed heaptrack -o "$work/ht/trace" "$prog" 1 "$pairs")"
    r=$(awk -v a="$ow" -v b="$hw" 'BEGIN{printf "%.2f", a / b}')
    ratios+=("$r")
    if [ -n "$ref" ]; then
        read -r rw rc <<<"$(ours "$ref/bin/msmemscope")"
        v=$(awk -v a="$ow" -v b="$rw" 'BEGIN{printf "%.2f", a / b}')
        vs_ref+=("$v")
        printf '%-6s %15s / %-5s %15s / %-5s %15s / %-5s %8s %8s\n' "$i" "$ow" "$oc" "$hw" "$hc" "$rw" "$rc" "$r" "$v"
    else
        printf '%-6s %15s / %-5s %15s / %-5s %8s\n' "$i" "$ow" "$oc" "$hw" "$hc" "$r"
    fi
done
echo "median ratio (msmemscope / heaptrack, wall): $(printf '%s\n' "${ratios[@]}" | median)"
[ -n "$ref" ] && echo "median ratio (msmemscope / reference build, wall): $(printf '%s\n' "${vs_ref[@]}" | median)"
exit 0
