// The live view's state, snapshot files, option and HTTP answers (issue #31).
#include <doctest/doctest.h>

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "config.h"
#include "live/live_state.h"
#include "live/live_view.h"
#include "util/text.h"

using namespace msms;
using namespace msms::live;

namespace {

struct Ev {
    msms_event ev{};
    std::string name, py, c;
    std::vector<msms_kv> attrs;
    Ev(uint16_t kind, uint16_t type) {
        ev.struct_size = sizeof(msms_event);
        ev.kind = kind;
        ev.type = type;
        ev.pid = 7;
        ev.tid = 7;
        ev.device_kind = MSMS_DEV_CPU;
        ev.device_id = -1;
    }
    const msms_event& get() {
        ev.name = {name.data(), static_cast<uint32_t>(name.size())};
        ev.py_stack = {py.data(), static_cast<uint32_t>(py.size())};
        ev.c_stack = {c.data(), static_cast<uint32_t>(c.size())};
        ev.attrs = attrs.data();
        ev.attr_count = static_cast<uint32_t>(attrs.size());
        return ev;
    }
};

Ev malloc_ev(uint64_t aid, uint64_t size, std::string c, std::string py = "") {
    Ev e(MSMS_EV_MALLOC, MSMS_T_HOST);
    e.ev.allocation_id = aid;
    e.ev.size = size;
    e.ev.ptr = 0x1000 * aid;
    e.c = std::move(c);
    e.py = std::move(py);
    return e;
}

Ev free_ev(uint64_t aid) {
    Ev e(MSMS_EV_FREE, MSMS_T_HOST);
    e.ev.allocation_id = aid;
    e.ev.ptr = 0x1000 * aid;
    return e;
}

// Views of string literals (static storage).
msms_kv kv(const char* k, const char* v) {
    return msms_kv{{k, static_cast<uint32_t>(strlen(k))}, {v, static_cast<uint32_t>(strlen(v))}};
}

std::string slurp(const std::string& path) {
    std::ifstream f(path);
    std::stringstream s;
    s << f.rdbuf();
    return s.str();
}

}  // namespace

TEST_CASE("live sites: live bytes and blocks per site, the allocator's frames skipped, operator and Python line") {
    Totals totals;
    LiveState st("tok", 7, "prog", [&] { return totals; });
    const std::string c_a = "malloc+0x10 (libc.so.6)\nmake_a+0x4 at a.c:3 in prog\nmain+0x9 at a.c:9 in prog";
    const std::string c_b = "operator new(unsigned long)+0x5 (libstdc++.so.6)\nmake_b+0x1 at b.cpp:4 in prog";
    for (uint64_t i = 1; i <= 3; ++i) st.on_event(malloc_ev(i, 100, c_a).get());
    Ev op(MSMS_EV_OP_LAUNCH, MSMS_T_ATEN_START);
    op.name = "aten::empty";
    st.on_event(op.get());
    st.on_event(malloc_ev(4, 1000, c_b, "train.py(12): step\ntrain.py(40): <module>").get());
    Ev op_end(MSMS_EV_OP_LAUNCH, MSMS_T_ATEN_END);
    op_end.name = "aten::empty";
    st.on_event(op_end.get());
    st.on_event(malloc_ev(5, 50, "").get());
    st.on_event(free_ev(2).get());
    st.on_event(free_ev(99).get());  // a block never seen: nothing changes

    auto top = st.top_sites();
    REQUIRE(top.size() == 3);
    CHECK(top[0].site == "make_b+0x1 at b.cpp:4 in prog");
    CHECK(top[0].op == "aten::empty");
    CHECK(top[0].python == "train.py(12): step");
    CHECK(top[0].live_bytes == 1000);
    CHECK(top[0].live_blocks == 1);
    CHECK(top[1].site == "make_a+0x4 at a.c:3 in prog");
    CHECK(top[1].op.empty());
    CHECK(top[1].live_bytes == 200);
    CHECK(top[1].live_blocks == 2);
    CHECK(top[2].site == "(no stack) cpu/HOST");
    CHECK(top[2].live_bytes == 50);
    // every block of a site freed: the site leaves the list
    st.on_event(free_ev(4).get());
    CHECK(st.top_sites().size() == 2);
    CHECK(st.top_sites(1).size() == 1);
}

