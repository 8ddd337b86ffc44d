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
// The blocks this process folded, and in a forked child those its
// ancestors folded before each fork (newest first): a child's imports' heap
// counts its own blocks, and its free of an inherited one is forgotten
// without a row, as the parent's would be. The parent's blocks were written
// as the parent's; counted again in the child they made a DataLoader
// worker's peak the whole parent's import heap (62 MiB for 12 KiB of its
// own). Past kGenerations forks deep, the oldest generation's blocks are
// forgotten: their frees are written as any block's the child did not
// allocate.
constexpr int kGenerations = 4;
fold_map::Map g_maps[kGenerations];
int g_own = 0;        // this process's map
int g_inherited = 0;  // maps of ancestors: g_maps[g_own - 1], [g_own - 2], ... (mod kGenerations)

// The folded blocks held now and their bytes, counted per thread: a locked
// add per figure on each allocation and free was ~40% of the fold's cost
// while `import torch` (~2 M of them). A thread takes a tally the first time
// it folds or forgets a block and is the only one to write it (a relaxed
// load and store, no locked instruction); the figures are the sum of all
// tallies (a thread that frees another's blocks counts below zero). Threads
// past kTallies share one, with atomic adds. A tally outlives its thread.
struct alignas(64) Tally {
    std::atomic<int64_t> blocks{0}, bytes{0};
};
constexpr size_t kTallies = 1024;
Tally g_tallies[kTallies];
Tally g_shared_tally;
std::atomic<size_t> g_tallies_taken{0};
__thread Tally* t_tally __attribute__((tls_model("initial-exec"))) = nullptr;
// Some block was folded once (frees skip the table until then).
std::atomic<bool> g_any{false};

inline void count(int64_t blocks, int64_t bytes) {
    Tally* t = t_tally;
    if (__builtin_expect(t == nullptr, 0)) {
        size_t i = g_tallies_taken.fetch_add(1, std::memory_order_relaxed);
        t = t_tally = i < kTallies ? &g_tallies[i] : &g_shared_tally;
    }
    if (__builtin_expect(t != &g_shared_tally, 1)) {
        t->blocks.store(t->blocks.load(std::memory_order_relaxed) + blocks, std::memory_order_relaxed);
        t->bytes.store(t->bytes.load(std::memory_order_relaxed) + bytes, std::memory_order_relaxed);
    } else {
        t->blocks.fetch_add(blocks, std::memory_order_relaxed);
        t->bytes.fetch_add(bytes, std::memory_order_relaxed);
    }
}

// The sum of the tallies (a snapshot, as any count read beside other threads' allocations).
void totals(int64_t& blocks, int64_t& bytes) {
    blocks = g_shared_tally.blocks.load(std::memory_order_relaxed);
    bytes = g_shared_tally.bytes.load(std::memory_order_relaxed);
    size_t n = g_tallies_taken.load(std::memory_order_relaxed);
    for (size_t i = 0; i < n && i < kTallies; ++i) {
        blocks += g_tallies[i].blocks.load(std::memory_order_relaxed);
        bytes += g_tallies[i].bytes.load(std::memory_order_relaxed);
    }
}
// The interpreter is shutting down (after the program's atexit handlers).
std::atomic<bool> g_finalizing{false};
// The imports' heap as last written (one writer at a time: g_writing).
std::atomic_flag g_writing = ATOMIC_FLAG_INIT;
bool g_published = false;
int64_t g_pub_blocks = 0, g_pub_bytes = 0;

bool forget(uint64_t ptr) {
    if (!g_any.load(std::memory_order_relaxed)) return false;
    uint64_t size = 0;
    if (g_maps[g_own].take(ptr, &size)) {
        count(-1, -static_cast<int64_t>(size));
        return true;
    }
    for (int i = 1; i <= g_inherited; ++i)
        if (g_maps[(g_own + kGenerations - i) % kGenerations].take(ptr, &size)) return true;
    return false;
}

}  // namespace

bool alloc(uint64_t ptr, uint64_t size) {
    if (t_depth == 0) return false;
    if (!g_maps[g_own].put(ptr, size)) return false;
    count(1, static_cast<int64_t>(size));
    if (__builtin_expect(!g_any.load(std::memory_order_relaxed), 0)) g_any.store(true, std::memory_order_relaxed);
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
    int64_t blocks = 0, bytes = 0;
    totals(blocks, bytes);
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
    if (!g_any.load(std::memory_order_relaxed)) return;
    // What the parent folded becomes inherited; this child's count starts at 0.
    g_own = (g_own + 1) % kGenerations;
    if (g_inherited == kGenerations - 1) g_maps[g_own].abandon();  // the oldest generation's
    else ++g_inherited;
    size_t n = g_tallies_taken.load(std::memory_order_relaxed);
    for (size_t i = 0; i < n && i < kTallies; ++i) {
        g_tallies[i].blocks.store(0, std::memory_order_relaxed);
        g_tallies[i].bytes.store(0, std::memory_order_relaxed);
    }
    g_shared_tally.blocks.store(0, std::memory_order_relaxed);
    g_shared_tally.bytes.store(0, std::memory_order_relaxed);
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
