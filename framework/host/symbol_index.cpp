#include "symbol_index.h"

#ifdef MSMEMSCOPE_HAVE_LIBDW
#include <algorithm>

namespace msms {

namespace {

int binding_rank(unsigned char info) {
    switch (GELF_ST_BIND(info)) {
        case STB_GLOBAL: return 0;
        case STB_WEAK: return 1;
        default: return 2;
    }
}

struct Section {
    uint64_t lo, hi;
};

// The module's allocated sections at run-time addresses, sorted, from the
// main ELF's section headers (dwfl_module_address_section inflated
// libc6-dbg's compressed debug sections: ~40 ms for libc's 1,856 sizeless
// symbols).
std::vector<Section> sections_of(Dwfl_Module* module) {
    std::vector<Section> out;
    GElf_Addr bias = 0;
    Elf* elf = dwfl_module_getelf(module, &bias);
    if (!elf) return out;
    for (Elf_Scn* scn = elf_nextscn(elf, nullptr); scn; scn = elf_nextscn(elf, scn)) {
        GElf_Shdr mem;
        GElf_Shdr* sh = gelf_getshdr(scn, &mem);
        if (sh && (sh->sh_flags & SHF_ALLOC) && sh->sh_size != 0)
            out.push_back(Section{sh->sh_addr + bias, sh->sh_addr + bias + sh->sh_size});
    }
    std::sort(out.begin(), out.end(), [](const Section& a, const Section& b) { return a.lo < b.lo; });
    return out;
}

// The end of the section holding `address`, or 0.
uint64_t section_end(const std::vector<Section>& sections, uint64_t address) {
    auto it = std::upper_bound(sections.begin(), sections.end(), address,
                               [](uint64_t a, const Section& s) { return a < s.lo; });
    if (it == sections.begin()) return 0;
    --it;
    return address < it->hi ? it->hi : 0;
}

}  // namespace

SymbolIndex::SymbolIndex(Dwfl_Module* module) {
    int n = module ? dwfl_module_getsymtab(module) : -1;
    if (n <= 0) return;
    const std::vector<Section> sections = sections_of(module);
    syms_.reserve(static_cast<size_t>(n));
    for (int i = 1; i < n; ++i) {
        GElf_Sym sym;
        GElf_Addr addr = 0;
        GElf_Word shndx = 0;
        const char* name = dwfl_module_getsym_info(module, i, &sym, &addr, &shndx, nullptr, nullptr);
        if (!name || !*name) continue;
        // What addrinfo skips: undefined and absolute symbols, those of
        // non-allocated sections, sections, files and thread-locals.
        if (shndx == SHN_UNDEF || shndx == SHN_ABS || shndx == static_cast<GElf_Word>(-1)) continue;
        unsigned type = GELF_ST_TYPE(sym.st_info);
        if (type == STT_SECTION || type == STT_FILE || type == STT_TLS) continue;
        uint64_t limit = 0;
        if (sym.st_size == 0) {
            // A sizeless symbol reaches no further than its section's end.
            limit = section_end(sections, addr);
            if (limit == 0) continue;
        }
        syms_.push_back(Sym{addr, sym.st_size, limit, name, binding_rank(sym.st_info)});
    }
    // Stable: at one address and rank, the table's first symbol wins.
    std::stable_sort(syms_.begin(), syms_.end(),
                     [](const Sym& a, const Sym& b) { return a.lo != b.lo ? a.lo < b.lo : a.rank < b.rank; });
}

const char* SymbolIndex::lookup(uint64_t address, uint64_t& offset) const {
    // The first symbol after the address; those before it start at or below.
    auto end = std::upper_bound(syms_.begin(), syms_.end(), address,
                                [](uint64_t a, const Sym& s) { return a < s.lo; });
    if (end == syms_.begin()) return nullptr;
    // The best-ranked symbol that contains the address, the closest start
    // first, among the kLookBack symbols starting at or below it (symbols
    // may nest, so the closest start need not hold it).
    const Sym* sized = nullptr;
    constexpr int kLookBack = 64;
    int seen = 0;
    for (auto it = end; it != syms_.begin() && seen < kLookBack; ++seen) {
        --it;
        if (it->size != 0 && address - it->lo < it->size) {
            // The closest start wins; at the same start the best rank (sorted first).
            if (!sized || it->lo > sized->lo || (it->lo == sized->lo && it->rank <= sized->rank)) sized = &*it;
        }
    }
    if (sized) {
        offset = address - sized->lo;
        return sized->name;
    }
    // No symbol holds it: the best-ranked sizeless symbol at the closest
    // start (the run at that start is sorted by rank), when one is there.
    uint64_t at = (end - 1)->lo;
    auto first = std::lower_bound(syms_.begin(), end, at, [](const Sym& s, uint64_t a) { return s.lo < a; });
    for (auto it = first; it != end; ++it)
        if (it->size == 0 && address < it->limit) {
            offset = address - it->lo;
            return it->name;
        }
    return nullptr;
}

}  // namespace msms
#endif
