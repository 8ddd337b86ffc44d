#include "offline/interrupted.h"

#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>

namespace msms {
namespace {

constexpr int kSignals[] = {SIGINT, SIGTERM, SIGHUP};
char g_text[3][512];
size_t g_len[3];
pid_t g_owner;  // a forked pipeline worker dies of the same Ctrl-C without a second line

void on_signal(int sig) {
    for (int i = 0; i < 3 && getpid() == g_owner; ++i)
        if (kSignals[i] == sig && g_len[i]) {
            ssize_t n = write(STDERR_FILENO, g_text[i], g_len[i]);
            (void)n;
        }
    // the signal's own end: the status a shell shows is 128+N
    signal(sig, SIG_DFL);
    raise(sig);
}

}  // namespace

void say_when_interrupted(const char* line) {
    const char* names[] = {"SIGINT", "SIGTERM", "SIGHUP"};
    g_owner = getpid();
    for (int i = 0; i < 3; ++i) {
        int n = std::snprintf(g_text[i], sizeof(g_text[i]) - 1, line, names[i]);
        if (n < 0) n = 0;
        if (static_cast<size_t>(n) > sizeof(g_text[i]) - 2) n = sizeof(g_text[i]) - 2;
        g_text[i][n] = '\n';
        g_len[i] = static_cast<size_t>(n) + 1;
        struct sigaction old {};
        sigaction(kSignals[i], nullptr, &old);
        if (old.sa_handler == SIG_IGN) continue;  // ignored by whoever started us (nohup, a background job): stays so
        struct sigaction sa {};
        sa.sa_handler = on_signal;
        sigemptyset(&sa.sa_mask);
        sigaction(kSignals[i], &sa, nullptr);
    }
}

}  // namespace msms
