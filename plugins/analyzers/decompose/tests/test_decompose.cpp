// Unit tests of the decompose analyzer on synthetic event streams.
#include <doctest/doctest.h>

#include <map>
#include <string>

#include <msmemscope/testing.hpp>

#include "../owner_ledger.h"

using namespace msmemscope::testing;
using msms_an::OwnerFigures;
using msms_an::OwnerLedger;

namespace {
const msms_plugin_descriptor* plugin() { return require_descriptor(PLUGIN_PATH); }
}  // namespace

TEST_CASE("owner levels: HOST, CANN@module from the HAL flag word, PTA prefixed to the collector's category") {
    PluginHarness h(plugin());
    REQUIRE(h.create() == MSMS_OK);
    REQUIRE(h.begin() == MSMS_OK);
    h.feed(EventBuilder::malloc(0x1, 10));
    h.feed(EventBuilder::malloc(0x2, 20, MSMS_T_HAL).device(MSMS_DEV_NPU, 0).aux(3ull << 56));
    h.feed(EventBuilder::malloc(0x3, 30, MSMS_T_HAL).device(MSMS_DEV_NPU, 0).aux((33ull << 56) | 5));
    h.feed(EventBuilder::malloc(0x4, 40, MSMS_T_HAL).device(MSMS_DEV_NPU, 0).aux(200ull << 56));
    h.feed(EventBuilder::malloc(0x5, 50, MSMS_T_PTA).device(MSMS_DEV_NPU, 0).attr("owner", "weight"));
    h.feed(EventBuilder::malloc(0x6, 60, MSMS_T_PTA).device(MSMS_DEV_NPU, 0).attr("owner", "ops@aten"));
    h.feed(EventBuilder::malloc(0x7, 70, MSMS_T_PTA).device(MSMS_DEV_NPU, 0).attr("owner", "PTA@gradient"));
    h.feed(EventBuilder::malloc(0x8, 80, MSMS_T_ATB).device(MSMS_DEV_NPU, 0));
    CHECK(h.delivered[0].attr("owner") == "HOST");
    CHECK(h.delivered[1].attr("owner") == "CANN@HCCL");
    CHECK(h.delivered[2].attr("owner") == "CANN@APP");
    CHECK(h.delivered[3].attr("owner") == "CANN@UNKNOWN");
    CHECK(h.delivered[4].attr("owner") == "PTA@weight");
    CHECK(h.delivered[5].attr("owner") == "PTA@ops@aten");
    CHECK(h.delivered[6].attr("owner") == "PTA@gradient");
    CHECK(h.delivered[7].attr("owner") == "ATB");
}

TEST_CASE("CUDA's driver blocks are CUDA's, not an Ascend module's (their flag word is not HAL's)") {
    PluginHarness h(plugin());
    REQUIRE(h.create() == MSMS_OK);
    REQUIRE(h.begin() == MSMS_OK);
    h.feed(EventBuilder::malloc(0x1, 10, MSMS_T_HAL).device(MSMS_DEV_CUDA, 0).attr("driver", "cuda").attr("alloc_type", "alloc"));
    h.feed(EventBuilder::malloc(0x2, 20, MSMS_T_HAL).device(MSMS_DEV_CUDA, 1).aux(7).attr("driver", "cuda"));
    h.feed(EventBuilder::malloc(0x3, 30, MSMS_T_HAL).device(MSMS_DEV_NPU, 0));
    CHECK(h.delivered[0].attr("owner") == "CUDA");
    CHECK(h.delivered[1].attr("owner") == "CUDA");
    CHECK(h.delivered[2].attr("owner") == "CANN@SLOG");  // module 0 of Ascend's list
}

