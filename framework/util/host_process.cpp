#include "host_process.h"

#include <malloc.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <sys/stat.h>

namespace msms {
namespace {
mode_t g_user_umask = 022;
bool g_set_up = false;
struct rlimit g_user_nofile;
bool g_nofile_raised = false;
constexpr rlim_t kHostOpenFiles = 1024;
constexpr rlim_t kHostMinOpenFiles = 16;
}  // namespace

void host_process_setup() {
    // Under an address-space limit (ulimit -v), glibc's per-thread arenas
    // (64 MiB of address space each) fail to be created and every malloc of
    // those threads falls back to its own mmap: the host crawls. One arena
    // grows within the limit instead.
    struct rlimit as;
    if (getrlimit(RLIMIT_AS, &as) == 0 && as.rlim_cur != RLIM_INFINITY) mallopt(M_ARENA_MAX, 1);
    g_user_umask = umask(0);
    umask(g_user_umask | S_IWOTH);
    signal(SIGXFSZ, SIG_IGN);
    // Set by a live session only (session.cpp): never inherited, so that
    // --replay and --analyze move no watch staging file.
    unsetenv("MSMEMSCOPE_HOST_WATCH_STAGING");
    unsetenv("MSMEMSCOPE_HOST_WATCH_TOKEN");
    // A low open-file limit (ulimit -n) is the program's: the host raises its
    // own soft limit towards the hard one (it holds folders, pipes, the
    // capture and plugin files) and gives the program the user's.
    struct rlimit nofile;
    if (getrlimit(RLIMIT_NOFILE, &nofile) == 0 && nofile.rlim_cur != RLIM_INFINITY &&
        nofile.rlim_cur < kHostOpenFiles) {
        g_user_nofile = nofile;
        g_nofile_raised = true;
        nofile.rlim_cur = nofile.rlim_max == RLIM_INFINITY || nofile.rlim_max > kHostOpenFiles ? kHostOpenFiles
                                                                                                : nofile.rlim_max;
        setrlimit(RLIMIT_NOFILE, &nofile);
    }
    g_set_up = true;
}

void host_process_restore_for_child() {
    if (!g_set_up) return;
    signal(SIGXFSZ, SIG_DFL);
    umask(g_user_umask);
    if (g_nofile_raised) setrlimit(RLIMIT_NOFILE, &g_user_nofile);
}

bool host_has_open_files(unsigned long& limit) {
    struct rlimit nofile;
    if (getrlimit(RLIMIT_NOFILE, &nofile) != 0 || nofile.rlim_cur == RLIM_INFINITY) return true;
    limit = static_cast<unsigned long>(nofile.rlim_cur);
    return nofile.rlim_cur >= kHostMinOpenFiles;
}

}  // namespace msms
