#include "import_fold.h"

#include <msmemscope/agent.h>

#include <atomic>
#include <cstdio>

#include "channel.h"
#include "fold_map.h"
#include "live_blocks.h"

namespace msms::agent {
// agent.cpp: a MALLOC row with the given Attr and no stacks.
void write_shadow_malloc(const live_blocks::Block& b, const char* attrs);
// agent.cpp: a HOST FREE row without stacks (attrs may be null).
void write_host_free_plain(uint64_t ptr, const char* attrs = nullptr);
bool collecting_now();
}  // namespace msms::agent

namespace msms::agent::import_fold {
namespace {

__thread uint32_t t_depth __attribute__((tls_model("initial-exec")));
// The folded blocks held now and their bytes.
fold_map::Map g_map;
std::atomic<int64_t> g_blocks{0}, g_bytes{0};
// The interpreter is shutting down (after the program's atexit handlers).
std::atomic<bool> g_finalizing{false};
// The imports' heap as last written (one writer at a time: g_writing).
std::atomic_flag g_writing = ATOMIC_FLAG_INIT;
bool g_published = false;
int64_t g_pub_blocks = 0, g_pub_bytes = 0;

bool forget(uint64_t ptr) {
    if (g_blocks.load(std::memory_order_relaxed) <= 0) return false;
    uint64_t size = 0;
    if (!g_map.take(ptr, &size)) return false;
    g_blocks.fetch_sub(1, std::memory_order_relaxed);
    g_bytes.fetch_sub(static_cast<int64_t>(size), std::memory_order_relaxed);
    return true;
}

}  // namespace

bool alloc(uint64_t ptr, uint64_t size) {
    if (t_depth == 0) return false;
    if (!g_map.put(ptr, size)) return false;
    g_blocks.fetch_add(1, std::memory_order_relaxed);
    g_bytes.fetch_add(static_cast<int64_t>(size), std::memory_order_relaxed);
    return true;
}

bool release(uint64_t ptr) {
    if (forget(ptr)) return true;
    if (g_finalizing.load(std::memory_order_relaxed)) {
        // Shutdown tears down every module: write the free, without stacks.
        write_host_free_plain(ptr);
        return true;
    }
    return false;
}

bool release_quiet(uint64_t ptr) { return forget(ptr); }

void publish() {
    if (!collecting_now()) return;
    Tls& t = tls();
    ++t.depth;  // the rows' own allocations stay unrecorded
    while (g_writing.test_and_set(std::memory_order_acquire)) {
    }
    const int64_t blocks = g_blocks.load(std::memory_order_relaxed);
    const int64_t bytes = g_bytes.load(std::memory_order_relaxed);
    if (blocks != g_pub_blocks || bytes != g_pub_bytes || (blocks > 0) != g_published) {
        if (g_published) write_host_free_plain(kImportHeapAddr, "shadow:true,import:true");
        g_published = blocks > 0;
        if (g_published) {
            char attrs[96];
            snprintf(attrs, sizeof(attrs), "shadow:true,import:true,blocks:%lld", static_cast<long long>(blocks));
            live_blocks::Block b{kImportHeapAddr, static_cast<uint64_t>(bytes > 0 ? bytes : 0), MSMS_T_HOST,
                                 MSMS_DEV_CPU, -1};
            write_shadow_malloc(b, attrs);
        }
        g_pub_blocks = blocks;
        g_pub_bytes = bytes;
    }
    g_writing.clear(std::memory_order_release);
    --t.depth;
}

void after_fork() {
    g_writing.clear(std::memory_order_relaxed);  // a thread of the parent may have held it
    g_published = false;
    g_pub_blocks = g_pub_bytes = 0;
}

}  // namespace msms::agent::import_fold

using namespace msms::agent;

extern "C" {

__attribute__((visibility("default"))) void msms_agent_import_enter(void) {
    ++import_fold::t_depth;
}

__attribute__((visibility("default"))) void msms_agent_import_leave(void) {
    if (import_fold::t_depth == 0) return;
    if (--import_fold::t_depth != 0) return;
    // Collection off: written when it starts (msms_agent_start).
    import_fold::publish();
}

__attribute__((visibility("default"))) void msms_agent_import_finalizing(void) {
    import_fold::g_finalizing.store(true, std::memory_order_relaxed);
}

}  // extern "C"
