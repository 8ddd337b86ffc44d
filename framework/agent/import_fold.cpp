#include "import_fold.h"

#include <msmemscope/agent.h>

#include <atomic>

#include "channel.h"
#include "live_blocks.h"

namespace msms::agent {
// agent.cpp: a MALLOC row with the given Attr and no stacks.
void write_shadow_malloc(const live_blocks::Block& b, const char* attrs);
// agent.cpp: a HOST FREE row without stacks.
void write_host_free_plain(uint64_t ptr);
bool collecting_now();
}  // namespace msms::agent

namespace msms::agent::import_fold {
namespace {

__thread uint32_t t_depth __attribute__((tls_model("initial-exec")));
// Threads inside a scope now, and blocks remembered by this file (not the
// ones remembered while collection is off: those wait for start()).
std::atomic<int> g_open{0};
std::atomic<int64_t> g_held{0};
// The interpreter is shutting down (after the program's atexit handlers).
std::atomic<bool> g_finalizing{false};

void write_held() {
    if (g_held.load(std::memory_order_relaxed) <= 0) return;
    Tls& t = tls();
    ++t.depth;
    g_held.store(0, std::memory_order_relaxed);
    live_blocks::drain([](const live_blocks::Block& b, void*) { write_shadow_malloc(b, "shadow:true,import:true"); },
                       nullptr);
    --t.depth;
}

}  // namespace

bool alloc(uint64_t ptr, uint64_t size) {
    if (t_depth == 0) return false;
    if (!live_blocks::note_alloc(MSMS_T_HOST, MSMS_DEV_CPU, -1, ptr, size, /*count_overflow=*/false)) return false;
    g_held.fetch_add(1, std::memory_order_relaxed);
    return true;
}

bool release(uint64_t ptr) {
    if (g_finalizing.load(std::memory_order_relaxed)) {
        // Shutdown tears down every module: write the free, without stacks.
        if (g_held.load(std::memory_order_relaxed) > 0 && live_blocks::note_free(MSMS_T_HOST, ptr)) {
            g_held.fetch_sub(1, std::memory_order_relaxed);
            return true;
        }
        write_host_free_plain(ptr);
        return true;
    }
    if (g_open.load(std::memory_order_relaxed) == 0 && g_held.load(std::memory_order_relaxed) <= 0) return false;
    if (!live_blocks::note_free(MSMS_T_HOST, ptr)) return false;
    g_held.fetch_sub(1, std::memory_order_relaxed);
    return true;
}

}  // namespace msms::agent::import_fold

using namespace msms::agent;

extern "C" {

__attribute__((visibility("default"))) void msms_agent_import_enter(void) {
    if (import_fold::t_depth++ == 0) import_fold::g_open.fetch_add(1, std::memory_order_relaxed);
}

__attribute__((visibility("default"))) void msms_agent_import_leave(void) {
    if (import_fold::t_depth == 0) return;
    if (--import_fold::t_depth != 0) return;
    import_fold::g_open.fetch_sub(1, std::memory_order_relaxed);
    // Collection off: the blocks stay remembered and become shadow rows at
    // the next start() like every block allocated while it is off.
    if (collecting_now()) import_fold::write_held();
}

__attribute__((visibility("default"))) void msms_agent_import_finalizing(void) {
    import_fold::g_finalizing.store(true, std::memory_order_relaxed);
}

}  // extern "C"
