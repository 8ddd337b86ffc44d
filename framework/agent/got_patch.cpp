// GOT patching (see got_patch.h). Walks every loaded object with
// dl_iterate_phdr, reads its dynamic section (symbol table, string table,
// PLT and GLOB_DAT relocations) and overwrites the slots of the hooked
// symbols. A slot's page is made writable for the write and then given back
// the protection it had: RELRO pages (PT_GNU_RELRO, read-only once the loader
// relocated the object: all of .got under -z now) stay read-only for the rest
// of the process, and after an --attach's detach. No malloc: fixed tables.
#include "got_patch.h"

#include <dlfcn.h>
#include <elf.h>
#include <errno.h>
#include <fcntl.h>
#include <link.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>

#include "channel.h"

namespace {

constexpr uint32_t kMaxSets = 16;
constexpr uint32_t kMaxHooks = 64;
constexpr uint32_t kMaxObjects = 4096;
constexpr size_t kMaxText = 512;

struct HookSet {
    bool used;
    bool global;
    char library[kMaxText];  // only_library (library sets)
    char skip[kMaxText];     // '\n'-separated substrings (global sets)
    uint32_t n;
    const char* names[kMaxHooks];
    void* replacement[kMaxHooks];
};

struct Object {
    uintptr_t base;
    const void* phdr;
    uint32_t applied;  // bit per set
};

HookSet g_sets[kMaxSets];
uint32_t g_set_count = 0;
Object g_objects[kMaxObjects];
uint32_t g_object_count = 0;
std::atomic_flag g_lock = ATOMIC_FLAG_INIT;

struct Lock {
    Lock() {
        while (g_lock.test_and_set(std::memory_order_acquire)) {
        }
    }
    ~Lock() { g_lock.clear(std::memory_order_release); }
};

using dlopen_fn = void* (*)(const char*, int);
dlopen_fn g_real_dlopen = nullptr;

bool contains(const char* hay, const char* needle) { return needle && *needle && strstr(hay, needle) != nullptr; }

// Is `path` one of the objects no global set may touch?
bool excluded(const char* path, const HookSet& s) {
    if (!path) return true;
    if (strstr(path, "linux-vdso") || strstr(path, "linux-gate")) return true;
    if (strstr(path, "/ld-linux") || strstr(path, "/ld-2.") || strstr(path, "ld64.so")) return true;
    if (strstr(path, "/libc.so") || strstr(path, "/libc-2.")) return true;
    if (strstr(path, "libmsmemscope_agent")) return true;
    const char* p = s.skip;
    while (*p) {
        const char* nl = strchr(p, '\n');
        size_t len = nl ? static_cast<size_t>(nl - p) : strlen(p);
        if (len) {
            char item[kMaxText];
            memcpy(item, p, len);
            item[len] = 0;
            if (strstr(path, item)) return true;
        }
        if (!nl) break;
        p = nl + 1;
    }
    return false;
}

uintptr_t dyn_ptr(uintptr_t base, uintptr_t v) {
    // glibc relocates the d_ptr entries of writable dynamic sections in
    // place; others (and some loaders) keep the link-time value.
    return v < base ? v + base : v;
}

// The read-only mappings of the process (/proc/self/maps), read once per walk
// when a first slot is to be written: which pages must get their protection
// back after the write. A page not found here (no /proc, a table too small,
// an object mapped after the read) was writable or is treated as such: it is
// left writable, as it was before protections were restored (safe for an
// object the loader is still relocating: its RELRO pages are writable then).
constexpr uint32_t kMaxReadOnly = 8192;
struct ReadOnly {
    uintptr_t start, end;
    int prot;
};
ReadOnly g_read_only[kMaxReadOnly];
uint32_t g_read_only_count = 0;
bool g_read_only_known = false;  // read during this walk

uintptr_t parse_hex(const char*& p, const char* end) {
    uintptr_t v = 0;
    for (; p < end; ++p) {
        char c = *p;
        int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
        if (d < 0) break;
        v = v * 16 + static_cast<uintptr_t>(d);
    }
    return v;
}

// One line of /proc/self/maps: "start-end perms offset dev inode path".
void read_only_line(const char* p, const char* end) {
    uintptr_t start = parse_hex(p, end);
    if (p >= end || *p != '-') return;
    ++p;
    uintptr_t stop = parse_hex(p, end);
    if (end - p < 5 || *p != ' ') return;
    const char* perms = p + 1;
    if (perms[1] == 'w' || g_read_only_count >= kMaxReadOnly) return;
    int prot = (perms[0] == 'r' ? PROT_READ : 0) | (perms[2] == 'x' ? PROT_EXEC : 0);
    g_read_only[g_read_only_count++] = {start, stop, prot};
}

void read_read_only() {
    g_read_only_known = true;
    g_read_only_count = 0;
    int fd = open("/proc/self/maps", O_RDONLY | O_CLOEXEC);
    if (fd < 0) return;
    char buf[8192];
    size_t have = 0;
    bool rest_of_line = false;  // the tail of a line longer than the buffer (its path)
    for (;;) {
        ssize_t n = read(fd, buf + have, sizeof(buf) - have);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) break;
        have += static_cast<size_t>(n);
        size_t from = 0;
        for (size_t i = 0; i < have; ++i)
            if (buf[i] == '\n') {
                if (!rest_of_line) read_only_line(buf + from, buf + i);
                rest_of_line = false;
                from = i + 1;
            }
        if (from == 0 && have == sizeof(buf)) {
            if (!rest_of_line) read_only_line(buf, buf + have);  // its addresses and perms are in
            rest_of_line = true;
            from = have;
        }
        memmove(buf, buf + from, have - from);
        have -= from;
    }
    close(fd);
}

