#include "process_rank.h"

#include "process_run.h"

namespace msms {

void ProcessRank::note_late(const std::vector<std::pair<std::string, std::string>>& attrs, unsigned pid) {
    std::string rank, world;
    for (auto& [k, v] : attrs) {
        if (k == "rank") rank = valid_rank(v);
        else if (k == "world_size") world = valid_rank(v);
    }
    if (rank.empty() || world.empty() || std::stoul(world) < 2) return;
    // A second init_process_group (after destroy_process_group): the first
    // rank stays, as the environment's would.
    if (late_.empty()) late_ = rank;
    std::string env = valid_rank(env_);
    if (!env.empty() && env != rank && warning_.empty())
        warning_ = "pid " + std::to_string(pid) + ": its environment's rank " + env + " and torch.distributed's rank " +
                   rank + " differ; the environment's is kept";
}

std::string ProcessRank::rank() const {
    std::string env = valid_rank(env_);
    return env.empty() ? late_ : env;
}

}  // namespace msms
