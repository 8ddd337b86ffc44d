"""The memory bounds that apply to a process, computed the way the agent
documents it (framework/agent/memory_bound.h) for a cpu out-of-memory
failure's OOM_Snapshot row: RLIMIT_AS (free: the limit less VmSize),
RLIMIT_DATA (less VmData), the cgroup v2 memory.max of the process's cgroup
and of those above it (less memory.current), the machine (MemTotal,
MemAvailable). The binding one has the least free memory."""
import os
import platform
import resource


def _kib(path, key):
    with open(path) as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1]) * 1024
    return None


def _number(path):
    try:
        with open(path) as f:
            text = f.read().strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None


def _cgroup_bounds():
    try:
        with open("/proc/self/cgroup") as f:
            path = next((line[3:].strip() for line in f if line.startswith("0::")), None)
    except OSError:
        return []
    if not path:
        return []
    out = []
    for mount in ("/sys/fs/cgroup", "/sys/fs/cgroup/unified"):
        parts = [p for p in path.split("/") if p]
        while True:
            d = os.path.join(mount, *parts)
            mx, cur = _number(os.path.join(d, "memory.max")), _number(os.path.join(d, "memory.current"))
            if mx is not None and cur is not None:
                out.append((mx, max(mx - cur, 0)))
            if not parts:
                break
            parts.pop()
    return out


def bounds(rlimits=True):
    """{name: [(total, free), ...]} of the bounds that apply now (rlimits:
    this process's; False for a child run with none set)."""
    got = {}
    if rlimits:
        soft, _ = resource.getrlimit(resource.RLIMIT_AS)
        if soft != resource.RLIM_INFINITY:
            with open("/proc/self/statm") as f:
                vm = int(f.read().split()[0]) * os.sysconf("SC_PAGESIZE")
            got["RLIMIT_AS"] = [(soft, max(soft - vm, 0))]
        soft, _ = resource.getrlimit(resource.RLIMIT_DATA)
        major, minor = (int(x) for x in platform.release().split(".")[:2])
        if soft != resource.RLIM_INFINITY and (major, minor) >= (4, 7):
            got["RLIMIT_DATA"] = [(soft, max(soft - _kib("/proc/self/status", "VmData"), 0))]
    if _cgroup_bounds():
        got["cgroup"] = _cgroup_bounds()
    got["machine"] = [(_kib("/proc/meminfo", "MemTotal"), _kib("/proc/meminfo", "MemAvailable"))]
    return got


def check_snapshot_bound(attr, rlimits=True):
    """An OOM_Snapshot row's Attr against the bounds here: its limit names
    one that applies, total is that one's limit, free is at most total,
    device_rate is the used share; with the machine the only bound, it is
    the machine's MemTotal."""
    b = bounds(rlimits)
    limit, total, free = attr["limit"], int(attr["total"]), int(attr["free"])
    assert limit in b, (attr, b)
    assert total in [t for t, _ in b[limit]], (attr, b)
    assert 0 <= free <= total
    assert attr["device_rate"] == "%f" % (100.0 * (total - free) / total)
    if list(b) == ["machine"]:
        assert (limit, total) == ("machine", b["machine"][0][0])
    return limit, total, free