// The protection the page at `start` had (-1: writable, or unknown).
int page_protection(uintptr_t start) {
    if (!g_read_only_known) read_read_only();
    for (uint32_t i = 0; i < g_read_only_count; ++i)
        if (start >= g_read_only[i].start && start < g_read_only[i].end) return g_read_only[i].prot;
    return -1;
}

// Writes one GOT slot; a page that was not writable gets its protection back.
bool write_slot(void** slot, void* value) {
    static long page = 0;
    if (!page) page = sysconf(_SC_PAGESIZE);
    uintptr_t start = reinterpret_cast<uintptr_t>(slot) & ~static_cast<uintptr_t>(page - 1);
    int before = page_protection(start);
    if (mprotect(reinterpret_cast<void*>(start), static_cast<size_t>(page), PROT_READ | PROT_WRITE) != 0) return false;
    *slot = value;
    if (before >= 0) mprotect(reinterpret_cast<void*>(start), static_cast<size_t>(page), before);
    return true;
}

bool is_slot_type(uint32_t t) {
#if defined(__x86_64__)
    return t == R_X86_64_JUMP_SLOT || t == R_X86_64_GLOB_DAT;
#elif defined(__aarch64__)
    return t == R_AARCH64_JUMP_SLOT || t == R_AARCH64_GLOB_DAT;
#else
    return false;
#endif
}

