#include "run_processes.h"

#include <sys/mman.h>

#include <atomic>
#include <cstdlib>
#include <map>
#include <new>

namespace msms {
namespace run_processes {
namespace {

constexpr int64_t kNoRank = -1;

struct Seen {
    // The first process with a rank: pid << 32 | rank; 0: none yet.
    std::atomic<uint64_t> first_ranked;
    std::atomic<uint32_t> first_speaker;  // the first process with a line for the console; 0: none yet
    std::atomic<bool> naming;             // once on, on for the rest of the run
};
Seen* g_seen = nullptr;

// The main process's record of the captures noted (note() is the main
// process's only): each pid's parent and environment's rank.
struct Noted {
    uint32_t ppid = 0;
    int64_t rank = kNoRank;
};
std::map<uint32_t, Noted>& noted() {
    static std::map<uint32_t, Noted> m;
    return m;
}

// valid_rank's text (at most 9 digits) as a number; kNoRank for "".
int64_t rank_number(const std::string& rank) {
    if (rank.empty() || rank.size() > 9 || rank.find_first_not_of("0123456789") != std::string::npos) return kNoRank;
    return std::strtoll(rank.c_str(), nullptr, 10);
}

// A child with a rank its parent had not: a launcher's trainer, not a
// helper that inherited it.
bool told_apart(const Noted& child, const Noted& parent) { return child.rank != kNoRank && child.rank != parent.rank; }

}  // namespace

void begin_run() {
    if (!g_seen) {
        void* p = mmap(nullptr, sizeof(Seen), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
        if (p == MAP_FAILED) return;  // no process is named: the console keeps upstream's words
        g_seen = new (p) Seen{};
    }
    g_seen->first_ranked.store(0);
    g_seen->first_speaker.store(0);
    g_seen->naming.store(false);
    noted().clear();
}

void note(uint32_t pid, uint32_t ppid, const std::string& rank) {
    if (!g_seen || pid == 0) return;
    Noted& me = noted()[pid];
    me = Noted{ppid, rank_number(rank)};
    // Parent and child in either order: the child's capture may be found
    // first (in one scan, the names sort by pid as text).
    auto parent = ppid != pid ? noted().find(ppid) : noted().end();
    bool apart = parent != noted().end() && told_apart(me, parent->second);
    for (auto& [other, n] : noted())
        if (other != pid && n.ppid == pid && told_apart(n, me)) apart = true;
    if (apart) g_seen->naming.store(true);
    if (me.rank != kNoRank) note_rank(pid, rank);
}

void note_rank(uint32_t pid, const std::string& rank) {
    const int64_t r = rank_number(rank);
    if (!g_seen || pid == 0 || r == kNoRank) return;
    // A late rank (torch.distributed's, in a worker) against the parent's
    // environment's: mp.spawn's trainers have ranks their launcher had not.
    // A worker holds the main process's record as it was when the worker was
    // forked, which has the parent when its capture was found first.
    if (auto me = noted().find(pid); me != noted().end() && me->second.ppid != pid) {
        auto parent = noted().find(me->second.ppid);
        if (parent != noted().end() && told_apart(Noted{me->second.ppid, r}, parent->second)) g_seen->naming.store(true);
    }
    const uint64_t mine = uint64_t{pid} << 32 | static_cast<uint32_t>(r);
    uint64_t first = 0;
    if (g_seen->first_ranked.compare_exchange_strong(first, mine)) return;
    // (an exec's new image with another rank is still one process)
    if (first >> 32 != pid && static_cast<uint32_t>(first) != static_cast<uint32_t>(r)) g_seen->naming.store(true);
}

void note_line(uint32_t pid) {
    if (!g_seen || pid == 0) return;
    uint32_t speaker = 0;
    if (g_seen->first_speaker.compare_exchange_strong(speaker, pid)) return;
    if (speaker != pid) g_seen->naming.store(true);
}

bool naming() { return g_seen && g_seen->naming.load(); }

std::string named(uint32_t pid, const std::string& rank) {
    note_line(pid);
    if (!naming()) return "";
    return "[pid " + std::to_string(pid) + (rank.empty() ? "" : ", rank " + rank) + "] ";
}

}  // namespace run_processes
}  // namespace msms
