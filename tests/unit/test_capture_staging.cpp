// The capture's staging slots (capture_format.h, "Staging"), end to end: the
// real agent library writes in a child process, this process reads the
// capture with the host's reader while the child runs. Each step of the
// child is ordered by pipes (a command, then its acknowledgement), so the
// reader's polls land exactly where a test puts them: in the middle of a
// staged chunk, after a chunk left its slot for its place, after a thread
// handed its slot on, after the process was killed with chunks still staged.
// One test runs two writer threads against a reader that polls meanwhile,
// for the sequence lock on a slot that moves to its next chunk mid-copy.
#include <doctest/doctest.h>
#include <dirent.h>
#include <dlfcn.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "capture_reader.h"

using namespace msms;

namespace {

// The agent's C entry points, from the library the build made.
struct Agent {
    int (*attach)(const char*, const char*);
    void (*start)();
    void (*alloc)(uint16_t, uint16_t, int16_t, uint64_t, uint64_t, uint64_t, const char*);
    void (*free_)(uint16_t, uint16_t, int16_t, uint64_t);
    void (*detach)();
};

Agent load_agent() {
    void* h = dlopen(MSMEMSCOPE_AGENT_LIB, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        fprintf(stderr, "cannot load %s: %s\n", MSMEMSCOPE_AGENT_LIB, dlerror());
        _exit(90);
    }
    Agent a{};
    a.attach = reinterpret_cast<int (*)(const char*, const char*)>(dlsym(h, "msms_agent_attach"));
    a.start = reinterpret_cast<void (*)()>(dlsym(h, "msms_agent_start"));
    a.alloc = reinterpret_cast<decltype(a.alloc)>(dlsym(h, "msms_agent_alloc"));
    a.free_ = reinterpret_cast<decltype(a.free_)>(dlsym(h, "msms_agent_free"));
    a.detach = reinterpret_cast<void (*)()>(dlsym(h, "msms_agent_detach"));
    if (!a.attach || !a.start || !a.alloc || !a.free_ || !a.detach) _exit(91);
    return a;
}

constexpr uint16_t kHost = 15, kCpu = 1;  // MSMS_T_HOST, MSMS_DEV_CPU

// Pairs written by one writer: malloc(size = its sequence number), free.
// The pointer names the writer (bits 40+) and the pair.
void write_pairs(const Agent& a, uint64_t writer, uint64_t first, uint64_t n) {
    for (uint64_t i = first; i < first + n; ++i) {
        uint64_t ptr = (writer << 40) | (i << 4);
        a.alloc(kHost, kCpu, -1, ptr, i, 0, nullptr);
        a.free_(kHost, kCpu, -1, ptr);
    }
}

// Commands to the child, one per line on its pipe; each is acknowledged
// with one byte once done.
//   w N   the main thread writes N more pairs (writer 0)
//   t N   a new thread writes N pairs as writer k (k = 1, 2, ...) and exits
//   p N   two threads write N pairs each at once (writers 101, 102)
//   x N   a thread writes N pairs and waits; the child detaches and closes
//         its capture descriptors (as the Python package does after
//         msms_agent_detach), opens a new file (which gets the freed
//         descriptor number), lets the thread exit, and acknowledges with
//         'k' when that file is still empty ('F' when the exiting thread's
//         chunk copy landed in it)
//   k     the child kills itself (SIGKILL: nothing is flushed)
//   q     the child detaches (its chunks are copied to their place) and exits
struct ThreadJob {
    const Agent* a;
    uint64_t writer, n;
};
void* run_job(void* p) {
    auto* j = static_cast<ThreadJob*>(p);
    write_pairs(*j->a, j->writer, 1, j->n);
    return nullptr;
}

// For 'x': writes, says so, waits for the gate, exits.
struct GatedJob {
    ThreadJob job;
    int wrote_w, gate_r;
};
void* run_gated(void* p) {
    auto* g = static_cast<GatedJob*>(p);
    run_job(&g->job);
    char c = 'w';
    if (write(g->wrote_w, &c, 1) != 1 || read(g->gate_r, &c, 1) != 1) _exit(95);
    return nullptr;
}

// Closes every descriptor of this process that names a capture file.
void close_capture_fds() {
    DIR* d = opendir("/proc/self/fd");
    if (!d) _exit(96);
    std::vector<int> fds;
    while (dirent* e = readdir(d)) {
        char link[4096];
        std::string path = std::string("/proc/self/fd/") + e->d_name;
        ssize_t n = readlink(path.c_str(), link, sizeof(link) - 1);
        if (n <= 0) continue;
        link[n] = 0;
        if (strstr(link, ".msmcap")) fds.push_back(atoi(e->d_name));
    }
    closedir(d);
    for (int fd : fds) close(fd);
}

[[noreturn]] void child_main(const std::string& dir, int cmd_fd, int ack_fd) {
    Agent a = load_agent();
    if (a.attach(dir.c_str(), "") != 0) _exit(92);
    a.start();
    FILE* in = fdopen(cmd_fd, "r");
    char op = 0;
    uint64_t n = 0, main_next = 1, thread_writer = 0;
    while (fscanf(in, " %c", &op) == 1) {
        if (op == 'w' && fscanf(in, "%lu", &n) == 1) {
            write_pairs(a, 0, main_next, n);
            main_next += n;
        } else if (op == 't' && fscanf(in, "%lu", &n) == 1) {
            ThreadJob job{&a, ++thread_writer, n};
            pthread_t t;
            pthread_create(&t, nullptr, run_job, &job);
            pthread_join(t, nullptr);
        } else if (op == 'p' && fscanf(in, "%lu", &n) == 1) {
            ThreadJob j1{&a, 101, n}, j2{&a, 102, n};
            pthread_t t1, t2;
            pthread_create(&t1, nullptr, run_job, &j1);
            pthread_create(&t2, nullptr, run_job, &j2);
            char ack = 'r';  // running: the reader polls while they write
            if (write(ack_fd, &ack, 1) != 1) _exit(93);
            pthread_join(t1, nullptr);
            pthread_join(t2, nullptr);
        } else if (op == 'x' && fscanf(in, "%lu", &n) == 1) {
            int wrote[2], gate[2];
            if (pipe(wrote) != 0 || pipe(gate) != 0) _exit(97);
            GatedJob g{{&a, 7, n}, wrote[1], gate[0]};
            pthread_t t;
            pthread_create(&t, nullptr, run_gated, &g);
            char c = 0;
            if (read(wrote[0], &c, 1) != 1) _exit(98);
            a.detach();
            close_capture_fds();
            std::string victim = dir + "/victim";
            int v = ::open(victim.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
            if (write(gate[1], &c, 1) != 1) _exit(99);
            pthread_join(t, nullptr);
            struct stat st {};
            char ack = (v >= 0 && fstat(v, &st) == 0 && st.st_size == 0) ? 'k' : 'F';
            if (write(ack_fd, &ack, 1) != 1) _exit(93);
            continue;
        } else if (op == 'k') {
            kill(getpid(), SIGKILL);
        } else if (op == 'q') {
            a.detach();
            char ack = 'k';
            if (write(ack_fd, &ack, 1) != 1) _exit(93);
            _exit(0);
        }
        char ack = 'k';
        if (write(ack_fd, &ack, 1) != 1) _exit(93);
    }
    _exit(94);
}

// The child, its capture, and everything the reader delivered so far.
struct Session {
    std::string dir;
    pid_t pid = -1;
    int cmd = -1, ack = -1;
    CaptureReader reader;
    bool opened = false;
    std::map<uint64_t, std::vector<uint64_t>> mallocs;  // writer -> sizes, in delivery order
    std::map<uint64_t, uint64_t> frees;                 // writer -> frees
    uint64_t last_ts = 0;
    bool ordered = true;
    uint64_t barrier_every_ns = 0;  // poll_ordered's: 0 = a barrier at every poll

    explicit Session(const char* staging) {
        char tmpl[] = "/tmp/msms_staging_XXXXXX";
        REQUIRE(mkdtemp(tmpl) != nullptr);
        dir = tmpl;
        int c[2], k[2];
        REQUIRE(pipe(c) == 0);
        REQUIRE(pipe(k) == 0);
        pid = fork();
        REQUIRE(pid >= 0);
        if (pid == 0) {
            close(c[1]);
            close(k[0]);
            if (staging) setenv("MSMEMSCOPE_CAPTURE_STAGING", staging, 1);
            child_main(dir, c[0], k[1]);
        }
        close(c[0]);
        close(k[1]);
        cmd = c[1];
        ack = k[0];
    }
    ~Session() {
        if (pid > 0) {
            kill(pid, SIGKILL);
            waitpid(pid, nullptr, 0);
        }
        close(cmd);
        close(ack);
        std::string rm = "rm -rf '" + dir + "'";
        CHECK(system(rm.c_str()) == 0);
    }
    // Sends one command and waits for its acknowledgement.
    char send(const std::string& line) {
        std::string l = line + "\n";
        REQUIRE(write(cmd, l.data(), l.size()) == static_cast<ssize_t>(l.size()));
        char a = 0;
        REQUIRE(read(ack, &a, 1) == 1);
        return a;
    }
    void wait_child(int* status) {
        REQUIRE(waitpid(pid, status, 0) == pid);
        pid = -1;
    }
    std::string capture_path() {
        DIR* d = opendir(dir.c_str());
        REQUIRE(d != nullptr);
        std::string found;
        while (dirent* e = readdir(d)) {
            std::string n = e->d_name;
            if (n.size() > 7 && n.compare(n.size() - 7, 7, ".msmcap") == 0) found = dir + "/" + n;
        }
        closedir(d);
        return found;
    }
    // One live poll, then every event it made deliverable.
    void poll() {
        if (!opened) {
            std::string err;
            REQUIRE_MESSAGE(reader.open(capture_path(), err), err);
            opened = true;
        }
        size_t decoded = 0;
        uint64_t mark = reader.poll_ordered(1000000, decoded, barrier_every_ns);
        RawEvent e;
        while (reader.pop(e, mark)) {
            if (e.ts < last_ts) ordered = false;
            last_ts = e.ts;
            uint64_t writer = e.ptr >> 40;
            if (e.kind == 1) mallocs[writer].push_back(e.size);
            else if (e.kind == 2) ++frees[writer];
        }
    }
    // The magic of chunk `index` as the file holds it now.
    uint32_t magic_at(uint64_t index) {
        int fd = ::open(capture_path().c_str(), O_RDONLY | O_CLOEXEC);
        REQUIRE(fd >= 0);
        uint32_t m = 0;
        CHECK(pread(fd, &m, sizeof(m), static_cast<off_t>(capture::chunk_offset(index))) == sizeof(m));
        close(fd);
        return m;
    }
    // Polls until the reader has delivered everything (the child is gone).
    void drain() {
        for (int i = 0; i < 1000 && !(reader.writer_gone() && reader.empty()); ++i) poll();
        poll();
    }
    // What writer w's mallocs delivered so far are its first ones, once
    // each, in order: sizes 1, 2, 3, ...
    bool in_order(uint64_t w) {
        const auto& got = mallocs[w];
        bool ok = true;
        for (size_t i = 0; i < got.size(); ++i) ok = ok && got[i] == i + 1;
        return ok;
    }
    // All n of writer w's pairs arrived, once each, in order.
    void check_writer(uint64_t w, uint64_t n) {
        CHECK(mallocs[w].size() == n);
        CHECK(in_order(w));
        CHECK(frees[w] == n);
    }
    // Two threads write n pairs each (writers 101, 102) while the reader
    // polls (their slots move on to new chunks under the reader's copies):
    // what was delivered meanwhile is each writer's first pairs, in order,
    // once each (a copy torn by a slot moving on would show here).
    void two_writers_while_polling(uint64_t n) {
        std::string line = "p " + std::to_string(n) + "\n";
        REQUIRE(write(cmd, line.data(), line.size()) == static_cast<ssize_t>(line.size()));
        char a = 0;
        REQUIRE(read(ack, &a, 1) == 1);
        CHECK(a == 'r');
        for (int i = 0; i < 200; ++i) poll();
        CHECK(in_order(101));
        CHECK(in_order(102));
        REQUIRE(read(ack, &a, 1) == 1);  // both joined
    }
    // The child detaches (its chunks go to their places) and exits; the
    // reader then delivers the rest.
    void finish() {
        send("q");
        int st = 0;
        wait_child(&st);
        CHECK(WIFEXITED(st));
        drain();
    }
};

}  // namespace

TEST_CASE("records in a staging slot are read while the chunk fills, then from its place") {
    Session s(nullptr);
    s.send("w 10");
    s.poll();
    // Ten pairs written, none of them in its place yet: all read from the
    // slot (chunk 0 of the file is the slot, chunk 1 the chunk it stages).
    CHECK(s.mallocs[0].size() == 10);
    CHECK(s.frees[0] == 10);
    CHECK(s.magic_at(0) == capture::kStageMagic);
    CHECK(s.magic_at(1) == 0);
    // Enough for many chunks (about 10 bytes a pair, 64 KiB a chunk), read
    // at uneven points: each poll finds the chunk it read from the slot
    // either still there or copied to its place, and the next one staged.
    for (int step : {5000, 7, 30000, 1, 12345, 64000}) {
        s.send("w " + std::to_string(step));
        s.poll();
    }
    uint64_t total = 10 + 5000 + 7 + 30000 + 1 + 12345 + 64000;
    CHECK(s.mallocs[0].size() == total);
    s.finish();
    s.check_writer(0, total);
    CHECK(s.ordered);
    CHECK(s.reader.corrupt_records() == 0);
    CHECK(s.reader.first_corruption() == "");
}

TEST_CASE("a thread's staging slot goes on with the chunk to the next thread") {
    Session s(nullptr);
    s.send("t 100");   // thread 1 writes, exits: its chunk (and slot) is handed on
    s.poll();
    CHECK(s.mallocs[1].size() == 100);  // read from the slot: nothing is in its place yet
    s.send("t 20000");  // thread 2 adopts it, fills it and goes on
    s.poll();
    CHECK(s.mallocs[2].size() == 20000);
    s.send("w 50");
    s.finish();
    s.check_writer(1, 100);
    s.check_writer(2, 20000);
    s.check_writer(0, 50);
    CHECK(s.ordered);
    CHECK(s.reader.corrupt_records() == 0);
}

TEST_CASE("a process killed with chunks still staged loses none of what it published") {
    Session s(nullptr);
    s.send("w 3000");
    s.poll();
    s.send("w 70000");  // several chunks copied to their place, the last one staged
    s.send("t 500");    // a handed-on chunk, staged in its slot
    REQUIRE(write(s.cmd, "k\n", 2) == 2);
    int st = 0;
    s.wait_child(&st);
    CHECK(WIFSIGNALED(st));
    CHECK(WTERMSIG(st) == SIGKILL);
    s.drain();
    s.check_writer(0, 73000);
    s.check_writer(1, 500);
    CHECK(s.reader.corrupt_records() == 0);
}

TEST_CASE("a thread that exits after the stream closed never writes through a descriptor number reused since") {
    Session s(nullptr);
    s.send("w 100");
    // The exiting thread's chunk is not copied anywhere once the stream is
    // closed: it stays in its slot, where the host reads it.
    CHECK(s.send("x 2000") == 'k');
    int st = 0;
    REQUIRE(write(s.cmd, "k\n", 2) == 2);
    s.wait_child(&st);
    s.drain();
    s.check_writer(0, 100);
    s.check_writer(7, 2000);
    CHECK(s.reader.corrupt_records() == 0);
}

TEST_CASE("two threads filling their slots while the host reads") {
    Session s(nullptr);
    // The reader polls while both threads write; then the rest once they ended.
    s.two_writers_while_polling(150000);
    s.finish();
    s.check_writer(101, 150000);
    s.check_writer(102, 150000);
    CHECK(s.ordered);
    CHECK(s.reader.corrupt_records() == 0);
}

TEST_CASE("barriers spaced out: events wait for the next barrier, in the same exact order") {
    Session s(nullptr);
    s.barrier_every_ns = 3600ull * 1000000000ull;  // one barrier, at the first poll
    s.send("w 0");  // the capture is there
    s.poll();
    CHECK(s.reader.barriers() == 1);
    // Written after that barrier: read, but held below its clock, however
    // often the reader polls (each poll without a barrier of its own).
    s.send("w 100");
    for (int i = 0; i < 20; ++i) s.poll();
    CHECK(s.reader.barriers() == 1);
    CHECK(s.mallocs[0].empty());
    // A barrier due again delivers them.
    s.barrier_every_ns = 1;
    s.poll();
    CHECK(s.reader.barriers() == 2);
    CHECK(s.mallocs[0].size() == 100);
    // Two threads writing while the reader polls with the host's spacing:
    // what comes out meanwhile is each writer's first pairs, in order, and
    // everything once they are done, in one order of time.
    s.barrier_every_ns = 2000000;  // 2 ms
    s.two_writers_while_polling(150000);
    uint64_t barriers = s.reader.barriers();
    s.finish();
    CHECK(s.reader.barriers() == barriers);  // none once the writer is gone
    s.check_writer(0, 100);
    s.check_writer(101, 150000);
    s.check_writer(102, 150000);
    CHECK(s.ordered);
    CHECK(s.reader.stragglers() == 0);
    CHECK(s.reader.corrupt_records() == 0);
}

TEST_CASE("without staging (MSMEMSCOPE_CAPTURE_STAGING=0) chunks are written in place, read the same") {
    Session s("0");
    s.send("w 10");
    s.poll();
    CHECK(s.mallocs[0].size() == 10);
    s.send("w 40000");
    s.send("t 300");
    s.finish();
    s.check_writer(0, 40010);
    s.check_writer(1, 300);
    CHECK(s.ordered);
    CHECK(s.reader.corrupt_records() == 0);
}
