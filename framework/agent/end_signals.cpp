// The end-noting signal handlers and the sigaction()/signal() that hide them
// (end_signals.h).
#include "end_signals.h"

#include <dlfcn.h>
#include <errno.h>
#include <signal.h>

#include <atomic>
#include <cstdint>

#include "channel.h"

extern "C" int __sigaction(int, const struct sigaction*, struct sigaction*);

namespace msms::agent {
namespace {

// The signals whose default action ends the process (SIGKILL cannot be
// caught: that end stays unknown). The first kFaults are faults and abort;
// the rest come from other processes or the kernel's limits.
constexpr int kEndSignals[] = {SIGSEGV, SIGBUS,  SIGFPE,  SIGILL,    SIGABRT, SIGTRAP, SIGSYS,  SIGHUP,
                               SIGINT,  SIGQUIT, SIGPIPE, SIGALRM,   SIGTERM, SIGUSR1, SIGUSR2, SIGSTKFLT,
                               SIGXCPU, SIGXFSZ, SIGVTALRM, SIGPROF, SIGIO,   SIGPWR};
constexpr unsigned kFaults = 7;

constexpr uint64_t bit(int sig) { return uint64_t{1} << sig; }

constexpr uint64_t all_end_signals() {
    uint64_t m = 0;
    for (int s : kEndSignals) m |= bit(s);
    return m;
}

// Bit n: the agent's handler is installed for signal n.
std::atomic<uint64_t> g_ours{0};
// The agent's sigaction() is the one the program calls (it was preloaded).
std::atomic<bool> g_hiding{false};

using sigaction_fn = int (*)(int, const struct sigaction*, struct sigaction*);

sigaction_fn next_sigaction() {
    static std::atomic<sigaction_fn> next{nullptr};
    sigaction_fn f = next.load(std::memory_order_acquire);
    if (!f) {
        f = reinterpret_cast<sigaction_fn>(dlsym(RTLD_NEXT, "sigaction"));
        if (!f) f = &__sigaction;
        next.store(f, std::memory_order_release);
    }
    return f;
}

bool ours(int sig) { return sig > 0 && sig < 64 && (g_ours.load(std::memory_order_acquire) & bit(sig)); }

void on_end_signal(int sig) {
    int saved = errno;
    channel_note_signal(sig);
    g_ours.fetch_and(~bit(sig), std::memory_order_acq_rel);  // SA_RESETHAND put the default back
    // The signal is blocked while this runs: raised again, it is delivered
    // (and ends the process) as soon as the handler returns. A fault
    // re-executes the faulting instruction anyway.
    raise(sig);
    errno = saved;
}

struct sigaction agent_action() {
    struct sigaction sa{};
    sa.sa_handler = on_end_signal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESETHAND | SA_ONSTACK;
    return sa;
}

struct sigaction default_action() {
    struct sigaction sa{};
    sa.sa_handler = SIG_DFL;
    sigemptyset(&sa.sa_mask);
    return sa;
}

bool is_default(const struct sigaction& sa) { return sa.sa_handler == SIG_DFL; }  // sa_sigaction shares it

// The program's sigaction(), with the agent's handlers out of its sight.
int program_sigaction(int sig, const struct sigaction* act, struct sigaction* old) {
    if (!g_hiding.load(std::memory_order_acquire) || sig <= 0 || sig >= 64 || !(all_end_signals() & bit(sig)))
        return next_sigaction()(sig, act, old);
    const bool was_ours = ours(sig);
    if (act && is_default(*act)) {
        // The default's action still happens, noted first.
        struct sigaction before{};
        if (!was_ours) {
            struct sigaction sa = agent_action();
            if (int r = next_sigaction()(sig, &sa, &before); r != 0) return r;
            g_ours.fetch_or(bit(sig), std::memory_order_acq_rel);
        }
        if (old) *old = was_ours ? default_action() : before;
        return 0;
    }
    int r = next_sigaction()(sig, act, old);
    if (r != 0) return r;
    if (act) g_ours.fetch_and(~bit(sig), std::memory_order_acq_rel);  // the program's own replaces it
    if (was_ours && old) *old = default_action();
    return 0;
}

// signal() as glibc's (BSD semantics: the signal blocked in its handler,
// system calls restarted), through the above.
sighandler_t program_signal(int sig, sighandler_t handler, int flags, bool mask_self) {
    struct sigaction sa{}, old{};
    sa.sa_handler = handler;
    sigemptyset(&sa.sa_mask);
    if (mask_self && sig > 0 && sig < 64) sigaddset(&sa.sa_mask, sig);
    sa.sa_flags = flags;
    if (program_sigaction(sig, &sa, &old) != 0) return SIG_ERR;
    return old.sa_handler;
}

}  // namespace

void install_end_signal_handlers() {
    // Preloaded: the program's sigaction() resolves to the agent's.
    const bool hiding = dlsym(RTLD_DEFAULT, "sigaction") == reinterpret_cast<void*>(&::sigaction);
    unsigned n = hiding ? sizeof(kEndSignals) / sizeof(kEndSignals[0]) : kFaults;
    for (unsigned i = 0; i < n; ++i) {
        int sig = kEndSignals[i];
        struct sigaction before{};
        if (next_sigaction()(sig, nullptr, &before) != 0 || !is_default(before)) continue;
        struct sigaction sa = agent_action();
        if (next_sigaction()(sig, &sa, nullptr) == 0) g_ours.fetch_or(bit(sig), std::memory_order_acq_rel);
    }
    g_hiding.store(hiding, std::memory_order_release);
}

}  // namespace msms::agent

