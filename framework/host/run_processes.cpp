#include "run_processes.h"

#include <sys/mman.h>

#include <atomic>
#include <new>

namespace msms {
namespace run_processes {
namespace {

struct Seen {
    std::atomic<uint32_t> first_pid;      // the first capture's; 0: none yet
    std::atomic<uint32_t> first_speaker;  // the first process with a line for the console; 0: none yet
    std::atomic<bool> naming;             // once on, on for the rest of the run
};
Seen* g_seen = nullptr;

}  // namespace

void begin_run() {
    if (!g_seen) {
        void* p = mmap(nullptr, sizeof(Seen), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
        if (p == MAP_FAILED) return;  // no process is named: the console keeps upstream's words
        g_seen = new (p) Seen{};
    }
    g_seen->first_pid.store(0);
    g_seen->first_speaker.store(0);
    g_seen->naming.store(false);
}

void note(uint32_t pid) {
    if (!g_seen || pid == 0) return;
    uint32_t none = 0;
    g_seen->first_pid.compare_exchange_strong(none, pid);
}

void note_rank(uint32_t pid) {
    if (!g_seen || pid == 0) return;
    const uint32_t first = g_seen->first_pid.load();
    // (the first process's own rank names nothing: its helpers have none)
    if (first != 0 && first != pid) g_seen->naming.store(true);
}

void note_line(uint32_t pid) {
    if (!g_seen || pid == 0) return;
    uint32_t speaker = 0;
    if (g_seen->first_speaker.compare_exchange_strong(speaker, pid)) return;
    if (speaker != pid) g_seen->naming.store(true);
}

bool naming() { return g_seen && g_seen->naming.load(); }

}  // namespace run_processes
}  // namespace msms