// Patches one object with one set; returns the slots written.
int patch_object(const struct dl_phdr_info* info, const HookSet& s) {
    const ElfW(Dyn)* dyn = nullptr;
    for (int i = 0; i < info->dlpi_phnum; ++i)
        if (info->dlpi_phdr[i].p_type == PT_DYNAMIC)
            dyn = reinterpret_cast<const ElfW(Dyn)*>(info->dlpi_addr + info->dlpi_phdr[i].p_vaddr);
    if (!dyn) return 0;
    uintptr_t base = info->dlpi_addr;
    const ElfW(Sym)* symtab = nullptr;
    const char* strtab = nullptr;
    const ElfW(Rela)* jmprel = nullptr;
    size_t jmprel_size = 0;
    const ElfW(Rela)* rela = nullptr;
    size_t rela_size = 0;
    for (const ElfW(Dyn)* d = dyn; d->d_tag != DT_NULL; ++d) {
        switch (d->d_tag) {
        case DT_SYMTAB: symtab = reinterpret_cast<const ElfW(Sym)*>(dyn_ptr(base, d->d_un.d_ptr)); break;
        case DT_STRTAB: strtab = reinterpret_cast<const char*>(dyn_ptr(base, d->d_un.d_ptr)); break;
        case DT_JMPREL: jmprel = reinterpret_cast<const ElfW(Rela)*>(dyn_ptr(base, d->d_un.d_ptr)); break;
        case DT_PLTRELSZ: jmprel_size = d->d_un.d_val; break;
        case DT_RELA: rela = reinterpret_cast<const ElfW(Rela)*>(dyn_ptr(base, d->d_un.d_ptr)); break;
        case DT_RELASZ: rela_size = d->d_un.d_val; break;
        default: break;
        }
    }
    if (!symtab || !strtab) return 0;
    int written = 0;
    auto walk = [&](const ElfW(Rela)* r, size_t bytes) {
        if (!r) return;
        size_t count = bytes / sizeof(ElfW(Rela));
        for (size_t i = 0; i < count; ++i) {
            if (!is_slot_type(static_cast<uint32_t>(ELF64_R_TYPE(r[i].r_info)))) continue;
            size_t sym = ELF64_R_SYM(r[i].r_info);
            if (!sym) continue;
            const char* name = strtab + symtab[sym].st_name;
            for (uint32_t h = 0; h < s.n; ++h) {
                if (strcmp(name, s.names[h]) != 0) continue;
                void** slot = reinterpret_cast<void**>(base + r[i].r_offset);
                if (*slot != s.replacement[h]) {
                    if (!write_slot(slot, s.replacement[h])) break;
                    ++written;
                }
                break;
            }
        }
    };
    walk(jmprel, jmprel_size);
    walk(rela, rela_size);
    return written;
}

Object* object_for(const struct dl_phdr_info* info) {
    for (uint32_t i = 0; i < g_object_count; ++i)
        if (g_objects[i].base == info->dlpi_addr && g_objects[i].phdr == info->dlpi_phdr) return &g_objects[i];
    if (g_object_count >= kMaxObjects) return nullptr;
    Object* o = &g_objects[g_object_count++];
    o->base = info->dlpi_addr;
    o->phdr = info->dlpi_phdr;
    o->applied = 0;
    return o;
}

struct WalkState {
    int written;
};

int on_object(struct dl_phdr_info* info, size_t, void* arg) {
    auto* st = static_cast<WalkState*>(arg);
    const char* path = info->dlpi_name ? info->dlpi_name : "";
    Object* o = object_for(info);
    if (!o) return 0;
    for (uint32_t i = 0; i < g_set_count; ++i) {
        const HookSet& s = g_sets[i];
        if (!s.used || (o->applied & (1u << i))) continue;
        o->applied |= 1u << i;
        bool match = s.global ? !excluded(path, s) : contains(path, s.library);
        if (!match) continue;
        st->written += patch_object(info, s);
    }
    return 0;
}

int refresh_locked() {
    WalkState st{0};
    g_read_only_known = false;  // the mappings of now, read if a slot is written
    dl_iterate_phdr(on_object, &st);
    return st.written;
}

void* dlopen_hook(const char* file, int mode) {
    void* h = g_real_dlopen ? g_real_dlopen(file, mode) : nullptr;
    if (h) msms_agent_got_refresh();
    return h;
}

void copy_text(char* dst, const char* src) {
    size_t len = src ? strlen(src) : 0;
    if (len >= kMaxText) len = kMaxText - 1;
    if (len) memcpy(dst, src, len);
    dst[len] = 0;
}

// The names of the functions a library exports (see
// msms_agent_got_install_library), read from its .dynsym section and copied
// into `pool` (kept for the life of the process: hook sets point at them).
// Returns the count, or -errno; `why` in words.
char g_name_pool[16384];
size_t g_name_used = 0;

