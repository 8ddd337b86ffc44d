// What the host changes about its own process at start, and gives back to
// the programs it starts (they must run exactly as without the tool).
#pragma once

namespace msms {

// Called first in main(): SIGXFSZ ignored (an output that reaches the
// file-size limit fails with EFBIG and is reported, instead of killing the
// host), and write-for-others taken out of the umask (outputs are never
// world-writable).
void host_process_setup();
// In a forked child before exec (async-signal-safe): SIGXFSZ back to its
// default, the user's own umask and open-file limit (host_process_setup
// raises the host's soft limit towards the hard one).
void host_process_restore_for_child();
// Whether the host has the few descriptors it needs to profile a program
// (16); `limit` is its open-file limit.
bool host_has_open_files(unsigned long& limit);

}  // namespace msms
