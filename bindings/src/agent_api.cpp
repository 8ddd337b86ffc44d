#include "agent_api.h"

#include <dlfcn.h>

#include <stdexcept>

#include "hooks_off.h"
#include "util/file_trust.h"

namespace msms_py {

AgentApi g_agent{};
bool g_agent_loaded = false;
const unsigned char* g_collecting_flag = nullptr;

namespace {

std::string g_agent_origin;  // "preloaded" or the path we loaded

template <class F>
bool resolve(void* handle, const char* name, F& out) {
    out = reinterpret_cast<F>(dlsym(handle, name));
    return out != nullptr;
}

}  // namespace

// Finds the agent already in the process (LD_PRELOAD, the CLI) or loads it.
std::string load_agent(const std::string& path) {
    if (g_agent_loaded) return g_agent_origin;
    void* handle = RTLD_DEFAULT;
    std::string origin = "preloaded";
    if (!dlsym(RTLD_DEFAULT, "msms_agent_attach")) {
        // As root, only an agent that passes the host's trust check (#29):
        // the path comes from the package's prefix or MSMEMSCOPE_HOME.
        if (std::string why = msms::untrusted_reason(path); !why.empty())
            throw std::runtime_error("the msmemscope agent " + path + " is refused: " + why);
        handle = dlopen(path.c_str(), RTLD_NOW | RTLD_GLOBAL);
        if (!handle) throw std::runtime_error(std::string("cannot load the msmemscope agent: ") + dlerror());
        origin = path;
    }
    AgentApi a{};
    bool ok = resolve(handle, "msms_agent_enter", a.enter) && resolve(handle, "msms_agent_leave", a.leave) &&
              resolve(handle, "msms_agent_collecting", a.collecting) && resolve(handle, "msms_agent_wants", a.wants) &&
              resolve(handle, "msms_agent_option", a.option) && resolve(handle, "msms_agent_now", a.now) &&
              resolve(handle, "msms_agent_alloc", a.alloc) && resolve(handle, "msms_agent_free", a.free) &&
              resolve(handle, "msms_agent_event", a.event) && resolve(handle, "msms_agent_start", a.start) &&
              resolve(handle, "msms_agent_stop", a.stop) && resolve(handle, "msms_agent_step", a.step) &&
              resolve(handle, "msms_agent_set_python_stack_provider", a.set_py_provider) &&
              resolve(handle, "msms_agent_intern", a.intern) && resolve(handle, "msms_agent_attach", a.attach) &&
              resolve(handle, "msms_agent_detach", a.detach) && resolve(handle, "msms_agent_attached", a.attached);
    if (!ok) throw std::runtime_error("the msmemscope agent (" + origin + ") lacks an entry: " + dlerror());
    resolve(handle, "msms_agent_got_install", a.got_install);
    resolve(handle, "msms_agent_got_refresh", a.got_refresh);
    resolve(handle, "msms_agent_got_install_library", a.got_install_library);
    resolve(handle, "msms_agent_py_call", a.py_call);
    resolve(handle, "msms_agent_event_cached", a.event_cached);
    resolve(handle, "msms_agent_collecting_flag", a.collecting_flag);
    resolve(handle, "msms_agent_stream_generation", a.stream_generation);
    resolve(handle, "msms_agent_mstx_steps_seen", a.mstx_steps_seen);
    resolve(handle, "msms_agent_step_with", a.step_with);
    resolve(handle, "msms_agent_import_enter", a.import_enter);
    resolve(handle, "msms_agent_import_leave", a.import_leave);
    resolve(handle, "msms_agent_import_finalizing", a.import_finalizing);
    resolve(handle, "msms_agent_set_python_stack_provider_named", a.set_py_provider_named);
    resolve(handle, "msms_agent_set_python_oom_stack_provider", a.set_py_oom_provider);
    resolve(handle, "msms_agent_detach_ended", a.detach_ended);
    resolve(handle, "msms_agent_end_detached", a.end_detached);
    resolve(handle, "msms_agent_stop_at_exit", a.stop_at_exit);
    resolve(handle, "msms_agent_start_with", a.start_with);
    if (a.collecting_flag) g_collecting_flag = a.collecting_flag();
    int (*hooks_off)() = nullptr;  // (an older agent has none: enter, which is off while collection is)
    resolve(handle, "msms_agent_hooks_off", hooks_off);
    HooksOff::known(hooks_off ? hooks_off : a.enter, a.leave);
    g_agent = a;
    g_agent_loaded = true;
    g_agent_origin = origin;
    return origin;
}

void need_agent() {
    if (!g_agent_loaded) throw std::runtime_error("msmemscope: the agent is not loaded");
}

}  // namespace msms_py
