// The sinks' threads (framework/host/sink_lanes.h): every lane sees every
// item, in the order handed, with its text intact after the pipeline's own
// buffers changed; finish runs after the last item; a lane that does not
// keep up holds the sender at kMaxQueued batches; stopping drops the rest.
#include <doctest/doctest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "host/sink_lanes.h"

using msms::SinkItem;
using msms::SinkLanes;

namespace {
msms_str str(const std::string& s) { return {s.data(), static_cast<uint32_t>(s.size())}; }
std::string text(msms_str s) { return std::string(s.data ? s.data : "", s.size); }

struct Seen {
    std::vector<std::string> items;
    bool finished_after_all = false;
};
}  // namespace

TEST_CASE("sink lanes: each lane gets every item in order, its text copied, then finish") {
    const int kEvents = 3 * static_cast<int>(SinkLanes::kBatchItems) + 17;  // several batches and a partial one
    std::vector<Seen> seen(3);
    std::vector<SinkLanes::Lane> lanes;
    for (auto& s : seen) {
        Seen* p = &s;
        lanes.push_back({[p](const SinkItem& it) {
                             if (it.kind == SinkItem::Event) {
                                 std::string row = "e" + std::to_string(it.ev.id) + ":" + text(it.ev.name) + ":" +
                                                   text(it.ev.py_stack) + ":" + std::to_string(it.ev.attr_count);
                                 for (uint32_t i = 0; i < it.ev.attr_count; ++i)
                                     row += ":" + text(it.ev.attrs[i].key) + "=" + text(it.ev.attrs[i].value);
                                 p->items.push_back(row);
                             } else if (it.kind == SinkItem::Annotation) {
                                 p->items.push_back("a" + std::to_string(it.id) + ":" + text(it.key) + "=" + text(it.value));
                             } else {
                                 std::string row = "f:" + text(it.key);
                                 for (uint32_t i = 0; i < it.n; ++i) row += ":" + text(it.cols[i].value);
                                 p->items.push_back(row);
                             }
                         },
                         [p] { p->finished_after_all = true; }});
    }
    SinkLanes sl(std::move(lanes), 1);
    std::vector<std::string> want;
    std::string name, stack, key, value;  // reused, as the pipeline reuses its buffers
    for (int i = 1; i <= kEvents; ++i) {
        name = "op" + std::to_string(i % 13);
        stack = std::string(static_cast<size_t>(i % 300), 'x') + "frame " + std::to_string(i);
        key = "owner";
        value = "PTA@" + std::to_string(i);
        msms_kv kv{str(key), str(value)};
        msms_event ev{};
        ev.struct_size = sizeof ev;
        ev.id = static_cast<uint64_t>(i);
        ev.name = str(name);
        ev.py_stack = str(stack);
        ev.attrs = &kv;
        ev.attr_count = 1;
        sl.event(ev);
        want.push_back("e" + std::to_string(i) + ":" + name + ":" + stack + ":1:owner=" + value);
        name.assign(name.size(), '#');  // the copy must not see this
        stack.assign(stack.size(), '#');
        value.assign(value.size(), '#');
        if (i % 1000 == 0) {
            std::string v = "gradient";
            sl.annotation(static_cast<uint64_t>(i - 5), str(key), str(v));
            want.push_back("a" + std::to_string(i - 5) + ":owner=gradient");
            std::string table = "leaks", col = "c", cv = std::to_string(i);
            msms_kv c{str(col), str(cv)};
            sl.finding(str(table), &c, 1);
            want.push_back("f:leaks:" + std::to_string(i));
        }
        if (i % 5000 == 0) sl.publish();  // as the pipeline does when it waits for events
    }
    sl.finish();
    for (auto& s : seen) {
        CHECK(s.items.size() == want.size());
        CHECK(s.items == want);
        CHECK(s.finished_after_all);
    }
}

