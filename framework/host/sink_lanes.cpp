#include "sink_lanes.h"

#include <signal.h>

#include <algorithm>
#include <cstring>

#include "supervisor.h"

namespace msms {

std::unique_ptr<char[]> BlockPool::get() {
    {
        std::lock_guard<std::mutex> lk(mu_);
        if (!spare_.empty()) {
            auto b = std::move(spare_.back());
            spare_.pop_back();
            return b;
        }
    }
    return std::unique_ptr<char[]>(new char[kBlock]);
}

void BlockPool::put(std::vector<std::unique_ptr<char[]>>& blocks) {
    std::lock_guard<std::mutex> lk(mu_);
    for (auto& b : blocks) spare_.push_back(std::move(b));
    blocks.clear();
}

char* SinkBatch::take(size_t n, size_t align) {
    size_t pad = at_ ? (align - reinterpret_cast<uintptr_t>(at_) % align) % align : 0;
    if (n + align > BlockPool::kBlock) {  // a text of its own
        large_.emplace_back(new char[n + align]);
        char* p = large_.back().get();
        p += (align - reinterpret_cast<uintptr_t>(p) % align) % align;
        bytes_ += n;
        return p;
    }
    if (!at_ || pad + n > left_) {
        blocks_.push_back(pool_.get());
        at_ = blocks_.back().get();
        left_ = BlockPool::kBlock;
        pad = (align - reinterpret_cast<uintptr_t>(at_) % align) % align;
    }
    char* p = at_ + pad;
    at_ = p + n;
    left_ -= pad + n;
    bytes_ += n;
    return p;
}

msms_str SinkBatch::copy(msms_str s) {
    if (!s.size) return {s.data ? "" : nullptr, 0};
    char* p = take(s.size, 1);
    std::memcpy(p, s.data, s.size);
    return {p, s.size};
}

void SinkBatch::copy_texts(msms_event& ev, bool keep_py, bool keep_c) {
    // one piece for all of them (per event: this is the pipeline's thread)
    size_t need = sizeof(msms_kv) * ev.attr_count + ev.name.size + (keep_py ? 0 : ev.py_stack.size) +
                  (keep_c ? 0 : ev.c_stack.size);
    for (uint32_t i = 0; i < ev.attr_count; ++i) need += ev.attrs[i].key.size + ev.attrs[i].value.size;
    char* p = take(need, alignof(msms_kv));
    auto put = [&p](msms_str& s) {
        if (!s.size) return;
        std::memcpy(p, s.data, s.size);
        s.data = p;
        p += s.size;
    };
    if (ev.attr_count) {
        auto* kv = reinterpret_cast<msms_kv*>(p);
        p += sizeof(msms_kv) * ev.attr_count;
        for (uint32_t i = 0; i < ev.attr_count; ++i) {
            kv[i] = ev.attrs[i];
            put(kv[i].key);
            put(kv[i].value);
        }
        ev.attrs = kv;
    } else {
        ev.attrs = nullptr;
    }
    put(ev.name);
    if (!keep_py) put(ev.py_stack);
    if (!keep_c) put(ev.c_stack);
}

const msms_kv* SinkBatch::copy(const msms_kv* kv, uint32_t n) {
    if (!n) return nullptr;
    auto* out = reinterpret_cast<msms_kv*>(take(sizeof(msms_kv) * n, alignof(msms_kv)));
    for (uint32_t i = 0; i < n; ++i) out[i] = msms_kv{copy(kv[i].key), copy(kv[i].value)};
    return out;
}

SinkLanes::SinkLanes(std::vector<Lane> lanes, unsigned first_lane) {
    for (auto& l : lanes) {
        lanes_.push_back(std::make_unique<State>());
        lanes_.back()->lane = std::move(l);
        lanes_.back()->index = lanes_.size() - 1;
    }
    // The lanes take no signal meant for the process (the host's SIGTERM,
    // a child's SIGCHLD): those stay with the threads that wait for them.
    // Faults stay where they happen, for the supervisor's report.
    sigset_t all, old;
    sigfillset(&all);
    for (int sig : {SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGABRT}) sigdelset(&all, sig);
    pthread_sigmask(SIG_BLOCK, &all, &old);
    for (size_t i = 0; i < lanes_.size(); ++i) {
        State* s = lanes_[i].get();
        unsigned lane = first_lane + static_cast<unsigned>(i);
        s->thread = std::thread([this, s, lane] { run(*s, lane); });
    }
    pthread_sigmask(SIG_SETMASK, &old, nullptr);
}

SinkLanes::~SinkLanes() {
    {
        std::lock_guard<std::mutex> lk(mu_);
        for (auto& s : lanes_) s->stopping = true;
    }
    work_.notify_all();
    room_.notify_all();
    for (auto& s : lanes_)
        if (s->thread.joinable()) s->thread.join();
}

SinkBatch& SinkLanes::batch() {
    if (!filling_) {
        filling_ = std::make_unique<SinkBatch>(pool_);
        filling_->items.reserve(kBatchItems);
    }
    return *filling_;
}

void SinkLanes::event(const msms_event& ev, bool keep_py, bool keep_c) {
    SinkBatch& b = batch();
    b.items.emplace_back();
    SinkItem& it = b.items.back();
    it.kind = SinkItem::Event;
    it.ev = ev;
    b.copy_texts(it.ev, keep_py, keep_c);
    if (b.items.size() >= kBatchItems || b.bytes() >= kBatchBytes) publish();
}

void SinkLanes::annotation(uint64_t id, msms_str key, msms_str value) {
    SinkBatch& b = batch();
    b.items.emplace_back();
    SinkItem& it = b.items.back();
    it.kind = SinkItem::Annotation;
    it.id = id;
    it.key = b.copy(key);
    it.value = b.copy(value);
    if (b.items.size() >= kBatchItems || b.bytes() >= kBatchBytes) publish();
}

void SinkLanes::finding(msms_str table, const msms_kv* cols, uint32_t n) {
    SinkBatch& b = batch();
    b.items.emplace_back();
    SinkItem& it = b.items.back();
    it.kind = SinkItem::Finding;
    it.key = b.copy(table);
    it.cols = b.copy(cols, n);
    it.n = n;
    if (b.items.size() >= kBatchItems || b.bytes() >= kBatchBytes) publish();
}

void SinkLanes::publish() {
    if (!filling_ || filling_->items.empty()) return;
    std::shared_ptr<const SinkBatch> b(filling_.release());
    std::unique_lock<std::mutex> lk(mu_);
    room_.wait(lk, [&] {
        for (auto& s : lanes_)
            if (!s->done && !s->stopping && s->queue.size() >= kMaxQueued) return false;
        return true;
    });
    for (auto& s : lanes_)
        if (!s->done) s->queue.push_back(b);
    lk.unlock();
    work_.notify_all();
}

void SinkLanes::finish() {
    publish();
    {
        std::lock_guard<std::mutex> lk(mu_);
        for (auto& s : lanes_) s->finishing = true;
    }
    work_.notify_all();
    for (auto& s : lanes_)
        if (s->thread.joinable()) s->thread.join();
}

void SinkLanes::watch_finish_turns(std::function<void(size_t lane)> waits) {
    std::lock_guard<std::mutex> lk(mu_);
    finish_turn_waits_ = std::move(waits);
}

void SinkLanes::run(State& s, unsigned supervisor_lane) {
    supervisor::enter_lane(supervisor_lane);
    // (under mu_) Whether every lane before this one has ended.
    auto earlier_lanes_done = [&] {
        for (auto& other : lanes_) {
            if (other.get() == &s) return true;
            if (!other->done) return false;
        }
        return true;
    };
    for (;;) {
        std::shared_ptr<const SinkBatch> b;
        {
            std::unique_lock<std::mutex> lk(mu_);
            work_.wait(lk, [&] { return s.stopping || s.finishing || !s.queue.empty(); });
            if (s.stopping) break;
            if (s.queue.empty()) {  // finishing, all handled
                // The lanes finish one after another, in their order (the
                // sinks' --sinks order), as on the pipeline's thread: a sink
                // failing in its finish() is then told to every sink after
                // it (Pipeline::tell_sink_of_later_failures) before that one
                // finishes. Side by side, the html page or the db finishing
                // at the same time did not name it. The items were handled
                // side by side; only the finishes wait.
                room_.wait(lk, [&] {
                    if (s.stopping || earlier_lanes_done()) return true;
                    if (finish_turn_waits_) finish_turn_waits_(s.index);
                    return false;
                });
                if (s.stopping) break;
                lk.unlock();
                if (s.lane.finish) s.lane.finish();
                break;
            }
            b = std::move(s.queue.front());
            s.queue.pop_front();
        }
        room_.notify_all();
        for (const SinkItem& it : b->items) s.lane.handle(it);
    }
    std::lock_guard<std::mutex> lk(mu_);
    s.done = true;
    s.queue.clear();
    room_.notify_all();
}

}  // namespace msms