TEST_CASE("live and peak bytes per owner at exit") {
    PluginHarness h(plugin());
    REQUIRE(h.create() == MSMS_OK);
    REQUIRE(h.begin() == MSMS_OK);
    h.feed(EventBuilder::malloc(0x1, 100, MSMS_T_PTA).device(MSMS_DEV_NPU, 0).attr("owner", "weight"));
    h.feed(EventBuilder::malloc(0x2, 300, MSMS_T_PTA).device(MSMS_DEV_NPU, 0).attr("owner", "ops@aten"));
    h.feed(EventBuilder::free(0x2, MSMS_T_PTA).device(MSMS_DEV_NPU, 0));
    h.feed(EventBuilder::malloc(0x2, 50, MSMS_T_PTA).device(MSMS_DEV_NPU, 0).attr("owner", "ops@aten"));
    REQUIRE(h.finish() == MSMS_OK);
    REQUIRE(h.reports.size() == 4);
    CHECK(h.reports[0] == "decompose: memory by owner on device 0:");
    CHECK(h.reports[1].find("  Owner") == 0);
    CHECK(h.reports[2] == "  PTA@ops@aten                                           50              300            2");
    CHECK(h.reports[3] == "  PTA@weight                                            100              100            1");
    REQUIRE(h.findings["owners"].size() == 2);
    CHECK(h.findings["owners"][0]["owner"] == "PTA@ops@aten");
    CHECK(h.findings["owners"][0]["live_bytes"] == "50");
    CHECK(h.findings["owners"][0]["peak_bytes"] == "300");
}

TEST_CASE("an owner label arriving later relabels the block and annotates its MALLOC row") {
    PluginHarness h(plugin());
    REQUIRE(h.create() == MSMS_OK);
    REQUIRE(h.begin() == MSMS_OK);
    h.feed(EventBuilder::malloc(0x10, 64, MSMS_T_PTA).device(MSMS_DEV_NPU, 0).id(5));
    h.feed(EventBuilder::access(0x10).device(MSMS_DEV_NPU, 0).attr("owner", "optimizer_state").id(6));
    CHECK(h.annotations[5]["owner"] == "PTA@optimizer_state");
    REQUIRE(h.finish() == MSMS_OK);
    // the block is the optimizer state's from its MALLOC on, as its row says:
    // the bare framework owner it held for a while is no row of the table
    REQUIRE(h.findings["owners"].size() == 1);
    CHECK(h.findings["owners"][0]["owner"] == "PTA@optimizer_state");
    CHECK(h.findings["owners"][0]["live_bytes"] == "64");
    CHECK(h.findings["owners"][0]["peak_bytes"] == "64");
    CHECK(h.findings["owners"][0]["allocations"] == "1");
}

TEST_CASE("a label for an address inside a block relabels the block that holds it") {
    // torch's file_system sharing: a received DataLoader batch's storage lies
    // 64 bytes into its mapping (the block); the tag names the storage's
    // address, and the host gives the event the holding block's id.
    PluginHarness h(plugin());
    REQUIRE(h.create() == MSMS_OK);
    REQUIRE(h.begin() == MSMS_OK);
    h.feed(EventBuilder::malloc(0x1000, 16064, MSMS_T_PTA).attr("owner", "shared_memory").id(5).allocation_id(41));
    h.feed(EventBuilder::malloc(0x9000, 64, MSMS_T_PTA).attr("owner", "ops@aten").id(6).allocation_id(42));
    h.feed(EventBuilder::access(0x1040).attr("owner", "batch").id(7).allocation_id(41));
    CHECK(h.annotations[5]["owner"] == "PTA@batch");
    CHECK(h.annotations.count(6) == 0);
    // no block holds it (no id from the host): nothing changes
    h.feed(EventBuilder::access(0x5000).attr("owner", "weight").id(8));
    // a freed block's id is no block's any more
    h.feed(EventBuilder::free(0x9000, MSMS_T_PTA).id(9).allocation_id(42));
    h.feed(EventBuilder::access(0x9010).attr("owner", "weight").id(10).allocation_id(42));
    CHECK(h.annotations.count(6) == 0);
    REQUIRE(h.finish() == MSMS_OK);
    std::map<std::string, std::map<std::string, std::string>> by_owner;
    for (auto& f : h.findings["owners"]) by_owner[f["owner"]] = f;
    CHECK(by_owner["PTA@batch"]["live_bytes"] == "16064");
    CHECK(by_owner.count("PTA@shared_memory") == 0);
    CHECK(by_owner.count("PTA@weight") == 0);
}

