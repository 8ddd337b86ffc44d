// A spin lock for the hook libraries that collectors load into the target
// (msmemscope_add_agent_library): it never allocates, never sleeps in the
// C library and needs no initialisation, so it can guard tables touched from
// inside malloc or driver hooks. Hold it for a few instructions only.
#pragma once

#include <atomic>

namespace msmemscope {

class SpinLock {
public:
    void lock() {
        while (flag_.test_and_set(std::memory_order_acquire)) {
        }
    }
    void unlock() { flag_.clear(std::memory_order_release); }

private:
    std::atomic_flag flag_ = ATOMIC_FLAG_INIT;
};

}  // namespace msmemscope
