// One CSV output file of the csv sink, written through a large buffer. The
// rows of a run with call stacks are gigabytes: through the page cache, the
// kernel's copying and page bookkeeping cost more CPU than building the rows
// (2.4 GB: ~3.5 s of system time on the 2-vCPU VM of bench/README.md, whose
// every new page is a hypervisor fault, against ~0.5 s with O_DIRECT). So
// whole 8 MiB blocks go to the disk directly (O_DIRECT, from an aligned
// copy) on a writer thread, while the sink builds the next rows (double
// buffered); the last partial block goes through the page cache at close.
// Where O_DIRECT is refused (tmpfs, some network file systems) or a write
// comes back short (the file-size limit), the file goes on through the page
// cache. The header is written at once: a host killed later leaves a
// readable file with what it had written, never a 0-byte one.
//
// A second writer through the page cache, taking blocks while the direct
// one is busy, was tried (issue #18 item 2): on this VM its blocks took
// 24-100 ms against 9 ms to the disk, even with the disk throttled to
// 200 MB/s, and slowed the direct writes beside them; it was not kept.
#pragma once

#include <fcntl.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "util/job_thread.h"

namespace msms {

class OutputFile {
public:
    // Creates the new file `rel` below the folder `dir_fd` (its folders too),
    // O_EXCL|O_NOFOLLOW through an openat chain (msmemscope/output_files.hpp,
    // issue #29 item 4): never through a link, never over an existing file.
    // `shown` is the path for messages. Throws with the reason.
    OutputFile(int dir_fd, const std::string& rel, const std::string& shown, const char* header);
    // The same with `path` relative to the working folder.
    OutputFile(const std::string& path, const char* header) : OutputFile(AT_FDCWD, path, path, header) {}
    ~OutputFile();
    OutputFile(const OutputFile&) = delete;
    OutputFile& operator=(const OutputFile&) = delete;

    // Rows are appended here; maybe_flush() writes whole blocks of it.
    // buffer()[start(), size()) is not written yet; what lies before start()
    // was (dropped when the buffer runs short of room, or when little is
    // left to move).
    std::string& buffer() { return buf_; }
    size_t start() const { return head_; }
    // The last `bytes` appended stay in the buffer through maybe_flush()
    // (the csv sink applies analyzers' Attr changes to rows still there).
    // Reserves room for them and two flushes' worth of rows beyond them.
    void set_hold(size_t bytes);
    size_t hold() const { return hold_; }
    // maybe_flush() would write now: once the buffer holds `hold` bytes and
    // a block more (one block a flush: the disk gets it while the next rows
    // are built; two at once made the second wait for the first).
    bool flush_due() const { return pending() >= due(); }
    // True when it wrote (the progress line is told then).
    bool maybe_flush();
    // Bytes handed to the file so far (the file offset of buffer()[start()]),
    // and still buffered.
    uint64_t written() const { return base_; }
    uint64_t pending() const { return buf_.size() - head_; }
    // A change of the unwritten bytes buffer()[begin, end) to `text`.
    struct Patch {
        size_t begin, end;
        std::string_view text;
    };
    // Writes the buffer up to index `cut` (default: all of it) -- whole
    // blocks (direct: kBlock each, and a last shorter one, whole pages, only
    // when `cut` is the buffer's end), or everything -- with `patches`
    // (sorted, apart, within [start(), cut)) in place of the bytes they
    // cover: a changed row costs its own bytes, the rows around it are not
    // moved (they are copied into the block anyway). A partial block left
    // over waits in the buffer, just before `cut`, changed already.
    void flush(size_t cut = SIZE_MAX, const Patch* patches = nullptr, size_t count = 0);
    // Everything written, the thread ended, the file closed; errors are
    // swallowed (the destructor calls it): flush() first to see them.
    void close();
    const std::string& path() const { return path_; }
    // The name given at creation, relative to its folder descriptor.
    const std::string& rel() const { return rel_; }
    // Blocks written with O_DIRECT so far (tests).
    uint64_t direct_blocks() const { return blocks_; }
    // Every write through the page cache from now on, as where O_DIRECT is
    // refused (tests: tmpfs takes O_DIRECT on recent kernels).
    void through_page_cache() {
        wait_block();
        stop_direct();
    }

    static constexpr size_t kBlock = 8 << 20;
    // The direct-write buffers' alignment: a huge page's (x86-64, AArch64
    // with 4 KiB pages), so that each buffer is whole huge pages.
    static constexpr size_t kHugeAlign = 2 << 20;
    // The two direct-write buffers (tests; null while writing through the
    // page cache).
    const char* direct_buffer(int i) const { return i ? spare_ : aligned_; }

private:
    static constexpr size_t kAlign = 4096;
    static constexpr size_t kSlack = 1 << 20;  // room for the row that makes a flush due
    // The unwritten bytes at which a flush is due.
    size_t due() const { return hold_ + kBlock; }
    // The buffer's capacity: room for the held rows and two flushes (one
    // block each) beyond them, so that the string never grows (and copies
    // itself) and the held rows move to the front after every second flush
    // (compact()): 33 MiB at the csv sink's default hold_mib=16. Nothing
    // held: a block and the row that makes it due.
    size_t room() const { return hold_ ? hold_ + 2 * kBlock + kSlack : kBlock + kSlack; }
    void submit_block(size_t n, uint64_t at);
    void wait_block();
    void write_block();
    void stop_direct();
    void write_all(const char* p, size_t n, uint64_t at);
    void compact();

    std::string path_, rel_;
    int fd_ = -1;
    bool direct_ = false;
    char* aligned_ = nullptr;  // the block in flight (the writer's)
    char* spare_ = nullptr;    // the next block
    uint64_t base_ = 0;        // file offset of buf_[head_]
    size_t head_ = 0;          // buf_[0, head_) was written
    uint64_t blocks_ = 0;
    size_t hold_ = 0;
    std::string buf_;
    // The block in flight (set before it is handed over, read after wait()).
    size_t job_n_ = 0, job_done_ = 0;
    uint64_t job_at_ = 0;
    int job_errno_ = 0;
    JobThread writer_;  // last: stopped first
};

}  // namespace msms
