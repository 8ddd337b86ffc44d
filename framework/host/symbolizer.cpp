#include "symbolizer.h"

#include <cxxabi.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>

#ifdef MSMEMSCOPE_HAVE_LIBDW
#include <elfutils/libdwfl.h>

#include <unordered_map>

#include "api_words.h"
#include "symbol_index.h"
#endif

namespace msms {

std::string demangle(const char* name) {
    if (!name) return "";
    if (name[0] == '_' && name[1] == 'Z') {
        int status = 0;
        char* d = abi::__cxa_demangle(name, nullptr, nullptr, &status);
        if (d && status == 0) {
            std::string out = d;
            std::free(d);
            return out;
        }
        std::free(d);
    }
    return name;
}

struct Symbolizer::Impl {
    struct Mod {
        uint64_t lo, hi, bias;
        std::string path;
    };
    std::vector<Mod> mods;  // sorted by lo
    size_t reported = 0;
#ifdef MSMEMSCOPE_HAVE_LIBDW
    Dwfl_Callbacks callbacks{};
    char* debuginfo_path = nullptr;
    Dwfl* dwfl = nullptr;
    // Each module's symbols, sorted once (symbol_index.h): addrinfo scans
    // the whole table per frame.
    std::unordered_map<Dwfl_Module*, std::unique_ptr<SymbolIndex>> symbols;
    const char* symbol(Dwfl_Module* m, uint64_t address, uint64_t& offset) {
        auto& index = symbols[m];
        if (!index) index = std::make_unique<SymbolIndex>(m);
        return index->lookup(address, offset);
    }
    Impl() {
        callbacks.find_elf = dwfl_build_id_find_elf;
        callbacks.find_debuginfo = dwfl_standard_find_debuginfo;
        callbacks.section_address = dwfl_offline_section_address;
        callbacks.debuginfo_path = &debuginfo_path;
        dwfl = dwfl_begin(&callbacks);
    }
    ~Impl() {
        if (dwfl) dwfl_end(dwfl);
    }
#endif
    const Mod* find(uint64_t a) const {
        auto it = std::upper_bound(mods.begin(), mods.end(), a, [](uint64_t x, const Mod& m) { return x < m.lo; });
        if (it == mods.begin()) return nullptr;
        --it;
        return a < it->hi ? &*it : nullptr;
    }
};

Symbolizer::Symbolizer(const CaptureReader& reader, bool api)
    : reader_(reader),
      startup_note_("\n[CPython's start-up: a C stack taken without --call-stack=c]"),
      loader_note_("\n[the dynamic loader's block (thread-local storage, dlopen): a C stack taken without --call-stack=c]"),
      impl_(std::make_unique<Impl>()) {
    if (api) {
        startup_note_ = api_words(startup_note_);
        loader_note_ = api_words(loader_note_);
    }
}
Symbolizer::~Symbolizer() = default;

void Symbolizer::sync_modules() {
    const auto& mods = reader_.modules();
    if (impl_->reported >= mods.size()) return;
#ifdef MSMEMSCOPE_HAVE_LIBDW
    if (impl_->dwfl) dwfl_report_begin_add(impl_->dwfl);
#endif
    for (; impl_->reported < mods.size(); ++impl_->reported) {
        const ModuleDef& m = mods[impl_->reported];
        const std::string* path = reader_.string(m.path_id);
        if (!path) continue;
        Impl::Mod mod{m.base, m.base + m.extent, m.base, *path};
        // lo: the lowest mapped address is at least the bias.
        auto pos = std::upper_bound(impl_->mods.begin(), impl_->mods.end(), mod.lo,
                                    [](uint64_t x, const Impl::Mod& o) { return x < o.lo; });
        impl_->mods.insert(pos, mod);
#ifdef MSMEMSCOPE_HAVE_LIBDW
        if (impl_->dwfl && access(path->c_str(), R_OK) == 0)
            dwfl_report_elf(impl_->dwfl, path->c_str(), path->c_str(), -1, m.base, false);
#endif
    }
#ifdef MSMEMSCOPE_HAVE_LIBDW
    if (impl_->dwfl) dwfl_report_end(impl_->dwfl, nullptr, nullptr);
#endif
    frame_cache_.clear();  // frames that were unknown may be known now
}

const std::string& Symbolizer::text(uint64_t id) {
    static const std::string kEmpty;
    if (id == 0) return kEmpty;
    Recent& hot = recent_[id % kRecent];
    if (hot.id == id) return *hot.text;
    auto it = cache_.find(id);
    if (it != cache_.end()) {
        hot = {id, &it->second};  // unordered_map entries stay put
        return it->second;
    }
    const StackDef* s = reader_.stack(id);
    if (!s) return kEmpty;  // definition not read yet: not cached, retried later
    if (s->kind != 1) sync_modules();
    std::string out;
    for (size_t i = 0; i < s->frames.size(); ++i) {
        if (i) out += '\n';
        if (s->kind == 1) {
            // A Python frame is one line: a newline (or another control
            // character) in a file or function name is escaped, never a
            // frame boundary of its own.
            const std::string* f = reader_.string(s->frames[i]);
            if (!f) {
                out += '?';
                continue;
            }
            for (unsigned char ch : *f) {
                if (ch == '\n') out += "\\n";
                else if (ch == '\r') out += "\\r";
                else if (ch < 0x20 && ch != '\t') {
                    char esc[8];
                    std::snprintf(esc, sizeof esc, "\\x%02x", ch);
                    out += esc;
                } else out += static_cast<char>(ch);
            }
        } else {
            // A start-up frame (no source line) is cached apart: the top bit
            // is never set in a user-space address.
            const bool line = s->kind == 0;  // (2, 3: taken without --call-stack=c)
            const uint64_t key = line ? s->frames[i] : s->frames[i] | (1ull << 63);
            auto fc = frame_cache_.find(key);
            if (fc == frame_cache_.end()) fc = frame_cache_.emplace(key, c_frame(s->frames[i], line)).first;
            out += fc->second;
        }
    }
    // Says so in every view that shows it (the dump, the html's sites and
    // flame graph, memory_viz): the run asked for no C stacks.
    if (s->kind == 2) out += startup_note_;
    if (s->kind == 3) out += loader_note_;
    const std::string& made = cache_.emplace(id, std::move(out)).first->second;
    hot = {id, &made};
    return made;
}

std::string Symbolizer::c_frame(uint64_t address, bool source_line) {
    char buf[64];
    const Impl::Mod* mod = impl_->find(address);
    if (!mod) {
        std::snprintf(buf, sizeof(buf), "0x%llx", static_cast<unsigned long long>(address));
        return buf;
    }
    std::string out;
#ifdef MSMEMSCOPE_HAVE_LIBDW
    if (impl_->dwfl) {
        Dwfl_Module* m = dwfl_addrmodule(impl_->dwfl, address - 1);
        if (m) {
            uint64_t off = 0;
            const char* name = impl_->symbol(m, address, off);
            if (name) {
                std::snprintf(buf, sizeof(buf), "+0x%llx", static_cast<unsigned long long>(off));
                out = demangle(name) + buf;
                if (Dwfl_Line* line = source_line ? dwfl_module_getsrc(m, address - 1) : nullptr) {
                    int lineno = 0;
                    const char* file = dwfl_lineinfo(line, nullptr, &lineno, nullptr, nullptr, nullptr);
                    if (file && lineno > 0) out += " at " + std::string(file) + ":" + std::to_string(lineno);
                }
            }
        }
    }
#endif
    if (out.empty()) {
        std::snprintf(buf, sizeof(buf), "0x%llx", static_cast<unsigned long long>(address - mod->bias));
        out = buf;
    }
    return out + " in " + mod->path;
}

}  // namespace msms
