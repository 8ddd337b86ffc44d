// Finding a plugin's entry function in a loaded library, for the host and
// for plugin authors' tests (testing.hpp) alike: one rule, one place.
//
// The entry symbol comes in two forms (abi.h, MSMS_ENTRY_SYMBOL): a variable
// holding a pointer to the entry function (MSMEMSCOPE_PLUGIN,
// BOOST_DLL_ALIAS) or the function itself (plain C). They are told apart by
// the ELF type of the symbol, never by calling or dereferencing a guess, and
// the function reached either way must lie in an executable segment of a
// loaded object. Anything else is refused with a message that says what to
// export, so a plugin with the wrong form cannot crash whoever loads it.
#pragma once

#include <dlfcn.h>
#include <elf.h>
#include <link.h>

#include <cstdint>
#include <string>

#include "abi.h"

namespace msmemscope {
namespace detail {

struct SegmentQuery {
    uintptr_t addr = 0;
    bool found = false;
    bool executable = false;
};

inline int find_segment(struct dl_phdr_info* info, size_t, void* data) {
    auto* q = static_cast<SegmentQuery*>(data);
    for (int i = 0; i < info->dlpi_phnum; ++i) {
        const auto& ph = info->dlpi_phdr[i];
        if (ph.p_type != PT_LOAD) continue;
        uintptr_t start = info->dlpi_addr + ph.p_vaddr;
        if (q->addr >= start && q->addr - start < ph.p_memsz) {
            q->found = true;
            q->executable = (ph.p_flags & PF_X) != 0;
            return 1;
        }
    }
    return 0;
}

// True when p lies in an executable PT_LOAD segment of a loaded object.
inline bool is_code_address(const void* p) {
    SegmentQuery q;
    q.addr = reinterpret_cast<uintptr_t>(p);
    if (q.addr == 0) return false;
    dl_iterate_phdr(&find_segment, &q);
    return q.found && q.executable;
}

inline std::string what_to_export() {
    return std::string("export a function `const msms_plugin_descriptor* ") + MSMS_ENTRY_SYMBOL +
           "(void)` (C) or use MSMEMSCOPE_PLUGIN(Class) (C++)";
}

}  // namespace detail

// The entry function of the library `handle` (from dlopen), or nullptr with
// the reason in `error`.
inline msms_entry_fn resolve_entry(void* handle, std::string& error) {
    dlerror();
    void* sym = dlsym(handle, MSMS_ENTRY_SYMBOL);
    if (!sym) {
        error = std::string("no entry symbol '") + MSMS_ENTRY_SYMBOL + "'";
        return nullptr;
    }
    Dl_info info{};
    void* extra = nullptr;
    const ElfW(Sym)* esym = nullptr;
    if (dladdr1(sym, &info, &extra, RTLD_DL_SYMENT)) esym = static_cast<const ElfW(Sym)*>(extra);
    if (!esym) {
        error = std::string("entry symbol '") + MSMS_ENTRY_SYMBOL + "' has no symbol table entry; " +
                detail::what_to_export();
        return nullptr;
    }
    const unsigned type = esym->st_info & 0xf;  // ELF{32,64}_ST_TYPE
    if (type == STT_FUNC || type == STT_GNU_IFUNC) {
        if (!detail::is_code_address(sym)) {
            error = std::string("entry function '") + MSMS_ENTRY_SYMBOL + "' is not in executable memory";
            return nullptr;
        }
        return reinterpret_cast<msms_entry_fn>(sym);
    }
    if (type == STT_OBJECT) {
        if (esym->st_size != sizeof(void*)) {
            error = std::string("entry symbol '") + MSMS_ENTRY_SYMBOL + "' is a variable of " +
                    std::to_string(esym->st_size) + " bytes, not a pointer to the entry function; " +
                    detail::what_to_export();
            return nullptr;
        }
        void* fn = *static_cast<void* const*>(sym);
        if (!detail::is_code_address(fn)) {
            error = std::string("entry variable '") + MSMS_ENTRY_SYMBOL +
                    "' does not point to a function; " + detail::what_to_export();
            return nullptr;
        }
        return reinterpret_cast<msms_entry_fn>(fn);
    }
    error = std::string("entry symbol '") + MSMS_ENTRY_SYMBOL + "' is neither a function nor a variable (ELF type " +
            std::to_string(type) + "); " + detail::what_to_export();
    return nullptr;
}

}  // namespace msmemscope
