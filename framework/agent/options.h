// Collection options the host passes to the agent (MSMEMSCOPE_AGENT_OPTS, a
// "key=value;key=value" text). Parsed once into static storage: no heap.
#pragma once

#include <cstddef>
#include <cstdint>

namespace msms::agent {

struct Options {
    bool alloc = true, free = true, launch = true, access = false, traceback = false;
    // --level (upstream's levelType bits): op = framework operators (ATEN_START/END,
    // their ACCESS rows), kernel = kernel launches (KERNEL_LAUNCH). Default: op.
    bool op_level = true, kernel_level = false;
    // Operators' tensor reads and writes (ACCESS READ/WRITE per operator
    // input/output, the bulk of ACCESS rows) among the accesses: off when
    // access is collected only for owner tags (decompose), neither written
    // nor read by any analyzer (host: Config::op_access).
    bool op_access = true;
    bool deferred = false;
    bool follow_fork = true;
    uint32_t c_depth = 0;   // 0: no C stacks
    uint32_t py_depth = 0;  // 0: no Python stacks
    // Chunks the capture may hold unread by the host (beyond the threads'
    // current ones) before a thread that needs a new chunk waits for the
    // host to release some (capture_format.h); 0: no bound (--aggregate sets it).
    uint32_t capture_budget = 0;
    // The CLI (the capture's reader) when there is one: once it is gone, the
    // program goes on unrecorded (channel.cpp, reader_gone). 0: none known.
    uint32_t host_pid = 0;
    // The CLI's pid namespace (the inode of /proc/self/ns/pid): host_pid
    // names the CLI only in a process of that namespace (a program run in
    // a new one, unshare --pid or a sandbox, does not see it).
    uint64_t host_pidns = 0;
};

extern Options g_options;
inline const Options& options() { return g_options; }  // read on every record
void parse_options(const char* text);
// A new option text while the stream is open (the Python API's next range,
// config() between ranges): the collection options change; the host's pid,
// the capture budget, follow_fork and the collect mode stay.
void reparse_options(const char* text);
// Event classes: alloc, free, launch, access, traceback; and the level's
// views: "op", "kernel", "op_launch" (launch at op level), "kernel_launch"
// (launch at kernel level), "op_access" (access at op level).
bool wants(const char* event_class);
// Raw value of key ("" if absent).
size_t option_text(const char* key, char* buf, size_t n);

}  // namespace msms::agent
