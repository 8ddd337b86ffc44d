#include "import_fold.h"

#include <msmemscope/agent.h>

#include <atomic>
#include <cstdio>

#include "channel.h"
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
// Threads inside a scope now.
std::atomic<int> g_open{0};
// The folded blocks held now and their bytes.
live_blocks::Table g_table;
std::atomic<int64_t> g_blocks{0}, g_bytes{0};
// The interpreter is shutting down (after the program's atexit handlers).
std::atomic<bool> g_finalizing{false};
// The imports' heap as last written (one writer at a time: g_writing).
std::atomic_flag g_writing = ATOMIC_FLAG_INIT;
bool g_published = false;
int64_t g_pub_blocks = 0, g_pub_bytes = 0;

bool forget(uint64_t ptr) {
    if (g_blocks.load(std::memory_order_relaxed) <= 0) return false;
    // No import running: the filter built when the last one ended answers
    // most frees of the program's own blocks with one read (instead of two
    // cache lines per level of the table: ~3% of a training loop).
    if (g_open.load(std::memory_order_acquire) == 0 && !g_table.maybe_holds(MSMS_T_HOST, ptr)) return false;
    uint64_t size = 0;
    if (!g_table.note_free(MSMS_T_HOST, ptr, &size)) return false;
    g_blocks.fetch_sub(1, std::memory_order_relaxed);
    g_bytes.fetch_sub(static_cast<int64_t>(size), std::memory_order_relaxed);
    return true;
}

}  // namespace

bool alloc(uint64_t ptr, uint64_t size) {
    if (t_depth == 0) return false;
    if (!g_table.note_alloc(MSMS_T_HOST, MSMS_DEV_CPU, -1, ptr, size, /*count_overflow=*/false)) return false;
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

// This thread's outermost import ended: the last one running rebuilds the
// filter (one at a time: g_writing), the others leave it to the last.
void leave_last() {
    Tls& t = tls();
    ++t.depth;
    while (g_writing.test_and_set(std::memory_order_acquire)) {
    }
    if (g_open.fetch_sub(1, std::memory_order_acq_rel) == 1 && g_blocks.load(std::memory_order_relaxed) > 0)
        g_table.rebuild_filter();
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
    if (import_fold::t_depth++ == 0) import_fold::g_open.fetch_add(1, std::memory_order_acq_rel);
}

__attribute__((visibility("default"))) void msms_agent_import_leave(void) {
    if (import_fold::t_depth == 0) return;
    if (--import_fold::t_depth != 0) return;
    // Collection off: written when it starts (msms_agent_start).
    import_fold::publish();
    import_fold::leave_last();
}

__attribute__((visibility("default"))) void msms_agent_import_finalizing(void) {
    import_fold::g_finalizing.store(true, std::memory_order_relaxed);
}

}  // extern "C"