TEST_CASE("live sites: a frame without a name gives way to the Python line; without one it stays") {
    LiveState st("tok", 7, "prog", [] { return Totals{}; });
    const std::string stripped = "0x1b1e2 in /lib/x86_64-linux-gnu/libc10.so.1.13\n0x2f0 in /lib/libtorch_cpu.so";
    Ev pta = malloc_ev(1, 4096, stripped, "train.py(6): <module>\ntrain.py(40): main");
    pta.ev.type = MSMS_T_PTA;
    st.on_event(pta.get());
    st.on_event(malloc_ev(2, 100, stripped).get());  // no Python line: the address is all there is
    st.on_event(malloc_ev(3, 10, "PyType_GenericAlloc+0x233 in /usr/bin/python3.11", "train.py(7): <module>").get());
    auto top = st.top_sites();
    REQUIRE(top.size() == 3);
    CHECK(top[0].site == "train.py(6): <module>");
    CHECK(top[0].python == "train.py(6): <module>");
    CHECK(top[1].site == "0x1b1e2 in /lib/x86_64-linux-gnu/libc10.so.1.13");
    CHECK(top[2].site == "PyType_GenericAlloc+0x233 in /usr/bin/python3.11");  // a named frame stays
    CHECK(top[2].python == "train.py(7): <module>");
}

TEST_CASE("live sites: each byte once — a host block a framework block took leaves the host's site") {
    LiveState st("tok", 7, "prog", [] { return Totals{}; });
    st.on_event(malloc_ev(1, 4096, "alloc_cpu+0x1 at c10.cpp:1 in libc10.so").get());  // the tensor's malloc
    Ev pta = malloc_ev(2, 4096, "", "train.py(3): <module>");
    pta.ev.type = MSMS_T_PTA;
    pta.ev.ptr = 0x1000;  // the host block's address
    st.on_event(pta.get());
    auto top = st.top_sites();
    REQUIRE(top.size() == 1);
    CHECK(top[0].device == "cpu/PTA");
    CHECK(top[0].live_bytes == 4096);
    Ev pfree = free_ev(2);
    pfree.ev.type = MSMS_T_PTA;
    st.on_event(pfree.get());
    st.on_event(free_ev(1).get());  // the host block's free: nothing counted twice
    CHECK(st.top_sites().empty());
    st.on_event(malloc_ev(3, 10, "f at a.c:1").get());  // the same address again, a plain host block
    REQUIRE(st.top_sites().size() == 1);
    CHECK(st.top_sites()[0].live_bytes == 10);
}

TEST_CASE("live steps: the pools' live bytes at each step end and the growth against the one before") {
    Totals totals;
    LiveState st("tok", 7, "prog", [&] { return totals; });
    auto step = [&](uint64_t n) {
        Ev e(MSMS_EV_SYSTEM, MSMS_T_STEP);
        e.ev.aux0 = n;
        st.on_event(e.get());
    };
    totals["cpu/HOST"] = {1000, 1500};
    totals["0/HAL mapped"] = {9999, 9999};  // mappings of memory another block holds: not counted twice
    step(1);
    totals["cpu/HOST"] = {1600, 1700};
    totals["0/HAL"] = {400, 400};
    step(2);
    totals["cpu/HOST"] = {1000, 1700};
    step(3);
    REQUIRE(st.steps().size() == 3);
    CHECK(st.steps()[0].live == 1000);
    CHECK(st.steps()[0].growth == 0);
    CHECK(st.steps()[1].live == 2000);
    CHECK(st.steps()[1].growth == 1000);
    CHECK(st.steps()[2].live == 1400);
    CHECK(st.steps()[2].growth == -600);
    CHECK(st.current_step() == 4);
    for (uint64_t n = 4; n <= 20; ++n) step(n);
    CHECK(st.steps().size() == LiveState::kSteps);
    CHECK(st.steps().front().step == 11);
    CHECK(st.steps().back().step == 20);
}

