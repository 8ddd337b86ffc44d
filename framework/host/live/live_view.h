// The CLI's side of --live and --live-http (issue #31 items 3-4). The host's
// worker writes live.json and live.txt into each process folder every second
// (live_state.h); this reads them, in the CLI's main process, which owns the
// terminal:
//   - --live: one screen a second, redrawn in place (ANSI clear and home)
//     when standard output is a terminal, else each changed screen appended
//     as plain lines; the last screen stays when the run ends;
//   - --live-http: an HTTP server (Boost.Beast) on ADDRESS:PORT that answers
//     exactly two paths, "/" (a self-contained page that asks for
//     /live.json every second) and "/live.json" (what the folders' live.json
//     say now); every other path is 404. It never serves a file by path.
// It only reads: the profiled program and the worker never wait for it. A
// folder is this run's when its live.json carries the session token the CLI
// gave the workers (Config::live_session), so older runs in the same output
// root are never shown.
#pragma once

#include <atomic>
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <ostream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "config.h"

namespace msms {
namespace live {

class LiveView {
public:
    LiveView(const Config& cfg, bool terminal);
    ~LiveView();
    LiveView(const LiveView&) = delete;
    LiveView& operator=(const LiveView&) = delete;

    // Binds the server (when asked) and starts reading; "" or one line
    // saying why not (the address is taken, ...). Says the URL on `say`.
    std::string start(std::ostream& say);
    // The run has ended: reads the final snapshots, draws the last screen,
    // stops the server.
    void stop();

    // What /live.json answers: {"session", "running", "processes": [...]}.
    std::string combined_json() const;
    // The port the server listens on (after start).
    unsigned port() const { return port_; }

    static std::string new_session_token();
    static const std::string& page();

private:
    void loop();
    void collect();
    void draw(bool last);

    const Config& cfg_;
    bool terminal_;
    std::string session_;
    uint64_t start_s_ = 0;
    unsigned port_ = 0;
    mutable std::mutex mu_;
    std::condition_variable cv_;
    bool stopping_ = false;
    bool running_ = true;
    // Each process folder by its inode (the same folder after a rename: a
    // rank learned late, process_run.h), shown in the order of its name.
    struct Proc {
        std::string folder, json, text;  // its name, live.json, live.txt
    };
    std::map<std::pair<uint64_t, uint64_t>, Proc> procs_;
    std::vector<const Proc*> by_name() const;  // under mu_
    std::string last_drawn_;
    bool drew_waiting_ = false;
    std::thread reader_;
    struct Server;
    std::unique_ptr<Server> server_;
};

// One HTTP answer of the server, without the socket (tests): status and
// content type for a request target; body filled.
int http_answer(const std::string& method, const std::string& target, const std::string& json, std::string& type,
                std::string& body);

}  // namespace live
}  // namespace msms
