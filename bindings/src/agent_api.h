// The agent's C entries as this extension sees them: found in the process
// (preloaded by the CLI or LD_PRELOAD) or dlopen'ed from the install tree,
// resolved once by load_agent(). Shared by the extension's parts.
#pragma once

#include <stdint.h>

#include <string>

namespace msms_py {

struct GotHook {
    const char* name;
    void* replacement;
    void** previous;
};

struct AgentApi {
    int (*enter)();
    void (*leave)();
    int (*collecting)();
    int (*wants)(const char*);
    size_t (*option)(const char*, char*, size_t);
    uint64_t (*now)();
    void (*alloc)(uint16_t, uint16_t, int16_t, uint64_t, uint64_t, uint64_t, const char*);
    void (*free)(uint16_t, uint16_t, int16_t, uint64_t);
    void (*event)(uint16_t, uint16_t, uint16_t, int16_t, uint64_t, uint64_t, uint64_t, uint64_t, const char*,
                  const char*);
    void (*start)();
    void (*stop)();
    uint64_t (*step)();
    void (*set_py_provider)(uint32_t (*)(uint64_t*, uint32_t));
    uint64_t (*intern)(const char*);
    int (*attach)(const char*, const char*);
    void (*detach)();
    int (*attached)();
    int (*got_install)(const char*, const GotHook*, uint32_t, const char*);
    void (*got_refresh)();
    int (*got_install_library)(const char*, const char*, char*, size_t, char*, size_t);
    // Optional (newer agents): compact Python-call record, cached name ids.
    void (*py_call)(uint64_t, const char*, uint64_t*);
    void (*event_cached)(uint16_t, uint16_t, uint16_t, int16_t, uint64_t, uint64_t, uint64_t, uint64_t, const char*,
                         uint64_t*, const char*);
    const unsigned char* (*collecting_flag)();
    uint32_t (*stream_generation)();  // optional: ids change with it
    int (*mstx_steps_seen)();         // optional: an mstx "step start" range began
    uint64_t (*step_with)(const char* attrs, int again);  // optional: a STEP row with an Attr
    void (*import_enter)();           // optional: host-heap import scopes
    void (*import_leave)();
    void (*import_finalizing)();
    void (*set_py_provider_named)(uint32_t (*)(uint64_t*, uint32_t, uint64_t*));  // optional
    void (*set_py_oom_provider)(uint32_t (*)(uint64_t*, uint32_t));               // optional
    void (*detach_ended)(uint32_t, int32_t);  // optional: detach with how the process ends
    void (*end_detached)();                   // optional: the session ends, the process goes on (finish())
    int (*stop_at_exit)();                    // optional: collection off at exit, the stream left to exit()
    void (*start_with)(const char*, const char*);  // optional: new options, START_TRACE's attrs
};

extern AgentApi g_agent;
extern bool g_agent_loaded;
// The agent's collecting byte (msms_agent_collecting_flag): read on every
// Python call without a call into the agent; nullptr with an older agent.
extern const unsigned char* g_collecting_flag;

inline bool agent_collecting() {
    return g_collecting_flag ? __atomic_load_n(g_collecting_flag, __ATOMIC_RELAXED) != 0 : g_agent.collecting() != 0;
}

// Finds the agent already in the process or loads `path`; returns
// "preloaded" or the path. Throws std::runtime_error with the reason.
std::string load_agent(const std::string& path);
// Throws unless load_agent() succeeded.
void need_agent();

}  // namespace msms_py
