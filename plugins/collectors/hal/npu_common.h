// Helpers shared by the Ascend collectors' target-side hook libraries (hal,
// kernel_launch, mstx). Header-only; libc + libdl only; no allocation.
//
//  - WantedDevices: the "device" option of the run (npu, npu:N, cpu) turned
//    into a mask, re-read only when the option text changes.
//  - PtrTable: a fixed-size open-addressing map ptr -> small record, guarded
//    by a spinlock, that remembers the device of each recorded block so that
//    its FREE goes to the same (device, pool) as its MALLOC.
//  - resolve_next(): the next definition of an interposed function, also
//    when the defining library was loaded with RTLD_LOCAL.
#pragma once

#include <msmemscope/agent.h>
#include <msmemscope/spin_lock.hpp>

#include <dlfcn.h>
#include <stdint.h>
#include <string.h>

#include <atomic>

namespace msms_npu {

// ---------------------------------------------------------------- devices
class WantedDevices {
public:
    // true when events of this device are wanted by the run
    bool npu(int id) {
        lock();
        refresh();
        bool r = all_npu_ || (id >= 0 && id < 64 && ((npu_mask_ >> id) & 1u));
        unlock();
        return r;
    }
    bool cpu() {
        lock();
        refresh();
        bool r = cpu_;
        unlock();
        return r;
    }

private:
    void lock() {
        while (busy_.test_and_set(std::memory_order_acquire)) {
        }
    }
    void unlock() { busy_.clear(std::memory_order_release); }
    void refresh() {
        char buf[sizeof(text_)];
        size_t n = msms_agent_option("device", buf, sizeof(buf));
        if (n == len_ && memcmp(buf, text_, n) == 0 && parsed_) return;
        memcpy(text_, buf, n + 1);
        len_ = n;
        parsed_ = true;
        all_npu_ = cpu_ = false;
        npu_mask_ = 0;
        if (n == 0) {  // no option (agent attached without one): take everything
            all_npu_ = cpu_ = true;
            return;
        }
        const char* p = text_;
        while (*p) {
            const char* e = strchr(p, ',');
            size_t l = e ? static_cast<size_t>(e - p) : strlen(p);
            if (l == 3 && strncmp(p, "npu", 3) == 0) all_npu_ = true;
            else if (l == 3 && strncmp(p, "cpu", 3) == 0) cpu_ = true;
            else if (l > 4 && strncmp(p, "npu:", 4) == 0) {
                int id = 0;
                for (size_t i = 4; i < l; ++i) id = id * 10 + (p[i] - '0');
                if (id >= 0 && id < 64) npu_mask_ |= 1ull << id;
            }
            p += l;
            if (*p == ',') ++p;
        }
    }
    char text_[256] = {0};
    size_t len_ = 0;
    bool parsed_ = false;
    bool all_npu_ = false, cpu_ = false;
    uint64_t npu_mask_ = 0;
    std::atomic_flag busy_ = ATOMIC_FLAG_INIT;
};

// ---------------------------------------------------------------- ptr table
struct BlockInfo {
    uint16_t type;         // msms_event_type
    uint16_t device_kind;  // msms_device_kind
    int16_t device_id;
    uint16_t reserved;
    uint64_t size;
};

using msmemscope::SpinLock;

template <uint32_t kCapacity = (1u << 16)>
class PtrTable {
    static_assert((kCapacity & (kCapacity - 1)) == 0, "capacity must be a power of two");
    static constexpr uint64_t kEmpty = 0, kTomb = ~0ull;

public:
    // false when the table is full (the block is then not tracked)
    bool put(uint64_t key, const BlockInfo& v) {
        if (key == kEmpty || key == kTomb) return false;
        lock_.lock();
        uint32_t i = hash(key), tomb = kCapacity;
        bool ok = false;
        for (uint32_t n = 0; n < kCapacity; ++n, i = (i + 1) & (kCapacity - 1)) {
            if (keys_[i] == key) {
                vals_[i] = v;
                ok = true;
                break;
            }
            if (keys_[i] == kTomb && tomb == kCapacity) tomb = i;
            if (keys_[i] == kEmpty) {
                uint32_t at = tomb != kCapacity ? tomb : i;
                keys_[at] = key;
                vals_[at] = v;
                ok = true;
                break;
            }
        }
        if (!ok && tomb != kCapacity) {
            keys_[tomb] = key;
            vals_[tomb] = v;
            ok = true;
        }
        lock_.unlock();
        return ok;
    }
    // removes key; true (and *out) when it was there
    bool take(uint64_t key, BlockInfo* out) { return lookup(key, out, true); }
    bool get(uint64_t key, BlockInfo* out) { return lookup(key, out, false); }

private:
    // Probes for key under the lock; copies its value, and removes it when asked.
    bool lookup(uint64_t key, BlockInfo* out, bool remove) {
        if (key == kEmpty || key == kTomb) return false;
        lock_.lock();
        uint32_t i = hash(key);
        bool found = false;
        for (uint32_t n = 0; n < kCapacity; ++n, i = (i + 1) & (kCapacity - 1)) {
            if (keys_[i] == kEmpty) break;
            if (keys_[i] == key) {
                if (out) *out = vals_[i];
                if (remove) keys_[i] = kTomb;
                found = true;
                break;
            }
        }
        lock_.unlock();
        return found;
    }

    static uint32_t hash(uint64_t k) {
        k ^= k >> 33;
        k *= 0xff51afd7ed558ccdull;
        k ^= k >> 33;
        return static_cast<uint32_t>(k) & (kCapacity - 1);
    }
    SpinLock lock_;
    uint64_t keys_[kCapacity] = {0};
    BlockInfo vals_[kCapacity] = {};
};

// ---------------------------------------------------------------- symbols
// `name` from `first` (a dlsym handle), else from any of `libs` already
// loaded (RTLD_NOLOAD), which also finds libraries dlopen'ed RTLD_LOCAL.
inline void* resolve_from(void* first, const char* name, const char* const* libs) {
    void* f = dlsym(first, name);
    if (f) return f;
    for (; libs && *libs; ++libs) {
        void* h = dlopen(*libs, RTLD_LAZY | RTLD_NOLOAD);
        if (!h) continue;
        f = dlsym(h, name);
        dlclose(h);
        if (f) return f;
    }
    return nullptr;
}

// The next definition of `name` after this library.
inline void* resolve_next(const char* name, const char* const* libs) { return resolve_from(RTLD_NEXT, name, libs); }

// A function anywhere in the process.
inline void* resolve_any(const char* name, const char* const* libs) { return resolve_from(RTLD_DEFAULT, name, libs); }

// ---------------------------------------------------------------- text
// Appends s to buf[pos..cap) keeping NUL termination; returns the new pos.
inline size_t put(char* buf, size_t pos, size_t cap, const char* s) {
    while (*s && pos + 1 < cap) buf[pos++] = *s++;
    buf[pos < cap ? pos : cap - 1] = 0;
    return pos;
}
inline size_t put_u64(char* buf, size_t pos, size_t cap, uint64_t v) {
    char tmp[24];
    int n = 0;
    do {
        tmp[n++] = static_cast<char>('0' + v % 10);
        v /= 10;
    } while (v);
    char rev[24];
    for (int i = 0; i < n; ++i) rev[i] = tmp[n - 1 - i];
    rev[n] = 0;
    return put(buf, pos, cap, rev);
}

}  // namespace msms_npu
