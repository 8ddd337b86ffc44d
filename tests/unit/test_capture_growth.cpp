// The capture reader against a capture that grows while it is opened (the
// agent reserves disk a few chunks at a time and publishes chunks_mapped
// once the file holds them). A flaky CI failure ("truncated capture (the
// header describes 528384 bytes, the file has 266240)" under ulimit -v) came
// from open() taking the file's size before reading chunks_mapped: an agent
// growing in between made a whole capture look truncated.
//
// fstat is interposed here (this test binary only) so that the agent's
// growth lands exactly between the reader's size check and whatever it reads
// after it: deterministic, no timing.
#include <doctest/doctest.h>
#include <dlfcn.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <string>

#include "capture_reader.h"

using namespace msms;
using namespace msms::capture;

namespace {

// Armed: the next fstat of this file first reports the size as it is, then
// lets "the agent" grow the file to grow_to chunks and publish that.
int g_armed_fd = -1;          // the test's own descriptor of the capture
CaptureHeader* g_agent_header = nullptr;
uint64_t g_grow_to = 0;
int g_fstats_seen = 0;

void agent_grows() {
    CHECK(ftruncate(g_armed_fd, static_cast<off_t>(chunk_offset(g_grow_to))) == 0);
    g_agent_header->chunks_mapped.store(g_grow_to, std::memory_order_release);
    g_agent_header->chunks_taken.store(g_grow_to, std::memory_order_release);
}

bool same_file(int a, const struct stat& st) {
    using Fstat = int (*)(int, struct stat*);
    static Fstat real = reinterpret_cast<Fstat>(dlsym(RTLD_NEXT, "fstat"));
    struct stat other;
    return a >= 0 && real(a, &other) == 0 && other.st_dev == st.st_dev && other.st_ino == st.st_ino;
}

}  // namespace

namespace {
template <class Stat>
int after_fstat(int fd, int rc, const Stat* st) {
    struct stat s{};
    if (rc == 0 && g_grow_to && fd != g_armed_fd) {
        s.st_dev = st->st_dev;
        s.st_ino = st->st_ino;
        if (same_file(g_armed_fd, s)) {
            ++g_fstats_seen;
            agent_grows();
            g_grow_to = 0;  // once
        }
    }
    return rc;
}
}  // namespace

// Both names (a build with _FILE_OFFSET_BITS=64 calls fstat64).
extern "C" int fstat(int fd, struct stat* st) noexcept {
    using Fstat = int (*)(int, struct stat*);
    static Fstat real = reinterpret_cast<Fstat>(dlsym(RTLD_NEXT, "fstat"));
    return after_fstat(fd, real(fd, st), st);
}
extern "C" int fstat64(int fd, struct stat64* st) noexcept {
    using Fstat = int (*)(int, struct stat64*);
    static Fstat real = reinterpret_cast<Fstat>(dlsym(RTLD_NEXT, "fstat64"));
    return after_fstat(fd, real(fd, st), st);
}

namespace {

// A live capture as the agent leaves it after a few growth steps: header,
// `chunks` chunks reserved (all zero: taken, not yet set up), the writer's
// lock not held (the reader only checks sizes here).
struct LiveCapture {
    std::string dir, path;
    int fd = -1;
    CaptureHeader* h = nullptr;

    explicit LiveCapture(uint64_t chunks) {
        char tmpl[] = "/tmp/msms_growth_XXXXXX";
        REQUIRE(mkdtemp(tmpl) != nullptr);
        dir = tmpl;
        path = dir + "/1.0.msmcap";
        fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
        REQUIRE(fd >= 0);
        REQUIRE(ftruncate(fd, static_cast<off_t>(chunk_offset(chunks))) == 0);
        void* p = mmap(nullptr, kHeaderSize, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        REQUIRE(p != MAP_FAILED);
        h = static_cast<CaptureHeader*>(p);
        h->format_major = kFormatMajor;
        h->format_minor = kFormatMinor;
        h->header_size = kHeaderSize;
        h->chunk_size = kChunkSize;
        h->pid = 4242;
        h->fixed_sum = fixed_sum(h);
        h->chunks_mapped.store(chunks);
        h->chunks_taken.store(chunks);
        std::memcpy(h->magic, kMagic, sizeof(kMagic));
    }
    ~LiveCapture() {
        g_grow_to = 0;
        g_armed_fd = -1;
        munmap(h, kHeaderSize);
        close(fd);
        unlink(path.c_str());
        rmdir(dir.c_str());
    }
    // The agent will grow the capture to `to` chunks right after the
    // reader's next fstat of it.
    void grow_during_next_fstat(uint64_t to) {
        g_armed_fd = fd;
        g_agent_header = h;
        g_grow_to = to;
        g_fstats_seen = 0;
    }
};

}  // namespace

TEST_CASE("a capture that grows while the host opens it is not reported truncated") {
    // 4 chunks reserved; the agent doubles to 8 (the step in the CI failure:
    // 266240 -> 528384 bytes) between the reader's fstat and its reading of
    // the header. The header is read first, so the size seen covers it.
    LiveCapture cap(4);
    cap.grow_during_next_fstat(8);
    CaptureReader reader;
    std::string error;
    bool ok = reader.open(cap.path, error);
    CHECK(g_fstats_seen == 1);  // the growth really happened inside open()
    CHECK(error == "");
    CHECK(ok);
    // ... and the reader goes on to read the grown capture.
    CHECK(cap.h->chunks_mapped.load() == 8);
    CHECK(reader.poll() == 0);  // zero chunks: taken, not set up yet
    CHECK(reader.read_error() == "");
}

TEST_CASE("a capture whose file really lacks what its header describes is reported truncated") {
    // Real truncation is still caught: the header says 8 chunks, the file
    // holds 4 (e.g. cut by a copy to a full disk).
    LiveCapture cap(4);
    cap.h->chunks_mapped.store(8);
    CaptureReader reader;
    std::string error;
    CHECK_FALSE(reader.open(cap.path, error));
    CHECK(error == cap.path + ": truncated capture (the header describes 528384 bytes, the file has 266240)");
}
