#include "job_thread.h"

#include <utility>

namespace msms {

void JobThread::submit(std::function<void()> fn) {
    wait();
    if (!thread_.joinable()) thread_ = std::thread([this] { run(); });
    {
        std::lock_guard<std::mutex> lk(mu_);
        job_ = std::move(fn);
        busy_ = true;
    }
    more_.notify_one();
}

void JobThread::wait() {
    if (!thread_.joinable()) return;
    std::unique_lock<std::mutex> lk(mu_);
    idle_.wait(lk, [this] { return !busy_; });
    if (error_) {
        std::exception_ptr e = std::exchange(error_, nullptr);
        std::rethrow_exception(e);
    }
}

void JobThread::stop() {
    if (!thread_.joinable()) return;
    {
        std::lock_guard<std::mutex> lk(mu_);
        stop_ = true;
    }
    more_.notify_one();
    thread_.join();
    error_ = nullptr;
}

void JobThread::run() {
    std::unique_lock<std::mutex> lk(mu_);
    for (;;) {
        more_.wait(lk, [this] { return busy_ || stop_; });
        if (!busy_) return;  // stopped with nothing left
        std::function<void()> job = std::move(job_);
        lk.unlock();
        std::exception_ptr e;
        try {
            job();
        } catch (...) {
            e = std::current_exception();
        }
        lk.lock();
        if (e && !error_) error_ = e;
        busy_ = false;
        idle_.notify_all();
    }
}

}  // namespace msms
