// What the host changes about its own process at start, and gives back to
// the programs it starts (they must run exactly as without the tool).
#pragma once

namespace msms {

// Called before anything else in main(), with main's argv: the host's own
// malloc in transparent huge pages. Its per-block tables and buffers reach
// hundreds of MiB on a PyTorch run, and on a VM every 4 KiB page touched
// the first time is a trap to the hypervisor: a GPT loop's replay spent a
// fifth of its time in those faults (bench/README.md). glibc takes the
// choice (tunable glibc.malloc.hugetlb=1) only at start, so the host
// executes itself once more with it added to GLIBC_TUNABLES, and then puts
// the user's GLIBC_TUNABLES back (set as it was, or unset) before anything
// else runs: the programs it starts see the user's environment. Nothing is
// done where the kernel has no huge pages to give ([never]), under an
// address-space limit, when the user's GLIBC_TUNABLES chose already, or
// with MSMEMSCOPE_HUGE_PAGES=0; a failed exec goes on without. The command
// users run (bin/msmemscope, host/msmemscope.sh) makes the same choice before
// it executes this binary, so that the host usually starts once: it then
// finds MSMEMSCOPE_HOST_TUNABLES set and only puts the user's value back.
void host_malloc_huge_pages(char** argv);
// Called first in main() after that: SIGXFSZ ignored (an output that reaches the
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