TEST_CASE("live steps: mstx 'step start' ranges end a step at their Range_end") {
    Totals totals{{"cpu/HOST", {10, 10}}};
    LiveState st("tok", 7, "prog", [&] { return totals; });
    for (uint64_t id = 1; id <= 2; ++id) {
        Ev s(MSMS_EV_MSTX, MSMS_T_RANGE_START);
        s.name = "step start";
        s.ev.aux0 = id;
        st.on_event(s.get());
        Ev other(MSMS_EV_MSTX, MSMS_T_RANGE_END);
        other.ev.aux0 = 77;  // another range's end
        st.on_event(other.get());
        CHECK(st.steps().size() == id - 1);
        totals["cpu/HOST"].used += 5;
        Ev e(MSMS_EV_MSTX, MSMS_T_RANGE_END);
        e.ev.aux0 = id;
        st.on_event(e.get());
    }
    REQUIRE(st.steps().size() == 2);
    CHECK(st.steps()[0].step == 1);
    CHECK(st.steps()[1].step == 2);
    CHECK(st.steps()[1].growth == 5);
}

TEST_CASE("live leak suspects: the step analysis's warnings as it says them, the leak analysis's findings at the end") {
    LiveState st("tok", 7, "prog", [] { return Totals{}; });
    const std::string warn =
        "leaks: [device 0][step 3]: ptr: 0x10 has lasted for 2 steps. Please check if there is leaks in PTA.";
    st.on_log("leaks", 1, warn);
    st.on_log("leaks", 1, "leaks: memory fluctuation: [device 0]: PTA Min/Max ...");  // not a suspect
    st.on_log("other", 1, warn);                                                       // not the leak analysis
    st.on_log("leaks", 0, warn);                                                       // not a warning
    std::string snap = st.snapshot(0, false);
    CHECK(snap.find("\"step_warnings_total\": 1") != std::string::npos);
    CHECK(snap.find("has lasted for 2 steps") != std::string::npos);
    CHECK(snap.find("\"reported\": false") != std::string::npos);
    CHECK(st.screen(0, false).find("  " + warn + "\n") != std::string::npos);

    std::vector<msms_kv> row{kv("device", "cpu"), kv("pool", "HOST"), kv("kind", "exit"), kv("size", "4000"),
                             kv("count", "4"), kv("stack", "make_a at a.c:3\nmain")};
    st.on_finding("leaks", row.data(), static_cast<uint32_t>(row.size()));
    std::vector<msms_kv> other{kv("op", "x")};
    st.on_finding("inefficient", other.data(), 1);  // another table: not a leak
    std::string screen = st.screen(0, true);
    CHECK(screen.find("leak analysis at the end: 4 block(s), 4000 B in 1 finding(s)") != std::string::npos);
    CHECK(screen.find("make_a at a.c:3") != std::string::npos);
    CHECK(screen.find("[finished]") != std::string::npos);
    snap = st.snapshot(0, true);
    CHECK(snap.find("\"reported\": true") != std::string::npos);
    CHECK(snap.find("\"bytes\": 4000") != std::string::npos);
}

TEST_CASE("live snapshot: the pipeline's pool figures, exact bytes, control characters escaped") {
    Totals totals{{"cpu/HOST", {1536, 2048}}};
    LiveState st("tok", 42, "prog \x1b[2J", [&] { return totals; });
    std::string snap = st.snapshot(5, false);
    CHECK(snap.find("\"session\": \"tok\"") != std::string::npos);
    CHECK(snap.find("\"pid\": 42") != std::string::npos);
    CHECK(snap.find("\"pool\": \"cpu/HOST\",\n      \"live_bytes\": 1536,\n      \"peak_bytes\": 2048") != std::string::npos);
    std::string screen = st.screen(5, false);
    CHECK(screen.find("  cpu/HOST               live    1.5 KiB (1536 B)  peak    2.0 KiB (2048 B)\n") != std::string::npos);
    CHECK(screen.find('\x1b') == std::string::npos);
    CHECK(human_bytes(15728640) == "15.0 MiB");
    CHECK(human_bytes(72) == "72 B");
}

