// msmemscope --merge=<folder>[,<folder>...]: combines the runs of several
// nodes (output folders copied together or on a shared filesystem) into one
// cross-rank table (issue #28 item 9). Reads each process folder's
// summary.json (process_summary_json.h) and writes, into --output (default
// memscopeDumpResults/merge_<ts>): merge.csv (one row per process),
// merge_imbalance.csv (per pool: the ranks' smallest and largest peak, and
// their difference and ratio; the same for leaks), merge.db (SQLite: tables
// ranks, pools and imbalance, for `ATTACH 'merge.db' AS m`) and index.html;
// prints the table on the console.
#pragma once

#include "config.h"

namespace msms {

// Exit status: 0 (everything written), 2 (nothing to merge, a folder that
// is not there), 70 (an output could not be written).
int merge_main(const Config& cfg);

}  // namespace msms
