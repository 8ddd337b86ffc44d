// The profiler's own memory made outside the agent's hooks (the extensions'
// init, the caches and tables they keep): the hooks are off while it is made,
// so that no row names the program's line then running. Header-only: both
// extensions (_msmemscope, _torch_observer) use it.
#pragma once

#include <dlfcn.h>

#include <atomic>

namespace msms_py {

class HooksOff {
public:
    HooksOff() {
        const Pair p = agent_pair();
        if (p.enter && p.enter()) leave_ = p.leave;
    }
    ~HooksOff() {
        if (leave_) leave_();
    }
    HooksOff(const HooksOff&) = delete;
    HooksOff& operator=(const HooksOff&) = delete;

private:
    using enter_fn = int (*)();
    using leave_fn = void (*)();
    struct Pair {
        enter_fn enter;
        leave_fn leave;
    };
    // The agent's pair, found in the process (it may be preloaded and
    // collecting before load_agent() runs); looked up again while it is
    // not there yet, as the package may load it after its import.
    static Pair agent_pair() {
        static std::atomic<enter_fn> enter{nullptr};
        static std::atomic<leave_fn> leave{nullptr};
        enter_fn e = enter.load(std::memory_order_acquire);
        if (!e) {
            auto l = reinterpret_cast<leave_fn>(dlsym(RTLD_DEFAULT, "msms_agent_leave"));
            e = reinterpret_cast<enter_fn>(dlsym(RTLD_DEFAULT, "msms_agent_enter"));
            if (!e || !l) return {nullptr, nullptr};
            leave.store(l, std::memory_order_relaxed);
            enter.store(e, std::memory_order_release);
        }
        return {e, leave.load(std::memory_order_relaxed)};
    }
    leave_fn leave_ = nullptr;
};

}  // namespace msms_py
