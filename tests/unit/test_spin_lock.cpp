// SpinLock (framework/util/spin_lock.h): mutual exclusion under contention
// (a non-atomic read-modify-write of two words that must stay equal), a
// waiter that outlasts its spins (the holder sleeps: the waiter yields and
// still gets in), and reset() for a fork child.
#include <doctest/doctest.h>

#include <atomic>
#include <cstdint>
#include <mutex>
#include <thread>
#include <vector>

#include "util/spin_lock.h"

using msms::SpinLock;

TEST_CASE("SpinLock: eight threads, each section seen whole") {
    SpinLock lock;
    // Two plain words changed in two steps: a section that ran beside
    // another would leave them apart (or lose increments).
    volatile uint64_t a = 0, b = 0;
    constexpr int kThreads = 8, kEach = 50000;
    std::atomic<int> torn{0};
    std::vector<std::thread> ts;
    for (int t = 0; t < kThreads; ++t)
        ts.emplace_back([&] {
            for (int i = 0; i < kEach; ++i) {
                std::lock_guard<SpinLock> g(lock);
                if (a != b) torn.fetch_add(1);
                a = a + 1;
                b = b + 1;
            }
        });
    for (auto& t : ts) t.join();
    CHECK(torn.load() == 0);
    CHECK(a == uint64_t(kThreads) * kEach);
    CHECK(b == a);
}

TEST_CASE("SpinLock: a waiter past its spins gets the lock once the holder lets go") {
    SpinLock lock;
    lock.lock();
    std::atomic<bool> waiting{false}, got{false};
    std::thread waiter([&] {
        waiting = true;
        lock.lock();  // spins, then yields while the holder sleeps
        got = true;
        lock.unlock();
    });
    while (!waiting) std::this_thread::yield();
    // the holder keeps it for ~1M pauses (milliseconds): the waiter is past its 256 spins
    for (int i = 0; i < 1000000; ++i) __builtin_ia32_pause();
    CHECK_FALSE(got.load());
    lock.unlock();
    waiter.join();
    CHECK(got.load());
}

TEST_CASE("SpinLock: reset() frees a lock left held (a fork child's copy)") {
    SpinLock lock;
    lock.lock();
    lock.reset();
    lock.lock();  // would spin forever without the reset
    lock.unlock();
    CHECK(true);
}