TEST_CASE("a block counts under the owner it ended with for its whole life, as its row does") {
    // backward(): a gradient is made inside an operator while the operator's
    // scratch is live; the tag comes after the scratch is gone
    PluginHarness h(plugin());
    REQUIRE(h.create() == MSMS_OK);
    REQUIRE(h.begin() == MSMS_OK);
    h.feed(EventBuilder::malloc(0x30, 100, MSMS_T_PTA).attr("owner", "ops@aten").id(1));  // scratch
    h.feed(EventBuilder::malloc(0x40, 64, MSMS_T_PTA).attr("owner", "ops@aten").id(2));   // the gradient
    h.feed(EventBuilder::free(0x30, MSMS_T_PTA).id(3));
    h.feed(EventBuilder::malloc(0x50, 10, MSMS_T_PTA).attr("owner", "ops@aten").id(4));
    h.feed(EventBuilder::access(0x40).device(MSMS_DEV_CPU, -1).attr("owner", "gradient").id(5));
    CHECK(h.annotations[2]["owner"] == "PTA@gradient");
    REQUIRE(h.finish() == MSMS_OK);
    std::map<std::string, std::map<std::string, std::string>> by_owner;
    for (auto& f : h.findings["owners"]) by_owner[f["owner"]] = f;
    REQUIRE(by_owner.size() == 2);
    // never 164: the gradient's bytes were never the operators'
    CHECK(by_owner["PTA@ops@aten"]["peak_bytes"] == "100");
    CHECK(by_owner["PTA@ops@aten"]["live_bytes"] == "10");
    CHECK(by_owner["PTA@ops@aten"]["allocations"] == "2");
    CHECK(by_owner["PTA@gradient"]["peak_bytes"] == "64");
    CHECK(by_owner["PTA@gradient"]["live_bytes"] == "64");
    CHECK(by_owner["PTA@gradient"]["allocations"] == "1");
    CHECK(h.reports[2] == "  PTA@ops@aten                                           10              100            2");
}

TEST_CASE("the ledger: exact within its window, split for a block relabelled after its acquire left it") {
    std::vector<OwnerFigures> figs(3);
    OwnerLedger ledger([&](uint32_t o) -> OwnerFigures& { return figs[o]; }, 2);
    uint32_t a = ledger.open(100, 0);  // entries: +a
    uint32_t b = ledger.open(40, 0);   // +a +b
    ledger.relabel(b, 1);              // b's acquire is in the window: b is owner 1's from its start
    ledger.close(a);                   // +a leaves the window: owner 0 live 100
    CHECK(figs[0].live == 100);
    CHECK(figs[0].peak == 100);
    uint32_t c = ledger.open(7, 0);    // +b leaves under owner 1
    CHECK(figs[1].live == 40);
    CHECK(figs[1].allocations == 1);
    ledger.relabel(c, 2);
    ledger.open(1, 0);                 // -a leaves: owner 0 live 0; +c (owner 2) is next
    ledger.open(1, 0);                 // +c leaves under owner 2
    CHECK(figs[2].live == 7);
    ledger.relabel(b, 2);              // b's acquire was counted: its bytes move from here on
    CHECK(figs[1].live == 0);
    CHECK(figs[1].peak == 40);         // what owner 1 showed before stays
    CHECK(figs[1].allocations == 0);
    CHECK(figs[2].live == 47);
    CHECK(figs[2].peak == 47);
    CHECK(figs[2].allocations == 2);
    ledger.close(b);
    ledger.close(c);
    ledger.flush();
    CHECK(ledger.pending() == 0);
    CHECK(figs[0].live == 2);
    CHECK(figs[0].peak == 100);
    CHECK(figs[0].allocations == 3);
    CHECK(figs[2].live == 0);
    // a freed handle is used again
    uint32_t d = ledger.open(5, 1);
    CHECK((d == a || d == b || d == c));
}

