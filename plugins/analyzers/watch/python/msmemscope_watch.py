"""Target-side helper of watch (see ../README.md for the event contract).

Shipped in the package as msmemscope._watch_protocol: the package's own
watcher (bindings/msmemscope/watcher.py: --watch, watcher.watch(tensor,
name=..., dump_nums=...) and its checkpoint budget) takes parse_spec,
crc64_py and new_staging_file from here. Watcher below is the op-level
state machine on its own, for a program that drives it by hand (the test
programs do):

    w = Watcher.from_spec(spec_text)      # e.g. "aten::mul:out0,aten::sum"
    w.before_op(name, device_kind, device_id)
    ... run the op ...
    w.after_op(name, outputs, device_kind, device_id)   # outputs: list of CPU tensors

Its add(tensor, name) checks a tensor at every checkpoint: it has no budget
(a budget that ran out must be said, and only the package's watcher says it).
Hashing is done in C (libmsms_watch.so, found next to the agent) on the
tensor's bytes; without that library a pure-Python CRC-64 is used.
"""
import ctypes
import os

_POLY = 0x42F0E1EBA9EA3693
_MASK = 0xFFFFFFFFFFFFFFFF
_TABLE = None
_LIB = None

DEV_CPU = 1


def _table():
    global _TABLE
    if _TABLE is None:
        t = []
        for i in range(256):
            c = i
            for _ in range(8):
                c = (c >> 1) ^ _POLY if c & 1 else c >> 1
            t.append(c)
        _TABLE = t
    return _TABLE


def crc64_py(data):
    """Upstream's CRC-64 in pure Python (slow; a fallback)."""
    t = _table()
    c = _MASK
    for b in bytes(data):
        c = (c >> 8) ^ t[(c ^ b) & 0xFF]
    return c ^ _MASK


def load_library(path=None):
    """Loads libmsms_watch.so (path, $MSMEMSCOPE_HOME/lib/msmemscope/agent, or the loader's search)."""
    global _LIB
    if _LIB is not None:
        return _LIB
    candidates = [path] if path else []
    home = os.environ.get("MSMEMSCOPE_HOME")
    if home:
        candidates.append(os.path.join(home, "lib", "msmemscope", "agent", "libmsms_watch.so"))
    candidates.append("libmsms_watch.so")
    for c in candidates:
        try:
            lib = ctypes.CDLL(c)
        except OSError:
            continue
        lib.msms_watch_crc64.restype = ctypes.c_uint64
        lib.msms_watch_crc64.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
        lib.msms_watch_record.restype = ctypes.c_int
        lib.msms_watch_record.argtypes = [ctypes.c_char_p, ctypes.c_uint64, ctypes.c_char_p, ctypes.c_uint64,
                                          ctypes.c_int, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_char_p,
                                          ctypes.c_uint16, ctypes.c_int16]
        _LIB = lib
        return lib
    return None


def crc64(data):
    lib = load_library()
    buf = bytes(data)
    if lib is not None:
        return lib.msms_watch_crc64(ctypes.c_char_p(buf), len(buf))
    return crc64_py(buf)


_staged = [0]


def new_staging_file(folder=None, token=None):
    """A new full-content staging file, (fd, name), in the run's session
    folder ($MSMEMSCOPE_SESSION) named watch_{token}_{pid}_{n}.bin with the
    run's token ($MSMEMSCOPE_WATCH_TOKEN): the only files the host's watch
    analyzer moves (../README.md). None without a session."""
    folder = folder or os.environ.get("MSMEMSCOPE_SESSION", "")
    token = token or os.environ.get("MSMEMSCOPE_WATCH_TOKEN", "")
    if not folder or len(token) != 32:
        return None
    # Relative to the session folder opened without following a link (#29 item 4).
    try:
        dir_fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        while True:
            _staged[0] += 1
            name = "watch_%s_%d_%d.bin" % (token, os.getpid(), _staged[0])
            try:
                fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600,
                             dir_fd=dir_fd)
            except FileExistsError:
                continue
            except OSError:
                return None
            return fd, name
    finally:
        os.close(dir_fd)


