#pragma once
// A lock for critical sections of a few instructions on a hot path (the
// Python bindings' table of CPU tensor storages: taken at every tensor
// allocation and free). Uncontended it is one exchange and one store,
// inline; glibc's pthread_mutex_lock and _unlock were ~0.4% of a PyTorch
// training loop's samples. A waiter spins with pause, then yields the CPU,
// so that a holder that was descheduled gets to run.
//
// fork(): a child made while another thread held the lock would find it
// held forever; reset() in a pthread_atfork child handler gives the child
// an unlocked one (the table it guards was the parent's at fork, as
// consistent as the holder had left it: hold it in the prepare handler to
// fork with no section in progress).
#include <sched.h>

#include <atomic>

namespace msms {

class SpinLock {
public:
    void lock() {
        for (unsigned spins = 0; held_.exchange(true, std::memory_order_acquire);) {
            while (held_.load(std::memory_order_relaxed)) {
                if (++spins < 256) {
                    __builtin_ia32_pause();
                } else {
                    sched_yield();
                }
            }
        }
    }
    void unlock() { held_.store(false, std::memory_order_release); }
    void reset() { held_.store(false, std::memory_order_relaxed); }

private:
    std::atomic<bool> held_{false};
};

}  // namespace msms
