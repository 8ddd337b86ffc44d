// After a run of several processes (a launcher script, ranks, DataLoader
// workers): one combined table on the console -- pid, rank, command, how it
// ended, peak per pool, leaked -- and <output>/index.html linking each
// process's folder and HTML report (issue #19 item 5).
#pragma once

#include <ostream>
#include <string>
#include <vector>

#include "process_run.h"

namespace msms {

// Bytes leaked, from the leaks analyzer's "====== SUMMARY: X Mb(s) leaked in
// N allocation(s) ======" lines; -1 when the report has none.
long double leaked_bytes(const ProcessSummary& s, uint64_t& allocations);
// The rank of a process (ProcessSummary::rank, else its folder name's
// ..._rank{R}); "" when not known.
std::string rank_of(const ProcessSummary& s);

// Prints the table and writes index.html into output_root; returns "" or
// the reason the index could not be written.
std::string write_run_index(const std::vector<ProcessSummary>& runs, const std::string& output_root,
                            const std::string& timestamp, std::ostream& out);

}  // namespace msms