def tensor_buffer(t):
    """(address, nbytes) of a contiguous CPU tensor's data (a contiguous copy otherwise)."""
    if not t.is_contiguous():
        t = t.contiguous()
    return t, t.data_ptr(), t.numel() * t.element_size()


def parse_spec(text):
    """'[start[:outN],]end[,full-content]' -> (start, out_index, end, full_content)."""
    items = [s.strip() for s in text.replace("\uff0c", ",").split(",") if s.strip()]
    full = bool(items) and items[-1] == "full-content"
    if full:
        items.pop()
    start, out, end = None, None, None
    if len(items) == 1:
        end = items[0]
    elif len(items) == 2:
        start, end = items
        head, sep, tail = start.rpartition(":")
        if sep and tail.startswith("out") and tail[3:].isdigit():
            start, out = head, int(tail[3:])
    else:
        raise ValueError(f"invalid watch spec {text!r} (allowed: [start[:outN],]end[,full-content])")
    return start, out, end, full


class Watcher:
    def __init__(self, start=None, out_index=None, end=None, full_content=False, record=None):
        self.start, self.out_index, self.end, self.full = start, out_index, end, full_content
        self.counts = {}
        self.watched = []        # (tensor, watched_name, idx)
        self.active = start is None and end is not None
        self.record = record     # record(op, count, watched, idx, after, tensor, dev_kind, dev_id)

    @classmethod
    def from_spec(cls, text, record=None):
        s, o, e, f = parse_spec(text)
        return cls(s, o, e, f, record)

    def add(self, tensor, name="UNKNOWN"):
        self.watched.append((tensor, name, len(self.watched)))

    def remove(self, tensor):
        self.watched = [w for w in self.watched if w[0] is not tensor]

    def _dump(self, op, count, after, dev_kind, dev_id):
        for t, name, idx in self.watched:
            self._emit(op, count, name, idx, after, t, dev_kind, dev_id)

    def _emit(self, op, count, watched, idx, after, t, dev_kind, dev_id):
        if self.record is not None:
            return self.record(op, count, watched, idx, after, t, dev_kind, dev_id)
        lib = load_library()
        if lib is None:
            return
        t, addr, n = tensor_buffer(t)
        path = None
        if self.full:
            staged = new_staging_file()
            if staged is not None:
                fd, path = staged
                with os.fdopen(fd, "wb") as f:
                    f.write(ctypes.string_at(addr, n))
        lib.msms_watch_record(op.encode(), count, str(watched).encode(), idx, 1 if after else 0,
                              ctypes.c_void_p(addr), n, path.encode() if path else None, dev_kind, dev_id)

    def before_op(self, op, dev_kind=DEV_CPU, dev_id=-1):
        self.counts[op] = self.counts.get(op, 0) + 1
        if self.watched and (self.active or self.start is None):
            self._dump(op, self.counts[op], False, dev_kind, dev_id)

    def after_op(self, op, outputs=(), dev_kind=DEV_CPU, dev_id=-1):
        count = self.counts.get(op, 0)
        if self.start is not None and not self.active and op == self.start:
            outs = list(outputs)
            if self.out_index is not None and self.out_index < len(outs):
                outs = [outs[self.out_index]]
                first = self.out_index
            else:
                first = 0
            self.watched = [(t, op, first + i) for i, t in enumerate(outs)]
            self.active = True
            # numbered like the call's before dumps: the op's n-th call
            self._dump(op, count, True, dev_kind, dev_id)
            return
        if self.watched and (self.active or self.start is None):
            self._dump(op, count, True, dev_kind, dev_id)
        if self.end is not None and op == self.end and self.active:
            self.active = False
            if self.start is not None:
                self.watched = []
