// The symbolizer's sorted symbol tables (framework/host/symbol_index.h)
// answer as libdw's own dwfl_module_addrinfo does: the same symbol and
// offset for addresses at, inside, at the end of and between the symbols of
// real modules (libc, libstdc++, the python3 executable, this test).
#include <doctest/doctest.h>

#include <link.h>
#include <unistd.h>

#include <cstring>
#include <string>
#include <vector>

#include "host/symbol_index.h"

namespace {

struct Loaded {
    std::string path;
    uint64_t base;
};

int collect(struct dl_phdr_info* info, size_t, void* arg) {
    auto* out = static_cast<std::vector<Loaded>*>(arg);
    const char* name = info->dlpi_name;
    if (name && *name && (strstr(name, "/libc.so") || strstr(name, "/libstdc++.so")))
        out->push_back({name, info->dlpi_addr});
    return 0;
}

// Addresses to ask about: around up to `per` symbols spread over the
// table, and `per` addresses spread over the module's text.
std::vector<uint64_t> probes(Dwfl_Module* m, size_t per) {
    std::vector<uint64_t> out;
    Dwarf_Addr lo = 0, hi = 0;
    dwfl_module_info(m, nullptr, &lo, &hi, nullptr, nullptr, nullptr, nullptr);
    int n = dwfl_module_getsymtab(m);
    int step = n > static_cast<int>(per) ? n / static_cast<int>(per) : 1;
    for (int i = 1; i < n; i += step) {
        GElf_Sym sym;
        GElf_Addr addr = 0;
        if (!dwfl_module_getsym_info(m, i, &sym, &addr, nullptr, nullptr, nullptr) ||
            GELF_ST_TYPE(sym.st_info) != STT_FUNC)
            continue;
        for (uint64_t a : {addr, addr + 1, addr + sym.st_size / 2, addr + sym.st_size - 1, addr + sym.st_size})
            if (a >= lo && a < hi) out.push_back(a);  // a return address is inside its module
    }
    if (hi > lo)
        for (size_t i = 0; i < per; ++i) out.push_back(lo + (hi - lo) / per * i + 7);
    return out;
}

void agrees_with_libdw(const std::string& path, uint64_t base) {
    Dwfl_Callbacks cb{};
    char* debuginfo_path = nullptr;
    cb.find_elf = dwfl_build_id_find_elf;
    cb.find_debuginfo = dwfl_standard_find_debuginfo;
    cb.section_address = dwfl_offline_section_address;
    cb.debuginfo_path = &debuginfo_path;
    Dwfl* dwfl = dwfl_begin(&cb);
    REQUIRE(dwfl);
    dwfl_report_begin(dwfl);
    Dwfl_Module* m = dwfl_report_elf(dwfl, path.c_str(), path.c_str(), -1, base, false);
    dwfl_report_end(dwfl, nullptr, nullptr);
    REQUIRE_MESSAGE(m, path);
    msms::SymbolIndex index(m);
    CHECK_MESSAGE(index.size() > 100, path);
    size_t asked = 0, named = 0, differ = 0;
    std::string first_difference;
    for (uint64_t a : probes(m, 400)) {
        GElf_Off off = 0;
        GElf_Sym sym;
        const char* want = dwfl_module_addrinfo(m, a, &off, &sym, nullptr, nullptr, nullptr);
        uint64_t got_off = 0;
        const char* got = index.lookup(a, got_off);
        ++asked;
        if (want) ++named;
        bool same = (!want && !got) || (want && got && !strcmp(want, got) && off == got_off);
        if (!same && differ++ < 5)
            first_difference += "0x" + std::to_string(a - base) + ": libdw " + (want ? want : "(none)") + "+" +
                               std::to_string(want ? off : 0) + ", index " + (got ? got : "(none)") + "+" +
                               std::to_string(got ? got_off : 0) + "; ";
    }
    INFO(path << ": " << asked << " addresses, " << named << " named by libdw; first difference " << first_difference);
    CHECK(named > asked / 2);
    CHECK(differ == 0);
    dwfl_end(dwfl);
}

}  // namespace

TEST_CASE("symbol index: the same symbol and offset as dwfl_module_addrinfo in libc and libstdc++") {
    std::vector<Loaded> mods;
    dl_iterate_phdr(collect, &mods);
    REQUIRE(mods.size() == 2);
    for (const Loaded& m : mods) agrees_with_libdw(m.path, m.base);
}

TEST_CASE("symbol index: the same answers for the python3 executable and this test's own") {
    char self[4096];
    ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
    REQUIRE(n > 0);
    self[n] = 0;
    agrees_with_libdw(self, 0);
    // Debian's interpreter: its dynamic table only (no .symtab): static
    // functions have no name, and neither index nor libdw invents one.
    char py[4096];
    n = readlink("/usr/bin/python3", py, sizeof(py) - 1);
    REQUIRE(n > 0);
    py[n] = 0;
    std::string path = py[0] == '/' ? py : std::string("/usr/bin/") + py;
    agrees_with_libdw(path, 0x400000);
}
