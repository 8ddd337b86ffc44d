// One background job at a time, in the order given: a sink's writer thread
// (the db sink's SQLite inserts, the csv sink's direct writes) working while
// the sink builds what comes next. The thread starts with the first job.
#pragma once

#include <condition_variable>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>

namespace msms {

class JobThread {
public:
    JobThread() = default;
    JobThread(const JobThread&) = delete;
    JobThread& operator=(const JobThread&) = delete;
    ~JobThread() { stop(); }

    // Waits for the job before (its exception is thrown here, and fn is not
    // started), then starts fn on the thread.
    void submit(std::function<void()> fn);
    // Waits until no job runs; throws the exception of a job that failed.
    void wait();
    // Waits for the job in flight (its exception dropped) and ends the thread.
    void stop();

private:
    void run();
    std::thread thread_;
    std::mutex mu_;
    std::condition_variable more_, idle_;
    std::function<void()> job_;
    bool busy_ = false, stop_ = false;
    std::exception_ptr error_;
};

}  // namespace msms
