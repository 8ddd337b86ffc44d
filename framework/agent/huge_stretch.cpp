#include "huge_stretch.h"

#include <sys/mman.h>

namespace msms::agent::huge_stretch {

void* map() {
    // Twice the size, then the unaligned ends given back.
    void* m = mmap(nullptr, 2 * kBytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (m == MAP_FAILED) return nullptr;
    const uintptr_t lo = reinterpret_cast<uintptr_t>(m);
    const uintptr_t at = (lo + kBytes - 1) & ~(uintptr_t{kBytes} - 1);
    if (at > lo) munmap(m, at - lo);
    if (lo + 2 * kBytes > at + kBytes) munmap(reinterpret_cast<void*>(at + kBytes), lo + 2 * kBytes - at - kBytes);
    // Refused (no THP in this kernel): 4 KiB pages, as any mapping.
    madvise(reinterpret_cast<void*>(at), kBytes, MADV_HUGEPAGE);
    return reinterpret_cast<void*>(at);
}

void unmap(void* p, size_t bytes) { munmap(p, bytes); }

void* Pieces::take() {
    uintptr_t cur = next_.load(std::memory_order_acquire);
    for (;;) {
        if (cur & (kBytes - 1)) {
            if (next_.compare_exchange_weak(cur, cur + piece_, std::memory_order_acq_rel, std::memory_order_acquire))
                return reinterpret_cast<void*>(cur);
            continue;
        }
        void* s = map();
        if (!s) return nullptr;
        const uintptr_t rest = reinterpret_cast<uintptr_t>(s) + piece_;
        if (next_.compare_exchange_strong(cur, rest, std::memory_order_acq_rel, std::memory_order_acquire)) return s;
        munmap(s, kBytes);  // another thread made the next stretch first: cut from it
    }
}

}  // namespace msms::agent::huge_stretch