TEST_CASE("sink lanes: a lane that does not keep up holds the sender; stopping drops what is queued") {
    std::mutex mu;
    std::condition_variable cv;
    bool release = false;
    std::atomic<int> handled{0};
    std::atomic<bool> finished{false};
    std::vector<SinkLanes::Lane> lanes;
    lanes.push_back({[&](const SinkItem&) {
                         std::unique_lock<std::mutex> lk(mu);
                         cv.wait(lk, [&] { return release; });
                         ++handled;
                     },
                     [&] { finished = true; }});
    std::atomic<int> published{0};
    std::atomic<bool> sender_done{false};
    {
        SinkLanes sl(std::move(lanes), 1);
        std::thread sender([&] {
            msms_event ev{};
            ev.struct_size = sizeof ev;
            // one batch in the lane's hands, kMaxQueued queued, then the sender waits
            for (size_t b = 0; b < SinkLanes::kMaxQueued + 3; ++b) {
                ev.id = b + 1;
                sl.event(ev);
                sl.publish();
                ++published;
            }
            sender_done = true;
        });
        // the sender gets as far as the queue allows, then waits: wait for
        // it to stop moving at exactly that point
        while (published.load() < static_cast<int>(SinkLanes::kMaxQueued) + 1) std::this_thread::yield();
        CHECK(!sender_done.load());
        {
            std::lock_guard<std::mutex> lk(mu);
            release = true;
        }
        cv.notify_all();
        sender.join();
        CHECK(sender_done.load());
        // ~SinkLanes without finish(): stops, what is still queued is dropped
    }
    CHECK(!finished.load());
    CHECK(handled.load() <= static_cast<int>(SinkLanes::kMaxQueued) + 3);
}

TEST_CASE("sink lanes: a stack text the owner keeps is handed as it is, the rest copied") {
    std::vector<const char*> py_seen, c_seen, name_seen;
    std::vector<SinkLanes::Lane> lanes;
    lanes.push_back({[&](const SinkItem& it) {
                         py_seen.push_back(it.ev.py_stack.data);
                         c_seen.push_back(it.ev.c_stack.data);
                         name_seen.push_back(it.ev.name.data);
                     },
                     nullptr});
    SinkLanes sl(std::move(lanes), 1);
    const std::string py = "train.py(3): step", c = "malloc+0x10 in libc.so.6", name = "op";
    msms_event ev{};
    ev.struct_size = sizeof ev;
    ev.py_stack = str(py);
    ev.c_stack = str(c);
    ev.name = str(name);
    sl.event(ev, true, false);  // the Python stack kept by its owner (the symbolizer's cache)
    sl.event(ev, false, true);
    sl.finish();
    REQUIRE(py_seen.size() == 2);
    CHECK(py_seen[0] == py.data());
    CHECK(c_seen[0] != c.data());
    CHECK(py_seen[1] != py.data());
    CHECK(c_seen[1] == c.data());
    CHECK(name_seen[0] != name.data());  // never kept
}

// A sink failing in its finish() is told to the sinks after it just before
// they finish (Pipeline::tell_sink_of_later_failures): side by side, the
// html page finishing at the same time as the failing sink did not name it.
// Lane 0's finish is held until lanes 1 and 2 each wait for their turn
// (SinkLanes::watch_finish_turns), or one of them has finished: in order,
// both wait and lane 0 finishes first; side by side, lane 1 or 2 finishes
// while lane 0's finish is held. Barriers both ways, no timing.
TEST_CASE("sink lanes: the lanes finish one after another, in their order") {
    std::mutex mu;
    std::condition_variable cv;
    std::vector<int> order;
    std::set<size_t> waiting;  // the lanes seen waiting for their turn
    std::vector<SinkLanes::Lane> lanes;
    lanes.push_back({[](const SinkItem&) {},
                     [&] {
                         std::unique_lock<std::mutex> lk(mu);
                         cv.wait(lk, [&] { return waiting.size() == 2 || !order.empty(); });
                         order.push_back(0);
                     }});
    for (int i = 1; i <= 2; ++i)
        lanes.push_back({[](const SinkItem&) {}, [&, i] {
                             std::lock_guard<std::mutex> lk(mu);
                             order.push_back(i);
                             cv.notify_all();
                         }});
    SinkLanes sl(std::move(lanes), 1);
    sl.watch_finish_turns([&](size_t lane) {
        std::lock_guard<std::mutex> lk(mu);
        waiting.insert(lane);
        cv.notify_all();
    });
    msms_event ev{};
    ev.struct_size = sizeof ev;
    ev.id = 1;
    sl.event(ev);
    sl.finish();
    CHECK(order == std::vector<int>{0, 1, 2});
    CHECK(waiting == std::set<size_t>{1, 2});
}
