#include "attach_breakpoints.h"

#include <elf.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <vector>

namespace msms {
namespace attach {
namespace {

// The instruction gdb writes for a breakpoint.
#if defined(__x86_64__)
const unsigned char kBreakpoint[] = {0xcc};  // int3
constexpr size_t kLen = 1;
#elif defined(__aarch64__)
const unsigned char kBreakpoint[] = {0x00, 0x00, 0x20, 0xd4};  // brk #0
constexpr size_t kLen = 4;
#else
const unsigned char kBreakpoint[] = {0};
constexpr size_t kLen = 0;
#endif

struct Mapping {
    uint64_t start = 0, end = 0, offset = 0, inode = 0;
    unsigned dev_major = 0, dev_minor = 0;
    std::string path;
};

// libc's mapping at file offset 0, from /proc/PID/maps.
bool libc_mapping(pid_t pid, Mapping& m, std::string& why) {
    std::string maps_path = "/proc/" + std::to_string(pid) + "/maps";
    FILE* f = std::fopen(maps_path.c_str(), "re");
    if (!f) {
        why = "cannot read " + maps_path + ": " + std::strerror(errno);
        return false;
    }
    char line[4096];
    bool found = false;
    while (!found && std::fgets(line, sizeof line, f)) {
        unsigned long long start, end, offset, inode;
        unsigned maj, min;
        char perms[8];
        int path_at = 0;
        if (std::sscanf(line, "%llx-%llx %7s %llx %x:%x %llu %n", &start, &end, perms, &offset, &maj, &min, &inode,
                        &path_at) < 7 || path_at <= 0)
            continue;
        std::string path(line + path_at);
        while (!path.empty() && (path.back() == '\n' || path.back() == ' ')) path.pop_back();
        const std::string name = "/libc.so.6";
        if (offset != 0 || path.size() < name.size() || path.compare(path.size() - name.size(), name.size(), name) != 0)
            continue;
        m = Mapping{start, end, offset, inode, maj, min, path};
        found = true;
    }
    std::fclose(f);
    if (!found) why = "no libc.so.6 in " + maps_path;
    return found;
}

// The file the mapping maps: /proc/PID/map_files names it whatever became of
// its path; else the path, when it still is that file.
int open_mapped_file(pid_t pid, const Mapping& m, std::string& why) {
    char range[64];
    std::snprintf(range, sizeof range, "%llx-%llx", static_cast<unsigned long long>(m.start),
                  static_cast<unsigned long long>(m.end));
    int fd = open(("/proc/" + std::to_string(pid) + "/map_files/" + range).c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) fd = open(m.path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        why = "cannot open " + m.path + ": " + std::strerror(errno);
        return -1;
    }
    struct stat st;
    if (fstat(fd, &st) != 0 || st.st_ino != m.inode || major(st.st_dev) != m.dev_major ||
        minor(st.st_dev) != m.dev_minor) {
        close(fd);
        why = m.path + " is no longer the file the process has mapped";
        return -1;
    }
    return fd;
}

bool read_at(int fd, void* buf, size_t n, uint64_t off) {
    return pread(fd, buf, n, static_cast<off_t>(off)) == static_cast<ssize_t>(n);
}

struct Function {
    const char* name;
    uint64_t vaddr = 0;      // in the file's address space
    uint64_t file_off = 0;   // where its first bytes are in the file
};

// The four functions' addresses from libc's dynamic symbol table.
bool find_functions(int fd, std::vector<Function>& fns, uint64_t& first_vaddr, std::string& why) {
    Elf64_Ehdr eh;
    if (!read_at(fd, &eh, sizeof eh, 0) || std::memcmp(eh.e_ident, ELFMAG, SELFMAG) != 0 ||
        eh.e_ident[EI_CLASS] != ELFCLASS64 || eh.e_shentsize != sizeof(Elf64_Shdr) ||
        eh.e_phentsize != sizeof(Elf64_Phdr)) {
        why = "libc.so.6 is not a 64-bit ELF file this build reads";
        return false;
    }
    std::vector<Elf64_Phdr> ph(eh.e_phnum);
    std::vector<Elf64_Shdr> sh(eh.e_shnum);
    if (!read_at(fd, ph.data(), ph.size() * sizeof(Elf64_Phdr), eh.e_phoff) ||
        !read_at(fd, sh.data(), sh.size() * sizeof(Elf64_Shdr), eh.e_shoff)) {
        why = "cannot read libc.so.6's headers";
        return false;
    }
    bool have_load = false;
    for (auto& p : ph)
        if (p.p_type == PT_LOAD && !have_load) {
            first_vaddr = p.p_vaddr - p.p_offset;  // the mapping at file offset 0 starts at this address
            have_load = true;
        }
    const Elf64_Shdr* dynsym = nullptr;
    for (auto& s : sh)
        if (s.sh_type == SHT_DYNSYM) dynsym = &s;
    if (!have_load || !dynsym || dynsym->sh_link >= sh.size() || dynsym->sh_entsize != sizeof(Elf64_Sym)) {
        why = "libc.so.6 has no dynamic symbol table";
        return false;
    }
    const Elf64_Shdr& strtab = sh[dynsym->sh_link];
    std::vector<Elf64_Sym> syms(dynsym->sh_size / sizeof(Elf64_Sym));
    std::string names(strtab.sh_size, '\0');
    if (!read_at(fd, syms.data(), syms.size() * sizeof(Elf64_Sym), dynsym->sh_offset) ||
        !read_at(fd, names.data(), names.size(), strtab.sh_offset)) {
        why = "cannot read libc.so.6's dynamic symbols";
        return false;
    }
    for (Function& fn : fns) {
        for (const Elf64_Sym& s : syms)
            if (s.st_shndx != SHN_UNDEF && ELF64_ST_TYPE(s.st_info) == STT_FUNC && s.st_name < names.size() &&
                std::strcmp(names.c_str() + s.st_name, fn.name) == 0) {
                fn.vaddr = s.st_value;
                break;
            }
        for (auto& p : ph)
            if (fn.vaddr && p.p_type == PT_LOAD && fn.vaddr >= p.p_vaddr && fn.vaddr < p.p_vaddr + p.p_filesz)
                fn.file_off = fn.vaddr - p.p_vaddr + p.p_offset;
        if (!fn.vaddr || !fn.file_off) {
            why = std::string("libc.so.6 has no ") + fn.name;
            return false;
        }
    }
    return true;
}

}  // namespace

BreakpointRepair remove_left_breakpoints(pid_t pid) {
    BreakpointRepair r;
    if (kLen == 0) {
        r.why = "not known for this machine";
        return r;
    }
    Mapping m;
    if (!libc_mapping(pid, m, r.why)) return r;
    int fd = open_mapped_file(pid, m, r.why);
    if (fd < 0) return r;
    std::vector<Function> fns = {{"malloc"}, {"free"}, {"calloc"}, {"realloc"}};
    uint64_t first_vaddr = 0;
    bool ok = find_functions(fd, fns, first_vaddr, r.why);
    int mem = ok ? open(("/proc/" + std::to_string(pid) + "/mem").c_str(), O_RDWR | O_CLOEXEC) : -1;
    if (ok && mem < 0) r.why = "cannot open /proc/" + std::to_string(pid) + "/mem: " + std::strerror(errno);
    for (size_t i = 0; mem >= 0 && i < fns.size(); ++i) {
        const Function& fn = fns[i];
        uint64_t at = m.start + (fn.vaddr - first_vaddr);
        unsigned char now[4], orig[4];
        if (!read_at(mem, now, kLen, at) || !read_at(fd, orig, kLen, fn.file_off)) {
            r.why = std::string("cannot read the first bytes of ") + fn.name;
            break;
        }
        if (std::memcmp(now, kBreakpoint, kLen) != 0 || std::memcmp(orig, kBreakpoint, kLen) == 0)
            continue;  // no breakpoint there
        if (pwrite(mem, orig, kLen, static_cast<off_t>(at)) != static_cast<ssize_t>(kLen)) {
            r.why = std::string("cannot write ") + fn.name + "'s first bytes back: " + std::strerror(errno);
            break;
        }
        ++r.removed;
    }
    if (mem >= 0) close(mem);
    close(fd);
    return r;
}

}  // namespace attach
}  // namespace msms