TEST_CASE("live files: written whole through a temporary and a rename, never through a link") {
    char tmpl[] = "/tmp/msms_live_XXXXXX";
    REQUIRE(mkdtemp(tmpl));
    std::string dir = tmpl;
    int fd = open(dir.c_str(), O_RDONLY | O_DIRECTORY);
    REQUIRE(fd >= 0);
    CHECK(write_atomic(fd, "live.json", "{\"a\": 1}\n") == "");
    CHECK(slurp(dir + "/live.json") == "{\"a\": 1}\n");
    // live.json replaced by a link to another file: the rename replaces the link, the target is untouched
    std::ofstream(dir + "/target") << "mine";
    unlink((dir + "/live.json").c_str());
    REQUIRE(symlink((dir + "/target").c_str(), (dir + "/live.json").c_str()) == 0);
    CHECK(write_atomic(fd, "live.json", "new") == "");
    CHECK(slurp(dir + "/target") == "mine");
    struct stat st;
    REQUIRE(lstat((dir + "/live.json").c_str(), &st) == 0);
    CHECK(S_ISREG(st.st_mode));
    CHECK((st.st_mode & 0777) == 0600);
    CHECK(access((dir + "/.live.json.tmp").c_str(), F_OK) != 0);
    close(fd);
    for (auto f : {"/live.json", "/target"}) unlink((dir + f).c_str());
    rmdir(dir.c_str());
}

TEST_CASE("the last screen says how the program ended; while it runs, nothing is said of an end") {
    Totals totals{{"cpu/HOST", {1536, 2048}}};
    LiveState st("tok", 42, "prog", [&] { return totals; });
    auto first_line = [](const std::string& t) { return t.substr(0, t.find('\n')); };
    CHECK(first_line(st.screen(5, true)).find("  [finished]") != std::string::npos);
    st.set_ended("killed by signal 11 (SIGSEGV)");
    std::string last = first_line(st.screen(5, true));
    CHECK(last.substr(last.size() - 43) == "  [finished: killed by signal 11 (SIGSEGV)]");
    CHECK(st.snapshot(5, true).find("\n  \"ended\": \"killed by signal 11 (SIGSEGV)\",\n") != std::string::npos);
    // (set before the end only by a caller's mistake: the running view still says running)
    CHECK(first_line(st.screen(5, false)).find("[running]") != std::string::npos);
    CHECK(st.snapshot(5, false).find("\n  \"ended\": null,\n") != std::string::npos);
    // no leak warning yet: "so far" only while it runs
    CHECK(st.screen(5, false).find("(none found by the step analysis so far)") != std::string::npos);
    CHECK(st.screen(5, true).find("(none found by the step analysis)\n") != std::string::npos);
}

TEST_CASE("a plugin failure is on the screen under the header and in live.json, in the HTML banner's words") {
    Totals totals{{"cpu/HOST", {1536, 2048}}};
    LiveState st("tok", 42, "prog", [&] { return totals; });
    CHECK(st.snapshot(5, false).find("\n  \"plugin_failures\": [],\n") != std::string::npos);
    st.on_plugin_failure("x", "analyzer", "failed on event 3: x: on\x1b[2Jpurpose");
    const std::string banner =
        "Plugin 'x' (analyzer) failed: failed on event 3: x: on\\x1b[2Jpurpose. This page is without what it would have "
        "added.";
    std::string screen = st.screen(5, false);
    std::vector<std::string> lines;
    for (std::istringstream in(screen); std::getline(in, lines.emplace_back());) {}
    REQUIRE(lines.size() > 4);
    CHECK(lines[2] == banner);  // a plugin's text never drives the terminal
    CHECK(lines[3] == "");
    CHECK(lines[4] == "MEMORY (pool: live, peak)");
    std::string json = st.snapshot(5, false);
    CHECK(json.find("\"plugin\": \"x\"") != std::string::npos);
    CHECK(json.find("\"kind\": \"analyzer\"") != std::string::npos);
    CHECK(json.find("\"text\": \"Plugin 'x' (analyzer) failed: failed on event 3: x: on\\\\x1b[2Jpurpose. This page is "
                    "without what it would have added.\"") != std::string::npos);
}

