// One module's function symbols sorted by address, for the symbolizer.
//
// libdw's dwfl_module_addrinfo scans the whole symbol table on every
// lookup: a module with thousands of symbols (the python3 executable's
// dynamic table, libc's full table from libc6-dbg) cost ~60 us a frame,
// ~90 ms for the ~900 distinct frames of one interpreter's start-up. The
// table is read once here (dwfl_module_getsym_info), sorted, and each
// lookup is a binary search. The choice follows addrinfo's: the symbol that
// contains the address (sized), a global one before a weak one before a
// local one at the same address; else the closest symbol before it that
// has no size, when no other symbol starts between the two and the address
// is inside that symbol's section.
#pragma once

#ifdef MSMEMSCOPE_HAVE_LIBDW
#include <elfutils/libdwfl.h>

#include <cstdint>
#include <vector>

namespace msms {

class SymbolIndex {
public:
    // Reads the module's symbol table (once).
    explicit SymbolIndex(Dwfl_Module* module);
    // The name of the symbol `address` lies in and the offset from its
    // start, or nullptr. The name lives as long as the Dwfl.
    const char* lookup(uint64_t address, uint64_t& offset) const;
    size_t size() const { return syms_.size(); }

private:
    struct Sym {
        uint64_t lo;
        uint64_t size;   // 0: sizeless
        uint64_t limit;  // sizeless: the end of its section
        const char* name;
        int rank;  // lower is preferred at the same address: global, weak, local
    };
    std::vector<Sym> syms_;  // by lo, then rank
};

}  // namespace msms
#endif
