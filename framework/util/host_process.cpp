#include "host_process.h"

#include <malloc.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <fcntl.h>
#include <string.h>
#include <unistd.h>

#include <string>

namespace msms {
namespace {
mode_t g_user_umask = 022;
bool g_set_up = false;
struct rlimit g_user_nofile;
bool g_nofile_raised = false;
constexpr rlim_t kHostOpenFiles = 1024;
constexpr rlim_t kHostMinOpenFiles = 16;
}  // namespace

void host_malloc_huge_pages(char** argv) {
    static const char kSaved[] = "MSMEMSCOPE_HOST_TUNABLES";  // "=<the user's value>" or "-" (unset)
    if (const char* saved = getenv(kSaved)) {  // the second start: the user's value back
        if (saved[0] == '=') setenv("GLIBC_TUNABLES", saved + 1, 1);
        else unsetenv("GLIBC_TUNABLES");
        unsetenv(kSaved);
        return;
    }
    if (const char* off = getenv("MSMEMSCOPE_HUGE_PAGES"); off && strcmp(off, "0") == 0) return;
    const char* user = getenv("GLIBC_TUNABLES");
    if (user && strstr(user, "glibc.malloc.hugetlb")) return;
    struct rlimit as;
    if (getrlimit(RLIMIT_AS, &as) == 0 && as.rlim_cur != RLIM_INFINITY) return;
    char mode[128] = {0};
    int fd = open("/sys/kernel/mm/transparent_hugepage/enabled", O_RDONLY | O_CLOEXEC);
    if (fd < 0) return;
    ssize_t n = read(fd, mode, sizeof(mode) - 1);
    close(fd);
    if (n <= 0 || strstr(mode, "[never]")) return;
    std::string saved = user ? std::string("=") + user : std::string("-");
    std::string tunables = user && *user ? std::string(user) + ":glibc.malloc.hugetlb=1" : "glibc.malloc.hugetlb=1";
    if (setenv(kSaved, saved.c_str(), 1) != 0 || setenv("GLIBC_TUNABLES", tunables.c_str(), 1) != 0) return;
    execv("/proc/self/exe", argv);
    // not executed again: as it was
    if (user) setenv("GLIBC_TUNABLES", user, 1);
    else unsetenv("GLIBC_TUNABLES");
    unsetenv(kSaved);
}

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