TEST_CASE("live files marked interrupted: only a view that said running, once, never through a link") {
    char tmpl[] = "/tmp/msms_live_XXXXXX";
    REQUIRE(mkdtemp(tmpl));
    std::string dir = tmpl;
    int fd = open(dir.c_str(), O_RDONLY | O_DIRECTORY);
    REQUIRE(fd >= 0);
    Totals totals{{"cpu/HOST", {1536, 2048}}};
    LiveState st("tok", 42, "prog", [&] { return totals; });
    // a view that said running: both files say it is not finished
    REQUIRE(write_atomic(fd, "live.json", st.snapshot(5, false)) == "");
    REQUIRE(write_atomic(fd, "live.txt", st.screen(5, false)) == "");
    mark_interrupted(fd);
    std::string json = slurp(dir + "/live.json");
    CHECK(json.find("\n  \"finished\": false,\n  \"interrupted\": true,\n  \"events\": ") != std::string::npos);
    std::string text = slurp(dir + "/live.txt");
    std::string first = text.substr(0, text.find('\n'));
    CHECK(first.size() > 44);
    CHECK(first.substr(first.size() - 44) == "  [not finished: msmemscope was interrupted]");
    CHECK(text.substr(text.find('\n')) == st.screen(5, false).substr(st.screen(5, false).find('\n')));
    // marked once
    mark_interrupted(fd);
    CHECK(slurp(dir + "/live.json") == json);
    CHECK(slurp(dir + "/live.txt") == text);
    // a finished view is left as it is
    REQUIRE(write_atomic(fd, "live.json", st.snapshot(5, true)) == "");
    REQUIRE(write_atomic(fd, "live.txt", st.screen(5, true)) == "");
    mark_interrupted(fd);
    CHECK(slurp(dir + "/live.json") == st.snapshot(5, true));
    CHECK(slurp(dir + "/live.txt") == st.screen(5, true));
    // a link in the file's place is not followed: its target is untouched
    unlink((dir + "/live.txt").c_str());
    std::ofstream(dir + "/target") << st.screen(5, false);
    REQUIRE(symlink((dir + "/target").c_str(), (dir + "/live.txt").c_str()) == 0);
    mark_interrupted(fd);
    CHECK(slurp(dir + "/target") == st.screen(5, false));
    close(fd);
    for (auto f : {"/live.json", "/live.txt", "/target"}) unlink((dir + f).c_str());
    rmdir(dir.c_str());
}

TEST_CASE("--live-http: PORT or ADDRESS:PORT, loopback by default, exact errors") {
    auto check = [](const std::string& value, std::vector<std::string>& errors) {
        Config cfg;
        RawValue v{value, "--live-http"};
        validate_live_options(nullptr, &v, cfg, errors);
        return cfg;
    };
    std::vector<std::string> errors;
    Config c = check("8765", errors);
    CHECK(errors.empty());
    CHECK(c.live_http);
    CHECK(c.live_http_address == "127.0.0.1");
    CHECK(c.live_http_port == 8765);
    CHECK(c.warnings.empty());
    c = check("localhost:0", errors);
    CHECK(c.live_http_address == "127.0.0.1");
    c = check("[::1]:80", errors);
    CHECK(c.live_http_address == "::1");
    CHECK(c.warnings.empty());
    CHECK(errors.empty());
    c = check("0.0.0.0:8765", errors);
    CHECK(errors.empty());
    REQUIRE(c.warnings.size() == 1);
    CHECK(c.warnings[0] == "--live-http=0.0.0.0:8765: the live view is served on 0.0.0.0, not only on this machine: "
                           "anyone who can reach that address can read it (there is no password)");
    for (const char* bad : {"", "http://x:1", "example.com:80", "127.0.0.1:65536", "127.0.0.1:", "::1:80", "1.2.3:4", "[::1]80"}) {
        errors.clear();
        check(bad, errors);
        REQUIRE(errors.size() == 1);
        CHECK(errors[0] == std::string("--live-http: invalid value '") + bad +
                               "' (allowed: PORT or ADDRESS:PORT; ADDRESS an IPv4 address, an [IPv6] address in brackets "
                               "or localhost; PORT 0..65535 (0: any free port); e.g. --live-http=127.0.0.1:8765)");
    }
    errors.clear();
    Config cmp;
    cmp.compare = true;
    RawValue live{"true", "--live"};
    validate_live_options(&live, nullptr, cmp, errors);
    REQUIRE(errors.size() == 1);
    CHECK(errors[0] == "--live: the live view shows a run while it goes on: use it with a program (msmemscope --live -- "
                       "<prog>) or --replay, not with --compare, --analyze or --merge");
}

