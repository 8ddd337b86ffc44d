// The rank of a profiled process. From its environment (RANK, else
// LOCAL_RANK, as the agent read them when its capture began: torchrun and
// most launchers set them); a process launched without them
// (torch.multiprocessing.spawn passes the rank as a function argument)
// learns it only when its init_process_group has completed, which the
// Python collector then reports as one SYSTEM row named kRankEventName
// (Attr rank, world_size). That row is the host's, never a plugin's. The
// process folder exists by then, under a name without the rank: ProcessRun
// renames it to carry the late rank once every plugin is done with it
// (name_folder_by_rank), before summary.json, the console's table,
// index.html and --merge name it.
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace msms {

// The row's Name (bindings/msmemscope/_torch.py sends it).
constexpr const char* kRankEventName = "msmemscope.rank";

class ProcessRank {
public:
    // env: the capture header's text (RANK / LOCAL_RANK), "" when unset.
    explicit ProcessRank(std::string env) : env_(std::move(env)) {}
    // A kRankEventName row's Attr. A world of one process has no ranks to
    // tell apart (upstream shows no rank at all): such a row is ignored.
    // The environment's rank wins; a late rank that differs from it is
    // warned about once (warning()).
    void note_late(const std::vector<std::pair<std::string, std::string>>& attrs, unsigned pid);
    // The rank as a number text (valid_rank), "" when none.
    std::string rank() const;
    // "" or the one warning for the console.
    const std::string& warning() const { return warning_; }

private:
    std::string env_;
    std::string late_;
    std::string warning_;
};

}  // namespace msms
