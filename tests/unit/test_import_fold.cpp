// Host blocks of Python imports (framework/agent/import_fold.h), with the
// agent's row writer replaced by a recorder: what is folded, what a free
// inside or after the scope does, when the imports' heap is written.
#include <doctest/doctest.h>
#include <msmemscope/abi.h>

#include <algorithm>
#include <initializer_list>
#include <string>
#include <thread>
#include <vector>

#include "agent/channel.h"
#include "agent/import_fold.h"
#include "agent/live_blocks.h"

extern "C" {
void msms_agent_import_enter(void);
void msms_agent_import_leave(void);
void msms_agent_import_finalizing(void);
}

namespace msms::agent {
__thread Tls t_tls __attribute__((tls_model("initial-exec")));

namespace {
struct Row {
    uint64_t ptr, size;
    std::string attrs;
};
std::vector<Row> g_shadow_rows;
std::vector<uint64_t> g_plain_frees;
std::vector<std::string> g_free_attrs;
bool g_collecting = true;
}  // namespace

void write_shadow_malloc(const live_blocks::Block& b, const char* attrs) {
    CHECK(t_tls.depth > 0);  // the agent's own allocations stay unrecorded meanwhile
    g_shadow_rows.push_back({b.ptr, b.size, attrs});
}
void write_host_free_plain(uint64_t ptr, const char* attrs) {
    g_plain_frees.push_back(ptr);
    g_free_attrs.push_back(attrs ? attrs : "");
}
bool collecting_now() { return g_collecting; }
}  // namespace msms::agent

namespace fold = msms::agent::import_fold;
using msms::agent::g_shadow_rows;

namespace {
constexpr uint64_t kHeap = fold::kImportHeapAddr;

// Frees every folded block a case left (they live until freed) and forgets
// the rows written so far.
void reset(std::initializer_list<uint64_t> left = {}) {
    for (uint64_t p : left) fold::release_quiet(p);
    msms::agent::g_collecting = true;
    fold::publish();  // the imports' heap, now empty: its FREE
    g_shadow_rows.clear();
    msms::agent::g_plain_frees.clear();
    msms::agent::g_free_attrs.clear();
}
}  // namespace

TEST_CASE("outside a scope nothing is folded; inside, blocks still live at the outermost end are written as one block") {
    reset();
    CHECK_FALSE(fold::alloc(0x1000, 10));
    CHECK_FALSE(fold::release(0x1000));
    msms_agent_import_enter();
    CHECK(fold::alloc(0x2000, 20));  // kept
    CHECK(fold::alloc(0x3000, 30));  // made and freed inside: never written
    msms_agent_import_enter();       // a nested import
    CHECK(fold::alloc(0x4000, 40));
    CHECK(fold::release(0x3000));
    msms_agent_import_leave();
    CHECK(g_shadow_rows.empty());  // only the outermost end writes
    CHECK_FALSE(fold::release(0x9000));  // a block from before the import: its FREE row is written as usual
    msms_agent_import_leave();
    REQUIRE(g_shadow_rows.size() == 1);
    CHECK(g_shadow_rows[0].ptr == kHeap);
    CHECK(g_shadow_rows[0].size == 60);
    CHECK(g_shadow_rows[0].attrs == "shadow:true,import:true,blocks:2");
    CHECK(msms::agent::g_plain_frees.empty());
    // folded for life: a later free has no row; the next end writes the heap again
    CHECK(fold::release(0x2000));
    CHECK(msms::agent::g_plain_frees.empty());
    CHECK_FALSE(fold::alloc(0x5000, 50));  // outside a scope
    msms_agent_import_enter();
    CHECK(fold::alloc(0x6000, 5));
    msms_agent_import_leave();
    CHECK(msms::agent::g_plain_frees == std::vector<uint64_t>{kHeap});  // the heap before: freed
    CHECK(msms::agent::g_free_attrs == std::vector<std::string>{"shadow:true,import:true"});
    REQUIRE(g_shadow_rows.size() == 2);
    CHECK(g_shadow_rows[1].ptr == kHeap);
    CHECK(g_shadow_rows[1].size == 45);
    CHECK(g_shadow_rows[1].attrs == "shadow:true,import:true,blocks:2");
    msms_agent_import_leave();  // unbalanced: ignored
    CHECK_FALSE(fold::alloc(0x5000, 50));
    // an import that leaves the figures as they were writes nothing
    msms_agent_import_enter();
    CHECK(fold::alloc(0x7000, 7));
    CHECK(fold::release(0x7000));
    msms_agent_import_leave();
    CHECK(g_shadow_rows.size() == 2);
    reset({0x4000, 0x6000});
}

TEST_CASE("a folded block freed on another thread while the import runs has no row") {
    reset();
    msms_agent_import_enter();
    CHECK(fold::alloc(0x6000, 60));
    bool folded = false;
    std::thread([&] {
        CHECK_FALSE(fold::alloc(0x7000, 70));  // this thread is not importing
        folded = fold::release(0x6000);
    }).join();
    CHECK(folded);
    msms_agent_import_leave();
    CHECK(g_shadow_rows.empty());
    CHECK(msms::agent::g_plain_frees.empty());
}

