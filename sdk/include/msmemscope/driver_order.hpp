// The order lock of a device collector's driver hooks (cuda, hal): each
// hooked allocation and free holds it across [driver call + its row].
// A free's row is written after the driver's answer, so that a call the
// driver refuses writes none. But once the driver has taken an address (or a
// handle) back, it may hand it to the next allocation, on any thread; were
// that allocation's MALLOC row written before our FREE row, the host, which
// orders rows by time, would pair them wrongly. These are driver calls of
// microseconds to milliseconds, never the host heap's hot path (DESIGN §4's
// "record before the real call" holds there). Recursive: a driver may reach
// a hooked entry point from inside another. Taken only while memory is
// profiled. One lock per hook library (each has its own copy).
#pragma once

#include <pthread.h>

namespace msmemscope {

class DriverOrder {
public:
    explicit DriverOrder(bool profiling) : held_(profiling) {
        if (held_) pthread_mutex_lock(&lock());
    }
    ~DriverOrder() {
        if (held_) pthread_mutex_unlock(&lock());
    }
    DriverOrder(const DriverOrder&) = delete;
    DriverOrder& operator=(const DriverOrder&) = delete;

    // A child forked while another thread held the lock would wait for it
    // forever (that thread does not live on in the child): it starts free
    // there. Call once, from the hook library's constructor.
    static void free_in_forked_children() {
        pthread_atfork(nullptr, nullptr, [] {
            pthread_mutex_t fresh = PTHREAD_RECURSIVE_MUTEX_INITIALIZER_NP;
            lock() = fresh;
        });
    }

private:
    static pthread_mutex_t& lock() {
        static pthread_mutex_t m = PTHREAD_RECURSIVE_MUTEX_INITIALIZER_NP;
        return m;
    }
    const bool held_;
};

}  // namespace msmemscope
