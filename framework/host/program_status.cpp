#include "program_status.h"

#include <sys/mman.h>

#include <atomic>
#include <cstdint>
#include <new>
#include <thread>

namespace msms {
namespace program_status {
namespace {

struct Page {
    std::atomic<int32_t> pid{0};
    std::atomic<int32_t> status{0};
    std::atomic<uint32_t> known{0};  // status is set (release after status)
};
static_assert(std::atomic<int32_t>::is_always_lock_free, "shared between processes");

Page* g_page = nullptr;

}  // namespace

bool setup() {
    if (g_page) return true;
    void* mem = mmap(nullptr, sizeof(Page), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (mem == MAP_FAILED) return false;
    g_page = new (mem) Page();
    return true;
}

void started(pid_t pid) {
    if (!g_page) return;
    g_page->known.store(0, std::memory_order_relaxed);
    g_page->pid.store(pid, std::memory_order_release);
}

void reaped(pid_t pid, int wait_status) {
    if (!g_page || g_page->pid.load(std::memory_order_relaxed) != pid) return;
    g_page->status.store(wait_status, std::memory_order_relaxed);
    g_page->known.store(1, std::memory_order_release);
}

bool wait_for(pid_t pid, std::chrono::milliseconds wait, int& wait_status) {
    if (!g_page || pid <= 0 || g_page->pid.load(std::memory_order_acquire) != pid) return false;
    auto until = std::chrono::steady_clock::now() + wait;
    while (!g_page->known.load(std::memory_order_acquire)) {
        // The CLI reaps within a few milliseconds of the end (Session::run
        // polls every 5 ms); a worker reads the end of the capture first.
        if (std::chrono::steady_clock::now() >= until) return false;
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    wait_status = g_page->status.load(std::memory_order_relaxed);
    return true;
}

}  // namespace program_status
}  // namespace msms