TEST_CASE("the figures are exact across many threads, past the per-thread tallies, concurrent or in turn") {
    // Each thread counts its own folds and frees (import_fold.cpp): 1200
    // threads in turn pass the 1024 tallies (the rest share one), and eight
    // at once fold and free each other's blocks.
    reset();
    constexpr uint64_t kBase = 0x40000000, kThreads = 1200;
    for (uint64_t i = 0; i < kThreads; ++i)
        std::thread([i] {
            msms_agent_import_enter();
            CHECK(fold::alloc(kBase + 16 * i, i + 1));
            msms_agent_import_leave();
        }).join();
    REQUIRE(!g_shadow_rows.empty());
    CHECK(g_shadow_rows.back().size == kThreads * (kThreads + 1) / 2);
    CHECK(g_shadow_rows.back().attrs == "shadow:true,import:true,blocks:1200");
    // the odd ones freed by eight threads at once, each folding 1000 blocks of
    // its own meanwhile and freeing half of them
    std::vector<std::thread> team;
    for (uint64_t t = 0; t < 8; ++t)
        team.emplace_back([t] {
            for (uint64_t i = 1 + 2 * t; i < kThreads; i += 16) CHECK(fold::release(kBase + 16 * i));
            msms_agent_import_enter();
            const uint64_t own = 0x80000000 + t * 0x100000;
            for (uint64_t k = 0; k < 1000; ++k) CHECK(fold::alloc(own + 16 * k, 3));
            for (uint64_t k = 0; k < 1000; k += 2) CHECK(fold::release(own + 16 * k));
            msms_agent_import_leave();
        });
    for (auto& th : team) th.join();
    fold::publish();
    uint64_t even = 0;
    for (uint64_t i = 0; i < kThreads; i += 2) even += i + 1;
    CHECK(g_shadow_rows.back().size == even + 8 * 500 * 3);
    CHECK(g_shadow_rows.back().attrs == "shadow:true,import:true,blocks:" + std::to_string(kThreads / 2 + 8 * 500));
    std::vector<uint64_t> left;
    for (uint64_t i = 0; i < kThreads; i += 2) left.push_back(kBase + 16 * i);
    for (uint64_t t = 0; t < 8; ++t)
        for (uint64_t k = 1; k < 1000; k += 2) left.push_back(0x80000000 + t * 0x100000 + 16 * k);
    for (uint64_t p : left) CHECK(fold::release_quiet(p));
    reset();
}

TEST_CASE("collection off when the import ends: the heap is written when it starts; frees while off are forgotten") {
    reset();
    msms_agent_import_enter();
    CHECK(fold::alloc(0x8000, 80));
    CHECK(fold::alloc(0x8100, 8));
    msms::agent::g_collecting = false;
    msms_agent_import_leave();
    CHECK(g_shadow_rows.empty());
    CHECK(fold::release_quiet(0x8100));  // freed while off
    CHECK_FALSE(fold::release_quiet(0x8200));
    msms::agent::g_collecting = true;
    fold::publish();  // what msms_agent_start does
    REQUIRE(g_shadow_rows.size() == 1);
    CHECK(g_shadow_rows[0].size == 80);
    CHECK(g_shadow_rows[0].attrs == "shadow:true,import:true,blocks:1");
    reset({0x8000});
}

TEST_CASE("between imports a free of the program's own block is not folded; blocks of a later import are found") {
    reset();
    msms_agent_import_enter();
    CHECK(fold::alloc(0xd000, 1));
    msms_agent_import_leave();
    CHECK_FALSE(fold::release(0xd100));  // not an import's block
    msms_agent_import_enter();
    CHECK(fold::alloc(0xd200, 2));
    msms_agent_import_enter();  // nested
    msms_agent_import_leave();
    std::thread([] { CHECK(fold::release(0xd200)); }).join();  // freed while the import runs, on another thread
    CHECK(fold::alloc(0xd300, 3));
    msms_agent_import_leave();
    CHECK(fold::release(0xd300));  // made in the later import
    CHECK(fold::release(0xd000));
    reset();
}

TEST_CASE("after finalizing, host frees are written here without stacks; folded ones still have no row") {
    reset();
    msms_agent_import_enter();
    CHECK(fold::alloc(0xa000, 1));
    CHECK(fold::alloc(0xa100, 2));
    msms_agent_import_leave();
    REQUIRE(g_shadow_rows.size() == 1);
    msms_agent_import_finalizing();
    CHECK(fold::release(0xa000));
    CHECK(msms::agent::g_plain_frees.empty());
    CHECK(fold::release(0xb000));
    CHECK(msms::agent::g_plain_frees == std::vector<uint64_t>{0xb000});
    // the process exits (the agent's at_exit): what is left of the heap, live at exit
    fold::publish();
    REQUIRE(g_shadow_rows.size() == 2);
    CHECK(msms::agent::g_plain_frees == std::vector<uint64_t>{0xb000, kHeap});
    CHECK(g_shadow_rows[1].size == 2);
    CHECK(g_shadow_rows[1].attrs == "shadow:true,import:true,blocks:1");
    reset({0xa100});
}

TEST_CASE("a forked child's imports' heap holds its own blocks only; the parent's are forgotten without a row") {
    reset();
    msms_agent_import_enter();
    CHECK(fold::alloc(0xc000, 12));
    msms_agent_import_leave();
    REQUIRE(g_shadow_rows.size() == 1);  // the parent's heap
    fold::after_fork();
    fold::publish();
    CHECK(g_shadow_rows.size() == 1);  // the child has none of its own: no row
    CHECK(fold::release(0xc000));      // the parent's block freed in the child: forgotten, not counted
    fold::publish();
    CHECK(g_shadow_rows.size() == 1);
    msms_agent_import_enter();
    CHECK(fold::alloc(0xd000, 7));
    msms_agent_import_leave();
    REQUIRE(g_shadow_rows.size() == 2);  // a MALLOC of the child's own, no FREE of a row its stream never had
    CHECK(g_shadow_rows[1].size == 7);
    CHECK(g_shadow_rows[1].attrs == "shadow:true,import:true,blocks:1");
    CHECK(msms::agent::g_plain_frees.empty());
    reset({0xd000});
}