int exported_functions(const char* path, const char** names, uint32_t max, char* why, size_t why_cap) {
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        int e = errno;
        snprintf(why, why_cap, "%s: %s", path, strerror(e));
        return -e;
    }
    struct stat st;
    void* map = fstat(fd, &st) == 0 && st.st_size > static_cast<off_t>(sizeof(Elf64_Ehdr))
                    ? mmap(nullptr, static_cast<size_t>(st.st_size), PROT_READ, MAP_PRIVATE, fd, 0)
                    : MAP_FAILED;
    close(fd);
    if (map == MAP_FAILED) {
        snprintf(why, why_cap, "%s: not an ELF shared library", path);
        return -ENOEXEC;
    }
    const auto* base = static_cast<const unsigned char*>(map);
    size_t size = static_cast<size_t>(st.st_size);
    const auto* eh = reinterpret_cast<const Elf64_Ehdr*>(base);
    auto in = [&](uint64_t off, uint64_t len) { return off <= size && len <= size - off; };
    if (memcmp(eh->e_ident, ELFMAG, SELFMAG) != 0 || eh->e_ident[EI_CLASS] != ELFCLASS64 ||
        !in(eh->e_shoff, uint64_t(eh->e_shnum) * sizeof(Elf64_Shdr))) {
        munmap(map, size);
        snprintf(why, why_cap, "%s: not a 64-bit ELF shared library", path);
        return -ENOEXEC;
    }
    int count = 0;
    const auto* sh = reinterpret_cast<const Elf64_Shdr*>(base + eh->e_shoff);
    for (unsigned i = 0; i < eh->e_shnum; ++i) {
        if (sh[i].sh_type != SHT_DYNSYM || sh[i].sh_link >= eh->e_shnum) continue;
        const Elf64_Shdr& strs = sh[sh[i].sh_link];
        if (!in(sh[i].sh_offset, sh[i].sh_size) || !in(strs.sh_offset, strs.sh_size)) continue;
        const auto* sym = reinterpret_cast<const Elf64_Sym*>(base + sh[i].sh_offset);
        const char* text = reinterpret_cast<const char*>(base + strs.sh_offset);
        for (size_t k = 0; k < sh[i].sh_size / sizeof(Elf64_Sym); ++k) {
            const Elf64_Sym& y = sym[k];
            uint32_t type = ELF64_ST_TYPE(y.st_info), bind = ELF64_ST_BIND(y.st_info);
            if ((type != STT_FUNC && type != STT_GNU_IFUNC) || y.st_shndx == SHN_UNDEF || y.st_name >= strs.sh_size)
                continue;
            if ((bind != STB_GLOBAL && bind != STB_WEAK) || ELF64_ST_VISIBILITY(y.st_other) != STV_DEFAULT) continue;
            const char* name = text + y.st_name;
            size_t len = strnlen(name, strs.sh_size - y.st_name);
            if (len == 0 || name[0] == '_' || strncmp(name, "msms_", 5) == 0) continue;
            if (static_cast<uint32_t>(count) >= max || g_name_used + len + 1 > sizeof(g_name_pool)) {
                munmap(map, size);
                snprintf(why, why_cap, "%s: exports more functions than the agent can hook (%u)", path, max);
                return -E2BIG;
            }
            char* kept = g_name_pool + g_name_used;
            memcpy(kept, name, len);
            kept[len] = 0;
            g_name_used += len + 1;
            names[count++] = kept;
        }
    }
    munmap(map, size);
    return count;
}

}  // namespace

