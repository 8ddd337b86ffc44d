// msmemscope --analyze=<analyzer>[,...] --input=<file|folder|capture>:
// runs analyzers on a saved run (COMPAT §2 "Offline"). A memscope_dump CSV or
// DB (ours or upstream's, rows sorted by time first) goes through the same
// Pipeline as a live run; the Attr changes the analyzers make (e.g.
// inefficient, leak) are written back into that file; report lines go to
// stdout. A .msmcap capture is replayed with the chosen analyzers.
#pragma once

#include "config.h"
#include "registry.h"

namespace msms {

int offline_main(const Config& cfg, const Registry& registry);

}  // namespace msms