// The program's calls (the agent is preloaded in front of libc).
extern "C" {

__attribute__((visibility("default"))) int sigaction(int sig, const struct sigaction* act, struct sigaction* old) {
    return msms::agent::program_sigaction(sig, act, old);
}

__attribute__((visibility("default"))) sighandler_t signal(int sig, sighandler_t handler) {
    return msms::agent::program_signal(sig, handler, SA_RESTART, true);
}

__attribute__((visibility("default"))) sighandler_t bsd_signal(int sig, sighandler_t handler) {
    return msms::agent::program_signal(sig, handler, SA_RESTART, true);
}

// System V: the handler runs once, the signal not blocked in it.
__attribute__((visibility("default"))) sighandler_t sysv_signal(int sig, sighandler_t handler) {
    return msms::agent::program_signal(sig, handler, SA_RESETHAND | SA_NODEFER, false);
}

// The System V calls: glibc's reach its internal sigaction, past ours, so a
// handler set through them was hidden behind the default a later query
// answered. sigset: SIG_HOLD blocks the signal; anything else is set (no
// flags, an empty mask) and unblocks it. Returns SIG_HOLD when the signal
// was blocked, else the disposition before.
__attribute__((visibility("default"))) sighandler_t sigset(int sig, sighandler_t disp) {
    sigset_t one, before;
    sigemptyset(&one);
    if (sigaddset(&one, sig) < 0) return SIG_ERR;
    struct sigaction was{};
    if (disp == SIG_HOLD) {
        if (sigprocmask(SIG_BLOCK, &one, &before) < 0) return SIG_ERR;
        if (sigismember(&before, sig)) return SIG_HOLD;
        if (msms::agent::program_sigaction(sig, nullptr, &was) < 0) return SIG_ERR;
        return was.sa_handler;
    }
    struct sigaction sa{};
    sa.sa_handler = disp;
    sigemptyset(&sa.sa_mask);
    if (msms::agent::program_sigaction(sig, &sa, &was) < 0) return SIG_ERR;
    if (sigprocmask(SIG_UNBLOCK, &one, &before) < 0) return SIG_ERR;
    return sigismember(&before, sig) ? SIG_HOLD : was.sa_handler;
}

__attribute__((visibility("default"))) int sigignore(int sig) {
    struct sigaction sa{};
    sa.sa_handler = SIG_IGN;
    sigemptyset(&sa.sa_mask);
    return msms::agent::program_sigaction(sig, &sa, nullptr);
}

}  // extern "C"
