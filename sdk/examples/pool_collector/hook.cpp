// Target side of the my_pool collector: loaded into the profiled program
// (the host adds it to LD_PRELOAD after the agent), it interposes the pool's
// functions and reports each block through the agent's emit API (agent.h).
//
// The rules of a hook (sdk/README.md): call the real function, then record;
// record a free *before* the real call; take the agent's guard
// (msms_agent_enter/leave) around recording; never allocate through a hooked
// allocator, lock, log or throw on this path.
#include <dlfcn.h>

#include <cstdio>

#include <msmemscope/agent.h>
#include <msmemscope/hook_next.hpp>

#include "mypool.h"

namespace {

using alloc_fn = void* (*)(size_t, const char*);
using free_fn = void (*)(void*);

}  // namespace

// The functions this library exports are the ones it interposes: preloaded
// under the CLI, or patched into the callers' GOT slots by the Python API
// (msmemscope.start() without the CLI). next_definition finds the pool's own
// function either way (dlsym(RTLD_NEXT) alone finds nothing in the second).
extern "C" __attribute__((visibility("default"))) void* mypool_alloc(size_t n, const char* tag) {
    static alloc_fn next = msmemscope::next_definition<alloc_fn>("mypool_alloc", &mypool_alloc);
    if (!next) return nullptr;
    void* p = next(n, tag);
    if (p && msms_agent_enter()) {
        // Extra Attr entries: "key:value,..." — the owner feeds decompose-like
        // analyzers (e.g. my_peak) and the CSV's owner column.
        char attrs[128];
        std::snprintf(attrs, sizeof(attrs), "owner:mypool@%s", tag && *tag ? tag : "untagged");
        msms_agent_alloc(MSMS_T_PTA, MSMS_DEV_CPU, -1, reinterpret_cast<uint64_t>(p), n, 0, attrs);
        msms_agent_leave();
    }
    return p;
}

extern "C" __attribute__((visibility("default"))) void mypool_free(void* p) {
    static free_fn next = msmemscope::next_definition<free_fn>("mypool_free", &mypool_free);
    if (p && msms_agent_enter()) {
        msms_agent_free(MSMS_T_PTA, MSMS_DEV_CPU, -1, reinterpret_cast<uint64_t>(p));
        msms_agent_leave();
    }
    if (next) next(p);
}