TEST_CASE("a tag belongs to a block: a new block at a freed one's address starts with its own owner") {
    // zero_grad(set_to_none=True): the next gradient may land where the last
    // one was; its tag comes again, after its MALLOC (issue #27 item 2)
    PluginHarness h(plugin());
    REQUIRE(h.create() == MSMS_OK);
    REQUIRE(h.begin() == MSMS_OK);
    h.feed(EventBuilder::malloc(0x20, 64, MSMS_T_PTA).attr("owner", "ops@aten").id(1));
    h.feed(EventBuilder::access(0x20).device(MSMS_DEV_CPU, -1).attr("owner", "gradient").id(2));
    h.feed(EventBuilder::free(0x20, MSMS_T_PTA).id(3));
    h.feed(EventBuilder::access(0x20).device(MSMS_DEV_CPU, -1).attr("owner", "weight").id(4));  // no block there: ignored
    h.feed(EventBuilder::malloc(0x20, 32, MSMS_T_PTA).attr("owner", "ops@aten").id(5));
    CHECK(h.annotations[1]["owner"] == "PTA@gradient");
    CHECK(h.annotations.count(5) == 0);
    CHECK(h.delivered[4].attr("owner") == "PTA@ops@aten");
    h.feed(EventBuilder::access(0x20).device(MSMS_DEV_CPU, -1).attr("owner", "gradient").id(6));
    CHECK(h.annotations[5]["owner"] == "PTA@gradient");
    REQUIRE(h.finish() == MSMS_OK);
    std::map<std::string, std::map<std::string, std::string>> by_owner;
    for (auto& f : h.findings["owners"]) by_owner[f["owner"]] = f;
    CHECK(by_owner["PTA@gradient"]["live_bytes"] == "32");
    CHECK(by_owner["PTA@gradient"]["peak_bytes"] == "64");
    // both blocks ended as gradients: the operators' owner never held bytes
    CHECK(by_owner.count("PTA@ops@aten") == 0);
    CHECK(by_owner.count("PTA@weight") == 0);
}

TEST_CASE("each byte once: a framework block at a live host block's address leaves HOST") {
    PluginHarness h(plugin());
    REQUIRE(h.create() == MSMS_OK);
    REQUIRE(h.begin() == MSMS_OK);
    h.feed(EventBuilder::malloc(0x100, 10, MSMS_T_HOST).device(MSMS_DEV_CPU, -1).id(1));
    // a CPU tensor: the allocator's malloc, then the framework's block at that address
    h.feed(EventBuilder::malloc(0x200, 4096, MSMS_T_HOST).device(MSMS_DEV_CPU, -1).id(2));
    h.feed(EventBuilder::malloc(0x200, 4096, MSMS_T_PTA).device(MSMS_DEV_CPU, -1).id(3));
    h.feed(EventBuilder::free(0x200, MSMS_T_PTA).device(MSMS_DEV_CPU, -1).id(4));
    h.feed(EventBuilder::free(0x200, MSMS_T_HOST).device(MSMS_DEV_CPU, -1).id(5));
    h.feed(EventBuilder::malloc(0x300, 20, MSMS_T_HOST).device(MSMS_DEV_CPU, -1).id(6));
    REQUIRE(h.finish() == MSMS_OK);
    REQUIRE(h.findings["owners"].size() == 2);
    CHECK(h.findings["owners"][0]["owner"] == "PTA");
    CHECK(h.findings["owners"][0]["peak_bytes"] == "4096");
    CHECK(h.findings["owners"][0]["allocations"] == "1");
    CHECK(h.findings["owners"][1]["owner"] == "HOST");
    CHECK(h.findings["owners"][1]["live_bytes"] == "30");
    CHECK(h.findings["owners"][1]["peak_bytes"] == "30");  // never 4106
    CHECK(h.findings["owners"][1]["allocations"] == "2");
}