TEST_CASE("live HTTP answers: the page and live.json only, nothing from disk") {
    std::string type, body;
    CHECK(http_answer("GET", "/", "{}", type, body) == 200);
    CHECK(type == "text/html; charset=utf-8");
    CHECK(body == LiveView::page());
    CHECK(http_answer("GET", "/live.json?t=1", "{\"x\": 1}", type, body) == 200);
    CHECK(type == "application/json");
    CHECK(body == "{\"x\": 1}");
    for (const char* path : {"/etc/passwd", "/../live.json", "/live.txt", "/summary.json", "//live.json", "/index.html"})
        CHECK(http_answer("GET", path, "{}", type, body) == 404);
    CHECK(http_answer("POST", "/live.json", "{}", type, body) == 405);
}

TEST_CASE("live server: a port in use is an error at start; port 0 takes a free one") {
    int s = socket(AF_INET, SOCK_STREAM, 0);
    REQUIRE(s >= 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = 0;
    REQUIRE(bind(s, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
    REQUIRE(listen(s, 1) == 0);
    socklen_t len = sizeof a;
    REQUIRE(getsockname(s, reinterpret_cast<sockaddr*>(&a), &len) == 0);
    unsigned taken = ntohs(a.sin_port);
    Config cfg;
    cfg.live_http = true;
    cfg.live_http_port = taken;
    cfg.output = "/nonexistent-msms-live";
    std::ostringstream say;
    {
        LiveView v(cfg, false);
        CHECK(v.start(say) == "--live-http=127.0.0.1:" + std::to_string(taken) + ": cannot listen there: Address already in use");
    }
    close(s);
    cfg.live_http_port = 0;
    LiveView v(cfg, false);
    CHECK(v.start(say) == "");
    CHECK(v.port() != 0);
    CHECK(say.str() == "msmemscope: live view on http://127.0.0.1:" + std::to_string(v.port()) + "/\n");
    CHECK(v.combined_json().find("\"running\": true, \"processes\": []") != std::string::npos);
    v.stop();
    CHECK(v.combined_json().find("\"running\": false") != std::string::npos);
}

TEST_CASE("live view: a process folder renamed at its end (a rank learned late) is shown once, by its new name") {
    char tmpl[] = "/tmp/msms_live_XXXXXX";
    REQUIRE(mkdtemp(tmpl));
    std::string out = tmpl;
    Config cfg;
    cfg.output = out;
    cfg.live_session = "tok";
    std::string old_dir = out + "/msmemscope_42_20260101000000_cpu", new_dir = old_dir + "_rank1";
    REQUIRE(mkdir(old_dir.c_str(), 0700) == 0);
    int fd = open(old_dir.c_str(), O_RDONLY | O_DIRECTORY);
    REQUIRE(fd >= 0);
    Totals totals{{"cpu/HOST", {1536, 2048}}};
    LiveState st("tok", 42, "prog", [&] { return totals; });
    REQUIRE(write_atomic(fd, "live.json", st.snapshot(5, false)) == "");
    REQUIRE(write_atomic(fd, "live.txt", st.screen(5, false)) == "");
    std::ostringstream say;
    LiveView v(cfg, false);
    REQUIRE(v.start(say) == "");
    auto count = [](const std::string& s, const std::string& what) {
        size_t n = 0;
        for (size_t at = s.find(what); at != std::string::npos; at = s.find(what, at + 1)) ++n;
        return n;
    };
    for (int i = 0; i < 300 && count(v.combined_json(), "\"pid\": 42") == 0; ++i) usleep(10000);
    REQUIRE(count(v.combined_json(), "\"pid\": 42") == 1);  // read under its first name
    // its last snapshot, then the rename (process_run.cpp), then the run's end
    REQUIRE(write_atomic(fd, "live.json", st.snapshot(6, true)) == "");
    REQUIRE(rename(old_dir.c_str(), new_dir.c_str()) == 0);
    v.stop();
    std::string all = v.combined_json();
    CHECK(count(all, "\"pid\": 42") == 1);
    CHECK(count(all, "\"finished\": true") == 1);
    CHECK(count(all, "\"finished\": false") == 0);
    close(fd);
    for (auto f : {"/live.json", "/live.txt"}) unlink((new_dir + f).c_str());
    rmdir(new_dir.c_str());
    rmdir(out.c_str());
}
