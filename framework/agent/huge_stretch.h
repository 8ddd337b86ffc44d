// Memory for the agent's dense tables in 2 MiB stretches the kernel may back
// with one transparent huge page each (MADV_HUGEPAGE: THP "madvise" or
// "always"; elsewhere they are ordinary 4 KiB pages, as before).
//
// Why: the first touch of a fresh 4 KiB page costs a page fault, ~16 us on
// the paravirtualised VMs we measure on. Importing torch fills ~8 MiB of the
// fold map's slots (one per 16 bytes of a 64 MiB heap): ~2,000 faults,
// ~30 ms of the program's start. One huge page replaces 512 of them.
//
// Only for tables that are written nearly everywhere once used: a stretch is
// resident whole once any byte of it is touched, so a sparse table here would
// cost the program up to 2 MiB where it now costs a page. Never the hooked
// heap: plain mmap, no locks (these are called inside malloc's hooks).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

namespace msms::agent::huge_stretch {

constexpr size_t kBytes = size_t{2} << 20;

// A 2 MiB-aligned, 2 MiB read-write anonymous mapping (MAP_NORESERVE) with
// the huge-page advice; nullptr when there is no memory for it.
void* map();
void unmap(void* p, size_t bytes);

// Publishes a freshly mapped table `made` at `at`, lock-free, unless another
// thread published one there first: then that one is returned and `made`
// unmapped (`bytes` long; 0: a piece of a stretch, kept unused). A null
// `made` (no memory) returns null.
template <class T>
T* publish(std::atomic<T*>& at, T* made, size_t bytes) {
    if (!made) return nullptr;
    T* expected = nullptr;
    if (at.compare_exchange_strong(expected, made, std::memory_order_acq_rel, std::memory_order_acquire))
        return made;
    if (bytes) unmap(made, bytes);
    return expected;
}

// Pieces of `piece` bytes (a divisor of kBytes) cut in order from shared
// stretches, lock-free; a piece is never given back. nullptr: no memory.
class Pieces {
public:
    constexpr explicit Pieces(size_t piece) : piece_(piece) {}
    Pieces(const Pieces&) = delete;
    Pieces& operator=(const Pieces&) = delete;
    void* take();

private:
    const size_t piece_;
    // The next piece of the current stretch; 0 or 2 MiB-aligned: none left.
    std::atomic<uintptr_t> next_{0};
};

}  // namespace msms::agent::huge_stretch
