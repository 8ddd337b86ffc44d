#include "host_process.h"

#include <signal.h>
#include <sys/stat.h>

namespace msms {
namespace {
mode_t g_user_umask = 022;
bool g_set_up = false;
}  // namespace

void host_process_setup() {
    g_user_umask = umask(0);
    umask(g_user_umask | S_IWOTH);
    signal(SIGXFSZ, SIG_IGN);
    g_set_up = true;
}

void host_process_restore_for_child() {
    if (!g_set_up) return;
    signal(SIGXFSZ, SIG_DFL);
    umask(g_user_umask);
}

}  // namespace msms