extern "C" {

__attribute__((visibility("default"))) int msms_agent_got_install(const char* only_library, const msms_got_hook* hooks,
                                                                  uint32_t n, const char* skip) {
    if (!hooks || n == 0 || n + 1 > kMaxHooks) return -EINVAL;
    auto& t = msms::agent::tls();
    ++t.depth;  // dlsym may allocate: not ours to record
    int result;
    {
        Lock lock;
        if (g_set_count >= kMaxSets) {
            --t.depth;
            return -ENOSPC;
        }
        HookSet& s = g_sets[g_set_count];
        memset(&s, 0, sizeof(s));
        s.global = only_library == nullptr;
        copy_text(s.library, only_library);
        copy_text(s.skip, skip);
        for (uint32_t i = 0; i < n; ++i) {
            void* prev = nullptr;
            if (!s.global)
                for (uint32_t k = 0; k < g_set_count && !prev; ++k)
                    if (g_sets[k].global)
                        for (uint32_t j = 0; j < g_sets[k].n; ++j)
                            if (!strcmp(g_sets[k].names[j], hooks[i].name)) prev = g_sets[k].replacement[j];
            if (!prev) prev = dlsym(RTLD_DEFAULT, hooks[i].name);
            if (hooks[i].previous) *hooks[i].previous = prev;
            s.names[s.n] = hooks[i].name;
            s.replacement[s.n] = hooks[i].replacement;
            ++s.n;
        }
        if (s.global) {
            // Objects loaded later get the same hooks.
            if (!g_real_dlopen) g_real_dlopen = reinterpret_cast<dlopen_fn>(dlsym(RTLD_DEFAULT, "dlopen"));
            s.names[s.n] = "dlopen";
            s.replacement[s.n] = reinterpret_cast<void*>(&dlopen_hook);
            ++s.n;
        }
        s.used = true;
        ++g_set_count;
        result = refresh_locked();
    }
    --t.depth;
    return result;
}

__attribute__((visibility("default"))) int msms_agent_got_install_library(const char* path, const char* skip,
                                                                          char* names_out, size_t names_cap,
                                                                          char* error_out, size_t error_cap) {
    char why[512] = {0};
    if (names_out && names_cap) names_out[0] = 0;
    auto fail = [&](int rc) {
        if (error_out && error_cap) snprintf(error_out, error_cap, "%s", why);
        return rc;
    };
    if (!path || !*path) return -EINVAL;
    auto& t = msms::agent::tls();
    ++t.depth;  // dlopen and the library's constructors allocate: not the program's
    const char* names[kMaxHooks - 1];
    int n = exported_functions(path, names, kMaxHooks - 1, why, sizeof(why));
    void* h = n > 0 ? dlopen(path, RTLD_NOW | RTLD_LOCAL) : nullptr;
    if (n > 0 && !h) {
        const char* e = dlerror();
        snprintf(why, sizeof(why), "cannot load %s: %s", path, e ? e : "unknown error");
        n = -ENOENT;
    }
    msms_got_hook hooks[kMaxHooks - 1];
    uint32_t found = 0;
    size_t used = 0;
    for (int i = 0; i < n; ++i) {
        void* f = dlsym(h, names[i]);
        if (!f) continue;
        hooks[found++] = {names[i], f, nullptr};
        size_t len = strlen(names[i]);
        if (names_out && used + len + 2 <= names_cap) {
            if (used) names_out[used++] = '\n';
            memcpy(names_out + used, names[i], len + 1);
            used += len;
        }
    }
    --t.depth;
    if (n < 0) return fail(n);
    if (found == 0) return 0;
    // The library's own calls reach the real functions.
    char skip_all[kMaxText];
    const char* base = strrchr(path, '/');
    snprintf(skip_all, sizeof(skip_all), "%s\n%s", skip ? skip : "", base ? base + 1 : path);
    int rc = msms_agent_got_install(nullptr, hooks, found, skip_all);
    if (rc < 0) {
        snprintf(why, sizeof(why), "cannot install the hooks of %s: %s", path, strerror(-rc));
        return fail(rc);
    }
    return static_cast<int>(found);
}

__attribute__((visibility("default"))) void* msms_agent_got_previous(const char* name, const void* caller) {
    if (!name || !caller) return nullptr;
    auto& t = msms::agent::tls();
    ++t.depth;
    Dl_info info{};
    void* base = dladdr(caller, &info) ? info.dli_fbase : nullptr;
    void* found = nullptr;
    if (base) {
        Lock lock;
        void* before = nullptr;  // the name's replacement in the latest earlier global set
        bool mine = false;
        for (uint32_t i = 0; i < g_set_count && !mine; ++i) {
            const HookSet& s = g_sets[i];
            if (!s.used || !s.global) continue;
            for (uint32_t h = 0; h < s.n; ++h) {
                if (strcmp(s.names[h], name) != 0) continue;
                Dl_info o{};
                if (dladdr(s.replacement[h], &o) && o.dli_fbase == base) mine = true;
                else before = s.replacement[h];
                break;
            }
        }
        if (mine) found = before;
    }
    --t.depth;
    return found;
}

__attribute__((visibility("default"))) void msms_agent_got_refresh(void) {
    auto& t = msms::agent::tls();
    ++t.depth;
    {
        Lock lock;
        refresh_locked();
    }
    --t.depth;
}

}  // extern "C"
