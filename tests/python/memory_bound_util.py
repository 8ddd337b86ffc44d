"""The memory bounds that apply to a process, computed the way the agent
documents it (framework/agent/memory_bound.h) for a cpu out-of-memory
failure's OOM_Snapshot row: RLIMIT_AS (free: the limit less VmSize),
RLIMIT_DATA (less VmData), the memory limit of the process's memory cgroup
and of those above it (cgroup v2 memory.max less memory.current; cgroup v1
memory.limit_in_bytes less memory.usage_in_bytes), found where
/proc/self/mountinfo says the hierarchies are, the machine (MemTotal,
MemAvailable). The binding one has the least free memory."""
import os
import platform
import re
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


# v1's memory.limit_in_bytes when there is none: LONG_MAX rounded down to the
# page (up to 64 KiB pages)
_V1_NO_LIMIT = (2**63 - 1) & ~0xFFFF


def is_no_limit(n):
    return n >= _V1_NO_LIMIT


def _unescape(field):
    """A mountinfo path with its octal escapes (\\040: a space) undone."""
    return re.sub(r"\\([0-3][0-7]{2})", lambda m: chr(int(m.group(1), 8)), field)


def _cgroup_paths():
    """{"v2": path, "v1": path} of this process's cgroups (v1: the memory
    controller's hierarchy, whichever controllers share it)."""
    paths = {}
    try:
        with open("/proc/self/cgroup") as f:
            for line in f:
                hid, controllers, path = line.rstrip("\n").split(":", 2)
                if hid == "0" and controllers == "":
                    paths["v2"] = path
                elif "memory" in controllers.split(","):
                    paths["v1"] = path
    except OSError:
        pass
    return paths


def _mounts(kind):
    """(root, mount point) of each mount of the hierarchy (v2: fstype
    cgroup2; v1: cgroup with the memory option)."""
    out = []
    try:
        with open("/proc/self/mountinfo") as f:
            for line in f:
                left, _, right = line.partition(" - ")
                fields, rfields = left.split(" "), right.split(" ")
                if len(fields) < 5 or len(rfields) < 3:
                    continue
                fstype, options = rfields[0], rfields[2].strip().split(",")
                if (kind == "v2" and fstype == "cgroup2") or (kind == "v1" and fstype == "cgroup" and
                                                             "memory" in options):
                    out.append((_unescape(fields[3]), _unescape(fields[4])))
    except OSError:
        pass
    return out


def _cgroup_dir(kind, path):
    """(the directory of cgroup path, the mount point above which the walk
    stops), from the first mount whose root holds it; else systemd's
    places."""
    for root, point in _mounts(kind):
        root = root.rstrip("/")
        if path == root or path.startswith(root + "/"):
            return [(point.rstrip("/") + path[len(root):], point)]
    places = ["/sys/fs/cgroup", "/sys/fs/cgroup/unified"] if kind == "v2" else ["/sys/fs/cgroup/memory"]
    return [(p + path, p) for p in places]


_FILES = {"v2": ("memory.max", "memory.current", None),
          "v1": ("memory.limit_in_bytes", "memory.usage_in_bytes", "memory.use_hierarchy")}


def _cgroup_bounds():
    """(limit, free) of each limited memory cgroup from this process's up:
    v2 and v1 (v1: while the cgroup above counts its children)."""
    out = []
    for kind, path in _cgroup_paths().items():
        limit_file, usage_file, counts_children = _FILES[kind]
        for d, top in _cgroup_dir(kind, path):
            d = d.rstrip("/") or "/"
            while True:
                mx, cur = _number(os.path.join(d, limit_file)), _number(os.path.join(d, usage_file))
                if mx is not None and cur is not None and not is_no_limit(mx):
                    out.append((mx, max(mx - cur, 0)))
                if len(d) <= len(top.rstrip("/")):
                    break
                d = os.path.dirname(d)
                if counts_children and _number(os.path.join(d, counts_children)) == 0:
                    break
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
