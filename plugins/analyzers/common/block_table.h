// BlockTable<V>: a value per live block (pool + start address) for the
// analyzers that follow every MALLOC and FREE of a run. One open-addressing
// table per pool (msms::AddrMap, framework/util/addr_map.h) behind a cache
// of the pool the last event was in: a node-based std::unordered_map keyed
// by the whole BlockKey chased two or three pointers per lookup, and was
// 15-17% of a PyTorch capture's replay samples in each of leaks and
// decompose (bench/README.md "Where the host's time goes").
//
// put() may move every value of its pool: a pointer from find() is valid
// until the next put() or erase().
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <tuple>

#include "analyzer_util.h"
#include "util/addr_map.h"

namespace msms_an {

template <class V>
class BlockTable {
public:
    V* find(const BlockKey& k) {
        msms::AddrMap<V>* t = table(k, false);
        if (!t) return nullptr;
        auto it = t->find(k.ptr);
        return it == t->end() ? nullptr : &it->second;
    }
    // Inserts or replaces k's value.
    V& put(const BlockKey& k, const V& v) {
        V& slot = (*table(k, true))[k.ptr];
        slot = v;
        return slot;
    }
    bool erase(const BlockKey& k) {
        msms::AddrMap<V>* t = table(k, false);
        return t && t->erase(k.ptr) != 0;
    }
    size_t size() const {
        size_t n = 0;
        for (auto& [pool, t] : pools_) n += t.size();
        return n;
    }
    // f(const BlockKey&, const V&) for every block, pool by pool.
    template <class F>
    void for_each(F&& f) const {
        for (auto& [pool, t] : pools_)
            for (auto& [ptr, v] : t) f(BlockKey{pool.kind, pool.id, pool.type, ptr}, v);
    }

private:
    struct Pool {
        uint16_t kind;
        int16_t id;
        uint16_t type;
        bool operator<(const Pool& o) const { return std::tie(kind, id, type) < std::tie(o.kind, o.id, o.type); }
        bool operator==(const Pool& o) const { return kind == o.kind && id == o.id && type == o.type; }
    };
    msms::AddrMap<V>* table(const BlockKey& k, bool create) {
        Pool p{k.dev_kind, k.dev_id, k.type};
        if (last_ && last_pool_ == p) return last_;
        auto it = pools_.find(p);
        if (it == pools_.end()) {
            if (!create) return nullptr;
            it = pools_.emplace(p, msms::AddrMap<V>{}).first;
        }
        last_pool_ = p;
        last_ = &it->second;  // std::map entries never move
        return last_;
    }

    std::map<Pool, msms::AddrMap<V>> pools_;
    Pool last_pool_{};
    msms::AddrMap<V>* last_ = nullptr;
};

}  // namespace msms_an
