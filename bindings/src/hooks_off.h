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

    using enter_fn = int (*)();
    using leave_fn = void (*)();
    // The agent's pair as load_agent() resolved it, before collection is on:
    // no lookup later. (The first dlsym(RTLD_DEFAULT) of a symbol in an
    // object dlopen'ed after this one allocates the loader's dependency
    // record, 88 bytes that, made in start(), were the program's leak.)
    static void known(enter_fn e, leave_fn l) {
        if (!e || !l) return;
        slots().leave.store(l, std::memory_order_relaxed);
        slots().enter.store(e, std::memory_order_release);
    }

private:
    struct Pair {
        enter_fn enter;
        leave_fn leave;
    };
    struct Slots {
        std::atomic<enter_fn> enter{nullptr};
        std::atomic<leave_fn> leave{nullptr};
    };
    static Slots& slots() {
        static Slots s;
        return s;
    }
    // The agent's pair, found in the process (it may be preloaded and
    // collecting before load_agent() runs); looked up again while it is
    // not there yet, as the package may load it after its import.
    static Pair agent_pair() {
        Slots& s = slots();
        enter_fn e = s.enter.load(std::memory_order_acquire);
        if (!e) {
            auto l = reinterpret_cast<leave_fn>(dlsym(RTLD_DEFAULT, "msms_agent_leave"));
            // off whether or not collection is on; an older agent: enter
            e = reinterpret_cast<enter_fn>(dlsym(RTLD_DEFAULT, "msms_agent_hooks_off"));
            if (!e) e = reinterpret_cast<enter_fn>(dlsym(RTLD_DEFAULT, "msms_agent_enter"));
            if (!e || !l) return {nullptr, nullptr};
            known(e, l);
        }
        return {e, s.leave.load(std::memory_order_relaxed)};
    }
    leave_fn leave_ = nullptr;
};

}  // namespace msms_py
