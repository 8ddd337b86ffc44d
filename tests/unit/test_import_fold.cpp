// Host blocks of Python imports (framework/agent/import_fold.h), with the
// agent's row writer replaced by a recorder: what is folded, what a free
// inside or after the scope does, when the still-live blocks are written.
#include <doctest/doctest.h>
#include <msmemscope/abi.h>

#include <algorithm>
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
bool g_collecting = true;
}  // namespace

void write_shadow_malloc(const live_blocks::Block& b, const char* attrs) {
    CHECK(t_tls.depth > 0);  // the agent's own allocations stay unrecorded meanwhile
    g_shadow_rows.push_back({b.ptr, b.size, attrs});
}
void write_host_free_plain(uint64_t ptr) { g_plain_frees.push_back(ptr); }
bool collecting_now() { return g_collecting; }
}  // namespace msms::agent

namespace fold = msms::agent::import_fold;
using msms::agent::g_shadow_rows;

namespace {
void reset() {
    g_shadow_rows.clear();
    msms::agent::g_plain_frees.clear();
    msms::agent::g_collecting = true;
    msms::agent::live_blocks::drain([](const msms::agent::live_blocks::Block&, void*) {}, nullptr);
}
}  // namespace

TEST_CASE("outside a scope nothing is folded; inside, blocks still live at the outermost end become shadow rows") {
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
    std::sort(g_shadow_rows.begin(), g_shadow_rows.end(), [](auto& a, auto& b) { return a.ptr < b.ptr; });
    REQUIRE(g_shadow_rows.size() == 2);
    CHECK(g_shadow_rows[0].ptr == 0x2000);
    CHECK(g_shadow_rows[0].size == 20);
    CHECK(g_shadow_rows[0].attrs == "shadow:true,import:true");
    CHECK(g_shadow_rows[1].ptr == 0x4000);
    // written now: their frees are ordinary rows from here on
    CHECK_FALSE(fold::release(0x2000));
    CHECK_FALSE(fold::alloc(0x5000, 50));
    msms_agent_import_leave();  // unbalanced: ignored
    CHECK_FALSE(fold::alloc(0x5000, 50));
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
}

TEST_CASE("collection off when the import ends: the blocks wait for start() like every block made while off") {
    reset();
    msms_agent_import_enter();
    CHECK(fold::alloc(0x8000, 80));
    msms::agent::g_collecting = false;
    msms_agent_import_leave();
    CHECK(g_shadow_rows.empty());
    CHECK(msms::agent::live_blocks::size() == 1);
}

TEST_CASE("after finalizing, host frees are written here without stacks; folded ones still have no row") {
    reset();
    msms_agent_import_enter();
    CHECK(fold::alloc(0xa000, 1));
    msms_agent_import_finalizing();
    CHECK(fold::release(0xa000));
    CHECK(msms::agent::g_plain_frees.empty());
    CHECK(fold::release(0xb000));
    CHECK(msms::agent::g_plain_frees == std::vector<uint64_t>{0xb000});
    msms_agent_import_leave();
    CHECK(g_shadow_rows.empty());
}
