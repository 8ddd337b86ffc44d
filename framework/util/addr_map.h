// AddrMap<V>: a hash map from a 64-bit address to V, open addressing with
// linear probing and backward-shift deletion (no tombstones), for the
// host's per-event bookkeeping of live blocks. std::unordered_map allocated
// a node per block and chased a pointer per lookup: with a PyTorch training
// loop's ~1 M MALLOC/FREE pairs its find/erase/rehash and the allocator were
// ~12% of the host's CPU (perf, bench/README.md "Where the host's time goes").
//
// The subset of std::unordered_map's interface the host uses: find, count,
// emplace, operator[], erase(iterator | key), size, empty, clear, and
// iteration (in no particular order) over value_type = std::pair<uint64_t, V>
// with ->first / ->second. emplace and operator[] may move every element:
// iterators and references are valid only until the next insertion or erase.
#pragma once

#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

namespace msms {

template <class V>
class AddrMap {
public:
    using value_type = std::pair<uint64_t, V>;

    template <class Slot, class Map>
    class Iter {
    public:
        Iter(Map* m, size_t i) : m_(m), i_(i) { skip(); }
        Slot& operator*() const { return m_->slots_[i_]; }
        Slot* operator->() const { return &m_->slots_[i_]; }
        Iter& operator++() {
            ++i_;
            skip();
            return *this;
        }
        bool operator==(const Iter& o) const { return i_ == o.i_; }
        bool operator!=(const Iter& o) const { return i_ != o.i_; }
        size_t index() const { return i_; }

    private:
        void skip() {
            while (i_ < m_->used_.size() && !m_->used_[i_]) ++i_;
        }
        Map* m_;
        size_t i_;
    };
    using iterator = Iter<value_type, AddrMap>;
    using const_iterator = Iter<const value_type, const AddrMap>;

    iterator begin() { return iterator(this, 0); }
    iterator end() { return iterator(this, used_.size()); }
    const_iterator begin() const { return const_iterator(this, 0); }
    const_iterator end() const { return const_iterator(this, used_.size()); }

    size_t size() const { return size_; }
    bool empty() const { return size_ == 0; }
    void clear() {
        slots_.clear();
        used_.clear();
        size_ = 0;
        mask_ = 0;
    }

    iterator find(uint64_t key) {
        size_t i = lookup(key);
        return iterator(this, i == npos ? used_.size() : i);
    }
    const_iterator find(uint64_t key) const {
        size_t i = lookup(key);
        return const_iterator(this, i == npos ? used_.size() : i);
    }
    size_t count(uint64_t key) const { return lookup(key) == npos ? 0 : 1; }

    std::pair<iterator, bool> emplace(uint64_t key, V value) {
        grow_for_one();
        size_t i = home(key);
        while (used_[i]) {
            if (slots_[i].first == key) return {iterator(this, i), false};
            i = (i + 1) & mask_;
        }
        used_[i] = 1;
        slots_[i] = value_type(key, std::move(value));
        ++size_;
        return {iterator(this, i), true};
    }
    V& operator[](uint64_t key) { return emplace(key, V{}).first->second; }

    void erase(iterator it) { erase_at(it.index()); }
    size_t erase(uint64_t key) {
        size_t i = lookup(key);
        if (i == npos) return 0;
        erase_at(i);
        return 1;
    }

private:
    static constexpr size_t npos = static_cast<size_t>(-1);

    size_t home(uint64_t key) const {
        // Fibonacci hashing: addresses share their low bits (alignment).
        return static_cast<size_t>((key * 0x9E3779B97F4A7C15ull) >> shift_) & mask_;
    }
    size_t lookup(uint64_t key) const {
        if (size_ == 0) return npos;
        for (size_t i = home(key);; i = (i + 1) & mask_) {
            if (!used_[i]) return npos;
            if (slots_[i].first == key) return i;
        }
    }
    void grow_for_one() {
        size_t cap = used_.size();
        if (cap && (size_ + 1) * 4 <= cap * 3) return;  // load factor <= 3/4
        size_t next = cap ? cap * 2 : 16;
        std::vector<value_type> old_slots(next);
        std::vector<uint8_t> old_used(next, 0);
        old_slots.swap(slots_);
        old_used.swap(used_);
        mask_ = next - 1;
        shift_ = 64;
        for (size_t c = next; c > 1; c >>= 1) --shift_;
        for (size_t j = 0; j < old_used.size(); ++j) {
            if (!old_used[j]) continue;
            size_t i = home(old_slots[j].first);
            while (used_[i]) i = (i + 1) & mask_;
            used_[i] = 1;
            slots_[i] = std::move(old_slots[j]);
        }
    }
    void erase_at(size_t i) {
        // Backward shift: move later members of the probe run into the hole
        // when the hole lies between their home and where they are.
        size_t hole = i;
        for (size_t j = (i + 1) & mask_; used_[j]; j = (j + 1) & mask_) {
            size_t h = home(slots_[j].first);
            bool movable = hole <= j ? (h <= hole || h > j) : (h <= hole && h > j);
            if (movable) {
                slots_[hole] = std::move(slots_[j]);
                hole = j;
            }
        }
        used_[hole] = 0;
        slots_[hole] = value_type();
        --size_;
    }

    std::vector<value_type> slots_;
    std::vector<uint8_t> used_;
    size_t size_ = 0;
    size_t mask_ = 0;
    unsigned shift_ = 64;
};

}  // namespace msms
