// The libstdc++ path of bench_capture_workload: a function of the program
// that allocates with operator new (libstdc++, which calls malloc).
#include <cstddef>
#include <new>

extern "C" void* wl_new(std::size_t n) {
    void* p = ::operator new(n);
    __asm__ volatile("" ::: "memory");  // keep this frame (no tail call)
    return p;
}

extern "C" void wl_delete(void* p) {
    ::operator delete(p);
    __asm__ volatile("" ::: "memory");
}
