"""relro_pages.py [api]: whether the pages the loader made read-only after
the relocations (each loaded object's PT_GNU_RELRO, rounded as the loader
rounds it) are still read-only in /proc/self/maps, said at three points:
"before", "collecting", "after" (with api: before msmemscope.start(), between
it and msmemscope.stop(), after stop(); without, the three come one after
the other in a process that runs under the CLI). Each line is
"POINT: read-only" or "POINT: writable: NAME, NAME" (tests/python/
test_python_api.py; the heap hooks are written in GOT slots that are in
RELRO pages of Debian's libraries, all linked with -z now)."""
import ctypes
import os
import sys

PT_GNU_RELRO = 0x6474e552


class Phdr(ctypes.Structure):
    _fields_ = [("p_type", ctypes.c_uint32), ("p_flags", ctypes.c_uint32), ("p_offset", ctypes.c_uint64),
                ("p_vaddr", ctypes.c_uint64), ("p_paddr", ctypes.c_uint64), ("p_filesz", ctypes.c_uint64),
                ("p_memsz", ctypes.c_uint64), ("p_align", ctypes.c_uint64)]


class Info(ctypes.Structure):
    _fields_ = [("dlpi_addr", ctypes.c_uint64), ("dlpi_name", ctypes.c_char_p),
                ("dlpi_phdr", ctypes.POINTER(Phdr)), ("dlpi_phnum", ctypes.c_uint16)]


CALLBACK = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.POINTER(Info), ctypes.c_size_t, ctypes.c_void_p)


def relro_pages():
    page = os.sysconf("SC_PAGESIZE")
    ranges = []

    def one(info, size, data):
        i = info.contents
        for k in range(i.dlpi_phnum):
            h = i.dlpi_phdr[k]
            if h.p_type == PT_GNU_RELRO:
                start = (i.dlpi_addr + h.p_vaddr) & ~(page - 1)
                end = (i.dlpi_addr + h.p_vaddr + h.p_memsz) & ~(page - 1)
                if start < end:
                    ranges.append((start, end, (i.dlpi_name or b"").decode() or "(the program)"))
        return 0

    ctypes.CDLL(None).dl_iterate_phdr(CALLBACK(one), None)
    return ranges


def say(point):
    ranges = relro_pages()
    writable = set()
    with open("/proc/self/maps") as f:
        for line in f:
            span, perms = line.split()[:2]
            a, b = (int(x, 16) for x in span.split("-"))
            if perms[1] == "w":
                writable.update(name for start, end, name in ranges if a < end and b > start)
    print(f"{point}: " + ("writable: " + ", ".join(sorted(writable)) if writable else "read-only"), flush=True)


api = sys.argv[1:] == ["api"]
say("before")
if api:
    import msmemscope
    msmemscope.config(device="cpu", output="out")
    msmemscope.start()
kept = [bytearray(1000) for _ in range(10)]
say("collecting")
if api:
    msmemscope.stop()
say("after")
