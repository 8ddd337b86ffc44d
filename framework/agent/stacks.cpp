#include "stacks.h"

#include <unwind.h>

#include <cstring>

namespace msms::agent {
namespace {

constexpr uint32_t kMaxFrames = 1000;

struct UnwindState {
    uint64_t* frames;
    uint32_t n;
    uint32_t max;
    uint32_t skip;
};

_Unwind_Reason_Code on_frame(struct _Unwind_Context* ctx, void* arg) {
    auto* s = static_cast<UnwindState*>(arg);
    uintptr_t ip = _Unwind_GetIP(ctx);
    if (ip == 0) return _URC_END_OF_STACK;
    if (s->skip) {
        --s->skip;
        return _URC_NO_REASON;
    }
    if (s->n >= s->max) return _URC_END_OF_STACK;
    s->frames[s->n++] = ip;
    return _URC_NO_REASON;
}

// Writes a kStack record (kind 0 = C addresses, 1 = Python string ids) unless
// this thread already wrote the same stack; returns the id.
uint64_t intern_stack(ThreadWriter*& w, uint8_t kind, const uint64_t* frames, uint32_t n) {
    if (n == 0) return 0;
    uint64_t hash = 1469598103934665603ull ^ kind;
    for (uint32_t i = 0; i < n; ++i) hash = (hash ^ frames[i]) * 1099511628211ull;
    hash |= 1;
    uint32_t slot = static_cast<uint32_t>(hash >> 40) % ThreadWriter::kCacheSize;
    // Stacks share the string cache (ids come from the same counter).
    if (w->string_hash[slot] == hash) return w->string_id[slot];
    size_t need = 1 + 10 * 3 + 10 * static_cast<size_t>(n);
    ThreadWriter* ww = writer_for(need);
    if (!ww) return 0;
    w = ww;
    uint64_t id = next_string_id();
    uint8_t* p = w->cur;
    *p++ = capture::kStack;
    p = capture::put_varint(p, id);
    p = capture::put_varint(p, kind);
    p = capture::put_varint(p, n);
    for (uint32_t i = 0; i < n; ++i) p = capture::put_varint(p, frames[i]);
    commit(w, p);
    w->string_hash[slot] = hash;
    w->string_id[slot] = id;
    return id;
}

}  // namespace

uint64_t capture_c_stack(ThreadWriter*& w, uint32_t depth) {
    uint64_t frames[kMaxFrames];
    if (depth > kMaxFrames) depth = kMaxFrames;
    // Skip this function, stacks_for and the msms_agent_* entry.
    UnwindState s{frames, 0, depth, 3};
    _Unwind_Backtrace(on_frame, &s);
    return intern_stack(w, 0, frames, s.n);
}

uint64_t capture_py_stack(ThreadWriter*& w, msms_stack_provider provider, uint32_t depth) {
    uint64_t frames[kMaxFrames];
    if (depth > kMaxFrames) depth = kMaxFrames;
    uint32_t n = provider(frames, depth);
    return intern_stack(w, 1, frames, n);
}

}  // namespace msms::agent
