"""Interleaved rounds for the #30 loop benchmarks (step_overhead.py,
loop_parts.py): every variant runs once per round, in turn, so that all of
them see the same moments of a shared machine; a round counts only whole,
since ratios are paired within it. And the statistics that judge #30's
targets from such rounds (run.py, loop_cpu.py): the median's confidence
interval and the verdict against a target."""
import subprocess
import sys
import tempfile
from math import comb


def interleaved(variants, rounds, measure, describe):
    """variants: [(key, how)]; measure(how) -> a result, or None when the run
    failed (the round is dropped); describe(key, result) -> the round line's
    text for it. Returns {key: [result of each whole round]}."""
    res = {k: [] for k, _ in variants}
    for rnd in range(rounds):
        got = {}
        for key, how in variants:
            r = measure(how)
            if r is None:
                break
            got[key] = r
        if len(got) != len(variants):
            continue
        for k, r in got.items():
            res[k].append(r)
        print("round %d: " % (rnd + 1) + "  ".join(describe(k, got[k]) for k, _ in variants), flush=True)
    return res


def output_line(cmd, workdir, prefix):
    """Runs cmd(d) in a fresh folder d below workdir (removed after) and
    returns the text after `prefix` on the first stdout line that starts
    with it, or None (said on stderr) when no line does."""
    d = tempfile.mkdtemp(prefix="out_", dir=workdir)
    p = subprocess.run(cmd(d), cwd=d, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    subprocess.run(["rm", "-rf", d])
    for line in p.stdout.splitlines():
        if line.startswith(prefix):
            return line[len(prefix):]
    sys.stderr.write("FAILED (%s): %s\n" % (p.returncode, " ".join(cmd(d))))
    return None


def median_ci(values, level=0.90):
    """The median of values and a distribution-free confidence interval for
    it (order statistics: the k-th smallest and k-th largest, k the largest
    with P(Binomial(n, 1/2) < k) <= (1 - level) / 2; its coverage is at
    least `level`). None for the bounds when n is too small (n < 5 at 90%)."""
    xs = sorted(values)
    n = len(xs)
    if n == 0:
        return None, None, None
    mid = xs[n // 2] if n % 2 else (xs[n // 2 - 1] + xs[n // 2]) / 2
    tail, cdf, k = (1 - level) / 2, 0.0, 0
    while k < n:
        cdf += comb(n, k) / 2 ** n  # P(B <= k)
        if cdf > tail:
            break
        k += 1
    # P(B <= k - 1) <= tail: the interval [x_(k), x_(n-k+1)] (1-based)
    if k == 0:
        return mid, None, None
    return mid, xs[k - 1], xs[n - k]


def verdict(vals, target):
    """Met when the interval's upper bound is at or under the target, not met
    when its lower bound is over it, else within the noise."""
    m, lo, hi = median_ci(vals)
    if hi is None:
        return "too few rounds"
    if hi <= target:
        return "met (margin %.3f)" % (target - hi)
    if lo > target:
        return "NOT met"
    return "not shown (interval holds %.2f)" % target
