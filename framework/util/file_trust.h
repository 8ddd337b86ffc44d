// Whether a file the host runs code from (a plugin, the agent, a collector's
// target library) may be trusted. Only a root host checks: an ordinary user
// can only load what they could have run anyway, but a root host must not
// run code that another user could have written or replaced.
#pragma once

#include <string>

namespace msms {

// "" when `path` may be loaded, else the reason (for a refusal message).
// As root: the file and every folder above it must belong to root, and none
// may be writable by a user other than root (group write counts only for a
// group other than root's; a sticky folder such as /tmp is fine above the
// file's own folder). As any other user: always "".
std::string untrusted_reason(const std::string& path);
// The same check for an explicit user id (tests).
std::string untrusted_reason_for(const std::string& path, unsigned uid);

// For the folder a root host writes its outputs into (--output): the same
// rule, the folder itself included even when sticky (another user could
// plant a link at a process folder's predictable name). "" when safe, when
// not root, or when the folder does not exist; else why, e.g. "/tmp/out is
// writable by all users".
std::string unsafe_output_reason(const std::string& folder);
std::string unsafe_output_reason_for(const std::string& folder, unsigned uid);

}  // namespace msms
