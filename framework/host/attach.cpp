// msmemscope --attach=PID: see attach.h.
#include "attach.h"
#include "attach_breakpoints.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pwd.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>
#include <thread>
#include <vector>

#include "config.h"
#include "config/options.h"
#include "console_notes.h"
#include "launcher.h"
#include "process_run.h"
#include "registry.h"
#include "session.h"
#include "stale_sessions.h"
#include "supervisor.h"
#include "util/file_trust.h"
#include "util/text.h"
#include "warning_out.h"

namespace fs = std::filesystem;

namespace msms {

using cfgopt::shown;

void validate_attach_options(const RawValue* attach, const RawValue* attach_for, const RawValue* attach_steps,
                             Config& cfg, std::vector<std::string>& errors) {
    if (attach) {
        unsigned long long n = 0;
        if (!parse_uint(attach->value, n) || n == 0 || n > 0x7fffffff)
            errors.push_back(attach->origin + ": invalid value '" + shown(attach->value) +
                             "' (allowed: the pid of a running process, e.g. --attach=12345)");
        else
            cfg.attach_pid = static_cast<int>(n);
        if (!cfg.program.empty())
            errors.push_back(attach->origin + ": --attach profiles a running process; give no program to start "
                             "(got '" + shown(cfg.program[0]) + "')");
        if (!cfg.replay.empty() || cfg.compare || cfg.analyze || !cfg.merge.empty() || !cfg.serve_session.empty())
            errors.push_back(attach->origin + ": --attach runs alone (no --replay, --compare, --analyze or --merge)");
    }
    auto number = [&](const RawValue* v, unsigned long long max, const char* example, unsigned& out) {
        if (!v) return;
        unsigned long long n = 0;
        if (!parse_uint(v->value, n) || n == 0 || n > max)
            errors.push_back(v->origin + ": invalid value '" + shown(v->value) + "' (allowed: 1.." +
                             std::to_string(max) + ", e.g. " + example + ")");
        else
            out = static_cast<unsigned>(n);
        if (!attach) errors.push_back(v->origin + ": only valid together with --attach=PID");
    };
    number(attach_for, 31536000ull, "--attach-for=60", cfg.attach_for_s);
    number(attach_steps, 1000000ull, "--attach-steps=5", cfg.attach_steps);
}

namespace attach {

// The first SIGINT, SIGTERM or SIGHUP the CLI got during an attach (0:
// none): it cancels an inject still waiting, and detaches once attached.
volatile sig_atomic_t g_stop_signal = 0;
const char* const kCancelled = "cancelled";

namespace {

std::string read_small(const std::string& path) {
    std::ifstream f(path);
    std::stringstream ss;
    ss << f.rdbuf();
    return ss.str();
}

std::string user_name(uid_t uid) {
    struct passwd* pw = getpwuid(uid);
    return pw ? std::string(pw->pw_name) : "uid " + std::to_string(uid);
}

std::string ptrace_hint() {
    std::string scope = trim(read_small("/proc/sys/kernel/yama/ptrace_scope"));
    std::string s = "the kernel must let msmemscope trace it: kernel.yama.ptrace_scope";
    if (!scope.empty()) s += " is " + scope;
    s += " (0: any process of your user; 1: only your descendants, unless msmemscope has CAP_SYS_PTRACE; "
         "3: none); run as root or give CAP_SYS_PTRACE (sudo sysctl kernel.yama.ptrace_scope=0, or in a "
         "container: docker run --cap-add=SYS_PTRACE, and a seccomp profile that allows ptrace)";
    return s;
}

// gdb's C string literal.
std::string quoted(const std::string& s) {
    std::string out = "\"";
    for (char c : s) {
        if (c == '\\' || c == '"') out += '\\', out += c;
        else if (c == '\n') out += "\\n";
        else out += c;
    }
    return out + "\"";
}

bool alive(pid_t pid) {
    std::string stat = read_small("/proc/" + std::to_string(pid) + "/stat");
    if (stat.empty()) return false;
    size_t rp = stat.rfind(')');
    if (rp != std::string::npos && rp + 2 < stat.size() && (stat[rp + 2] == 'Z' || stat[rp + 2] == 'X')) return false;
    return true;
}

std::string find_gdb() {
    const char* path = getenv("PATH");
    std::string p = path && *path ? path : "/usr/local/bin:/usr/bin:/bin";
    std::stringstream dirs(p);
    for (std::string dir; std::getline(dirs, dir, ':');) {
        std::string c = (dir.empty() ? std::string(".") : dir) + "/gdb";
        if (access(c.c_str(), X_OK) == 0) return c;
    }
    return "";
}

struct GdbRun {
    std::string out;
    bool timed_out = false;
    bool cancelled = false;  // g_stop_signal stopped the wait
    bool killed = false;     // gdb did not stop when interrupted: killed (kKillAfterS)
    BreakpointRepair repair;  // after a kill: the breakpoints it left, taken out
    int status = 0;
};

// How long gdb has to stop once interrupted before it is killed.
constexpr double kKillAfterS = 20.0;

// Runs gdb on `script` in its own process group (a Ctrl-C at the terminal
// is msmemscope's, never gdb's). Past the timeout gdb gets SIGINT: it stops
// waiting, the script ends and gdb detaches, leaving the process as it was.
GdbRun run_gdb(const std::string& gdb, pid_t pid, const std::string& script, unsigned timeout_s,
               bool cancellable = false) {
    GdbRun r;
    int fds[2];
    if (pipe2(fds, O_CLOEXEC) != 0) {
        r.out = std::string("pipe: ") + strerror(errno);
        r.status = -1;
        return r;
    }
    std::string pid_text = std::to_string(pid);
    pid_t child = fork();
    if (child == 0) {
        setpgid(0, 0);
        int devnull = open("/dev/null", O_RDONLY);
        if (devnull >= 0) dup2(devnull, 0);
        dup2(fds[1], 1);
        dup2(fds[1], 2);
        unsetenv("LD_PRELOAD");
        sigset_t none;
        sigemptyset(&none);
        sigprocmask(SIG_SETMASK, &none, nullptr);
        signal(SIGINT, SIG_DFL);
        // Only libc's symbols are read (after the attach, by the script):
        // reading every library's (libtorch's: hundreds of MB) would keep the
        // process stopped for seconds.
        execl(gdb.c_str(), "gdb", "-batch", "-nx", "-q", "-iex", "set auto-solib-add off", "-iex",
              "set debug-file-directory /nonexistent", "-p", pid_text.c_str(), "-x", script.c_str(),
              static_cast<char*>(nullptr));
        _exit(127);
    }
    close(fds[1]);
    if (child < 0) {
        close(fds[0]);
        r.out = std::string("fork: ") + strerror(errno);
        r.status = -1;
        return r;
    }
    setpgid(child, child);
    auto start = std::chrono::steady_clock::now();
    // gdb takes a SIGINT only while `continue` waits for the malloc entry
    // (between the script's MSMS_WAITING and MSMS_STOPPED lines): one that
    // comes while gdb still attaches and reads libc's symbols is lost, gdb
    // went on into that wait, and the last resort below killed it there,
    // with its breakpoints still in malloc, free, calloc and realloc: the
    // process, "left untouched", died of SIGTRAP at its next malloc. So the
    // interrupt waits for the wait, and is sent again until gdb stops.
    int stage = 0;  // 1: interrupt wanted, 2: SIGKILL sent
    bool interrupt_sent = false;
    std::chrono::steady_clock::time_point sent_at{};
    char buf[4096];
    for (;;) {
        struct pollfd p = {fds[0], POLLIN, 0};
        int n = poll(&p, 1, 100);
        if (n > 0) {
            ssize_t got = read(fds[0], buf, sizeof(buf));
            if (got > 0) {
                r.out.append(buf, static_cast<size_t>(got));
                continue;
            }
            if (got == 0) break;
            if (errno != EINTR) break;
        }
        auto now = std::chrono::steady_clock::now();
        double waited = std::chrono::duration<double>(now - start).count();
        if (stage == 0 && cancellable && g_stop_signal) {
            r.cancelled = true;  // as at the timeout: gdb stops waiting and detaches
            stage = 1;
            start = now - std::chrono::seconds(timeout_s);
        } else if (stage == 0 && waited > timeout_s) {
            r.timed_out = true;
            stage = 1;
        }
        if (stage == 1) {
            bool waiting = r.out.find("MSMS_WAITING\n") != std::string::npos;
            bool stopped = r.out.find("MSMS_STOPPED\n") != std::string::npos;
            if (stopped) {
                // Past the wait (the calls into the process run): one
                // SIGINT ends the call that does not come back.
                if (!interrupt_sent) kill(child, SIGINT);
                interrupt_sent = true;
            } else if (waiting && (!interrupt_sent || now - sent_at > std::chrono::milliseconds(500))) {
                kill(child, SIGINT);
                interrupt_sent = true;
                sent_at = now;
            }
            if (waited > timeout_s + kKillAfterS) {
                kill(child, SIGKILL);  // gdb hangs: the last resort
                stage = 2;
            }
        }
    }
    close(fds[0]);
    int st = 0;
    while (waitpid(child, &st, 0) < 0 && errno == EINTR) {
    }
    r.status = st;
    if (stage == 2) {
        // Killed inside its wait for a malloc-family call, gdb leaves its
        // breakpoints in the process's code: the next call would kill it.
        r.killed = true;
        r.repair = remove_left_breakpoints(pid);
    }
    return r;
}

std::string common_script() {
    return "set pagination off\nset confirm off\nset width 0\nset height 0\nset breakpoint pending off\n"
           "set print thread-events off\nset print inferior-events off\n"
           // the program's own signals go on to it as before
           "handle all nostop noprint pass\nhandle SIGINT stop print nopass\n"
           "sharedlibrary libc\\.so\\.6\n"
           // entries of the malloc family: the thread stopped there holds no
           // allocator lock, so dlopen may allocate
           "break *malloc\nbreak *free\nbreak *calloc\nbreak *realloc\n";
}

// The process's entry point (AT_ENTRY of /proc/PID/auxv): code that never
// runs again once the program started, where the calls below return.
uint64_t entry_point(pid_t pid) {
    int fd = open(("/proc/" + std::to_string(pid) + "/auxv").c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return 0;
    uint64_t kv[2], entry = 0;
    while (read(fd, kv, sizeof(kv)) == static_cast<ssize_t>(sizeof(kv)) && kv[0] != 0)
        if (kv[0] == 9) entry = kv[1];  // AT_ENTRY
    close(fd);
    return entry;
}

// Calls into the stopped thread without gdb's inferior calls: gdb saves and
// restores the whole register file around those, and on some machines
// (kernel 6.x with AMX state, gdb 13) it cannot write the extended state
// back ("Couldn't write extended state status: Bad address"), which left
// the process broken. The thread is stopped at the entry of a malloc-family
// function, where the SysV ABI keeps no vector or x87 register live: only
// the general registers are saved, set for each call and restored. The
// strings go below the red zone of the thread's stack; each call returns to
// the program's entry point, where a temporary breakpoint stops it.
class ThreadCalls {
public:
    ThreadCalls(uint64_t ret, const std::vector<std::string>& strings) : ret_(hex(ret)) {
        size_t total = 0;
        for (auto& t : strings) total += (t.size() + 16) / 16 * 16;
        // the area: below the red zone (128 bytes) and a margin
        s_ = "set $msms_area = ((unsigned long)$rsp - " + std::to_string(total + 512) + ") & ~(unsigned long)15\n";
        size_t off = 0;
        for (auto& t : strings) {
            s_ += "set {char[" + std::to_string(t.size() + 1) + "]}($msms_area + " + std::to_string(off) + ") = " +
                  quoted(t) + "\n";
            at_.push_back("($msms_area + " + std::to_string(off) + ")");
            off += (t.size() + 16) / 16 * 16;
        }
    }
    static std::string save() {
        std::string s;
        for (const char* r : kRegs) s += std::string("set $msms_o_") + r + " = $" + r + "\n";
        return s;
    }
    static std::string restore() {
        std::string s;
        for (const char* r : kRegs) s += std::string("set $") + r + " = $msms_o_" + r + "\n";
        return s;
    }
    // The address of the i-th string, as a gdb expression.
    const std::string& str(size_t i) const { return at_[i]; }
    const std::string& setup() const { return s_; }
    // fn(args...): the result in $rax afterwards; a call that did not come
    // back (gdb interrupted) prints MSMS_CALL_INTERRUPTED and ends the script.
    std::string call(const std::string& fn, const std::vector<std::string>& args) const {
        static const char* kArgs[] = {"rdi", "rsi", "rdx", "rcx", "r8", "r9"};
        std::string s = "set $rsp = $msms_area - 8\nset *(unsigned long*)$rsp = " + ret_ + "\n";
        for (size_t i = 0; i < args.size() && i < 6; ++i) s += std::string("set $") + kArgs[i] + " = " + args[i] + "\n";
        s += "set $rip = (unsigned long)(" + fn + ")\ntbreak *" + ret_ + "\ncontinue\n";
        s += "if $rip != " + ret_ + "\nprintf \"MSMS_CALL_INTERRUPTED\\n\"\nquit\nend\n";
        return s;
    }

private:
    static std::string hex(uint64_t v) {
        char b[32];
        snprintf(b, sizeof(b), "0x%llx", static_cast<unsigned long long>(v));
        return b;
    }
    static constexpr const char* kRegs[] = {"rax", "rbx", "rcx", "rdx", "rsi", "rdi", "rbp", "rsp", "r8",
                                            "r9",  "r10", "r11", "r12", "r13", "r14", "r15", "rip", "eflags"};
    std::string ret_, s_;
    std::vector<std::string> at_;
};

// The script's frame: waits for a thread at a malloc-family entry, runs
// `body` there with the registers saved, restores them and detaches.
std::string at_malloc_entry(const std::string& body) {
    std::string s = common_script();
    // (the markers around the wait: run_gdb interrupts gdb only there)
    s += "printf \"MSMS_WAITING\\n\"\ncontinue\nprintf \"MSMS_STOPPED\\n\"\ndelete\n";
    s += "if $rip == (unsigned long)malloc || $rip == (unsigned long)free || $rip == (unsigned long)calloc || "
         "$rip == (unsigned long)realloc\n";
    s += ThreadCalls::save() + body + ThreadCalls::restore();
    s += "else\nprintf \"MSMS_NOT_STOPPED\\n\"\nend\ndetach\nquit\n";
    return s;
}

std::string write_script(const std::string& dir, const std::string& name, const std::string& text, std::string& err) {
    std::string path = dir + "/" + name;
    // Relative to the session folder opened without following a link (#29 item 4).
    int dfd = open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    int fd = dfd < 0 ? -1 : openat(dfd, name.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    int open_errno = errno;
    if (dfd >= 0) close(dfd);
    if (fd < 0) {
        err = "cannot write " + path + ": " + strerror(open_errno);
        return "";
    }
    ssize_t w = write(fd, text.data(), text.size());
    close(fd);
    if (w != static_cast<ssize_t>(text.size())) {
        err = "cannot write " + path;
        return "";
    }
    return path;
}

// gdb killed (run_gdb): what became of the process, in words; "" if gdb
// was not killed.
std::string killed_gdb(pid_t pid, const GdbRun& r) {
    if (!r.killed || !alive(pid)) return "";
    std::string p = "pid " + std::to_string(pid);
    std::string head = p + ": gdb did not stop within " + std::to_string(static_cast<int>(kKillAfterS)) +
                       " s of being interrupted and was killed; ";
    if (!r.repair.why.empty())
        return head + "the breakpoints it had set in malloc, free, calloc and realloc could not be checked or taken "
                      "out (" + r.repair.why + "): " + p + " may stop with SIGTRAP at its next call of one of them";
    if (r.repair.removed)
        return head + "the " + std::to_string(r.repair.removed) + " breakpoint(s) it left in malloc, free, calloc "
                      "and realloc were taken out (their first bytes written back from libc.so.6): not attached, " +
               p + " runs on";
    return head + "it left no breakpoint: not attached, " + p + " runs on";
}

// How the process ended while gdb held it, in the words of the run's
// summary ("exited with code 0", "killed by signal 6 (SIGABRT)"), from what
// gdb said of it; "" if gdb said nothing.
std::string ended_under_gdb(const std::string& o) {
    const std::string killed = "\nProgram terminated with signal SIG";
    if (size_t at = o.find(killed); at != std::string::npos) {
        size_t b = at + killed.size(), e = o.find_first_of(",\n", b);
        std::string name = o.substr(b, e == std::string::npos ? std::string::npos : e - b);
        for (int sig = 1; sig < NSIG; ++sig)
            if (const char* abbrev = sigabbrev_np(sig); abbrev && name == abbrev) return killed_by_signal(sig);
        return "killed by signal SIG" + escape_controls(name);
    }
    if (o.find(") exited normally]") != std::string::npos) return "exited with code 0";
    const std::string code = ") exited with code ";  // (gdb writes it in octal: 012 is 10)
    if (size_t at = o.find(code); at != std::string::npos) {
        unsigned long n = strtoul(o.c_str() + at + code.size(), nullptr, 8);
        return "exited with code " + std::to_string(n);
    }
    return "";
}

// What went wrong, from gdb's output (before our marker lines).
std::string gdb_failure(pid_t pid, const GdbRun& r) {
    const std::string& o = r.out;
    std::string p = "pid " + std::to_string(pid);
    if (std::string k = killed_gdb(pid, r); !k.empty()) return "cannot attach to " + k;
    if (o.find("ptrace: Operation not permitted") != std::string::npos)
        return "cannot attach to " + p + ": ptrace is not permitted; " + ptrace_hint();
    if (o.find("ptrace: No such process") != std::string::npos || !alive(pid)) {
        if (std::string how = ended_under_gdb(o); !how.empty())
            return p + (how.rfind("killed", 0) == 0 ? " was " : " ") + how + " during the attach (nothing was collected)";
        return p + " exited during the attach (nothing was collected)";
    }
    if (o.find("MSMS_CALL_INTERRUPTED") != std::string::npos)
        return "cannot attach to " + p + ": loading the agent into it did not finish within the attach timeout "
               "(MSMEMSCOPE_ATTACH_TIMEOUT_S); the call was left running in it";
    if (o.find("MSMS_NO_ENTRY") != std::string::npos)
        return "cannot attach to " + p + ": the agent loaded into it has no msms_agent_attach_running (another "
               "msmemscope's agent?)";
    if (r.timed_out)
        return p + " made no call to malloc, free, calloc or realloc within the attach timeout (it may be "
                   "blocked or sleeping): not attached, it runs on untouched; try again while it works";
    std::string last;
    std::istringstream in(o);
    for (std::string line; std::getline(in, line);)
        if (!trim(line).empty() && line.find("MSMS_") == std::string::npos) last = trim(line);
    return "cannot attach to " + p + ": gdb failed" + (last.empty() ? "" : " (" + escape_controls(last) + ")");
}

}  // namespace

std::string check_target(pid_t pid) {
    std::string p = "pid " + std::to_string(pid);
    if (pid == getpid()) return "--attach: " + p + " is msmemscope itself";
    if (kill(pid, 0) != 0 && errno == ESRCH) return "--attach: no process with pid " + std::to_string(pid);
    struct stat st;
    std::string proc = "/proc/" + std::to_string(pid);
    if (stat(proc.c_str(), &st) != 0) return "--attach: no process with pid " + std::to_string(pid);
    if (!alive(pid)) return "--attach: " + p + " has exited (a zombie waiting for its parent)";
    if (geteuid() != 0 && st.st_uid != geteuid())
        return "--attach: " + p + " belongs to user " + user_name(st.st_uid) + ", not to you (" +
               user_name(geteuid()) + "); only your own processes can be attached (root may attach to any)";
    // Reading another process's maps needs the same permission as ptrace.
    int mfd = open((proc + "/maps").c_str(), O_RDONLY | O_CLOEXEC);
    if (mfd < 0) {
        int e = errno;
        if (e == ENOENT) return "--attach: no process with pid " + std::to_string(pid);
        return "--attach: cannot read /proc/" + std::to_string(pid) + "/maps (" + strerror(e) +
               "): ptrace is not permitted; " + ptrace_hint();
    }
    std::string maps;
    char chunk[65536];
    for (ssize_t n; (n = read(mfd, chunk, sizeof(chunk))) != 0;) {
        if (n < 0) {
            if (errno == EINTR) continue;
            int e = errno;
            close(mfd);
            return "--attach: cannot read /proc/" + std::to_string(pid) + "/maps (" + strerror(e) +
                   "): ptrace is not permitted; " + ptrace_hint();
        }
        maps.append(chunk, static_cast<size_t>(n));
    }
    close(mfd);
    if (maps.empty()) return "--attach: " + p + " has no memory map (a kernel thread?)";
    if (maps.find("libmsmemscope_agent.so") != std::string::npos)
        return "--attach: " + p + " is already being profiled (the msmemscope agent is loaded in it: started "
               "under msmemscope, by msmemscope.start(), or attached before; one attach per process lifetime)";
    bool libc = maps.find("/libc.so.6") != std::string::npos;
    bool ld = maps.find("/ld-linux") != std::string::npos;
    if (!libc || !ld)
        return "--attach: " + p + " is not a dynamically linked glibc program (no libc.so.6 and ld-linux in "
               "/proc/" + std::to_string(pid) + "/maps: static, or another C library such as musl); msmemscope "
               "can profile it only from its start, not by attaching";
    return "";
}

std::string inject(pid_t pid, const Injection& what, unsigned timeout_s, std::string& report) {
    std::string gdb = find_gdb();
    if (gdb.empty())
        return "--attach needs gdb, which is not on PATH (Debian/Ubuntu: apt-get install gdb)";
    uint64_t ret = entry_point(pid);
    if (ret == 0) return "cannot attach to pid " + std::to_string(pid) + ": cannot read its entry point from /proc";
    ThreadCalls c(ret, {what.agent, "msms_agent_attach_running", what.dir, what.options, what.libs, what.pypath,
                        "msms_agent_attach_report"});
    std::string body = c.setup();
    body += c.call("dlopen", {c.str(0), "0x102"}) + "set $msms_h = $rax\n";
    body += "if $msms_h == 0\n" + c.call("dlerror", {}) +
            "printf \"MSMS_DLOPEN_FAILED %s\\n\", (char*)$rax\nelse\n";
    body += c.call("dlsym", {"$msms_h", c.str(1)}) + "set $msms_f = $rax\n";
    body += "if $msms_f == 0\nprintf \"MSMS_NO_ENTRY\\n\"\nelse\n";
    body += c.call("$msms_f", {c.str(2), c.str(3), c.str(4), c.str(5), std::to_string(what.steps),
                               std::to_string(getpid())}) +
            "printf \"MSMS_RC=%d\\n\", (int)$rax\n";
    body += c.call("dlsym", {"$msms_h", c.str(6)}) + "set $msms_r = $rax\n";
    body += "if $msms_r != 0\n" + c.call("$msms_r", {}) +
            "printf \"MSMS_REPORT\\n%sMSMS_REPORT_END\\n\", (char*)$rax\nend\n";
    body += "end\nend\n";
    std::string s = at_malloc_entry(body);
    std::string err;
    std::string script = write_script(what.dir, "attach.gdb", s, err);
    if (script.empty()) return err;
    GdbRun r = run_gdb(gdb, pid, script, timeout_s, true);
    unlink(script.c_str());
    if (size_t b = r.out.find("MSMS_REPORT\n"); b != std::string::npos) {
        size_t e = r.out.find("MSMS_REPORT_END", b);
        if (e != std::string::npos) report = r.out.substr(b + 12, e - b - 12);
    }
    size_t at = r.out.find("MSMS_RC=");
    if (at != std::string::npos) {
        int rc = atoi(r.out.c_str() + at + 8);
        if (rc == 0) return "";
        if (rc == EALREADY) return "--attach: pid " + std::to_string(pid) + " is already being profiled";
        return "cannot attach to pid " + std::to_string(pid) + ": the agent could not open its capture in " +
               what.dir + ": " + strerror(rc);
    }
    at = r.out.find("MSMS_DLOPEN_FAILED ");
    if (at != std::string::npos) {
        std::string why = r.out.substr(at + 19);
        why = trim(why.substr(0, why.find('\n')));
        return "cannot attach to pid " + std::to_string(pid) + ": loading the agent into it failed: " +
               escape_controls(why);
    }
    if (r.cancelled && !r.killed && r.out.find("MSMS_CALL_INTERRUPTED") == std::string::npos && alive(pid))
        return kCancelled;
    return gdb_failure(pid, r);
}

std::string force_detach(pid_t pid, const std::string& agent, unsigned timeout_s) {
    std::string gdb = find_gdb();
    if (gdb.empty()) return "gdb is not on PATH";
    uint64_t ret = entry_point(pid);
    if (ret == 0) return "cannot read its entry point from /proc";
    ThreadCalls c(ret, {agent, "msms_agent_attach_detach_now"});
    std::string body = c.setup();
    // RTLD_NOW|RTLD_NOLOAD: the one loaded
    body += c.call("dlopen", {c.str(0), "0x6"}) + "set $msms_h = $rax\n";
    body += "if $msms_h != 0\n" + c.call("dlsym", {"$msms_h", c.str(1)}) + "set $msms_f = $rax\n";
    body += "if $msms_f != 0\n" + c.call("$msms_f", {}) + "end\nend\n";
    body += "printf \"MSMS_DETACHED\\n\"\n";
    std::string s = at_malloc_entry(body);
    char tmpl[] = "/tmp/msmemscope_detach_XXXXXX";
    int fd = mkstemp(tmpl);
    if (fd < 0) return std::string("mkstemp: ") + strerror(errno);
    ssize_t w = write(fd, s.data(), s.size());
    close(fd);
    if (w != static_cast<ssize_t>(s.size())) return "cannot write the gdb script";
    GdbRun r = run_gdb(gdb, pid, tmpl, timeout_s);
    unlink(tmpl);
    if (r.out.find("MSMS_DETACHED") != std::string::npos) return "";
    return gdb_failure(pid, r);
}

}  // namespace attach

namespace {

void on_attach_signal(int sig) {
    if (attach::g_stop_signal) {
        supervisor::abandon(sig);  // a second one: stop writing, say what is incomplete
        return;
    }
    attach::g_stop_signal = sig;
}

// The writer (the agent in the target) holds an exclusive lock on its
// capture while it writes; gone: the stream is complete.
bool writer_gone(const std::string& capture) {
    int fd = open(capture.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0) return true;
    bool gone = flock(fd, LOCK_EX | LOCK_NB) == 0;
    if (gone) flock(fd, LOCK_UN);
    close(fd);
    return gone;
}

}  // namespace

// The attach timeout (seconds gdb waits for the process to enter the malloc
// family): MSMEMSCOPE_ATTACH_TIMEOUT_S, default 60.
static unsigned attach_timeout_s() {
    const char* t = getenv("MSMEMSCOPE_ATTACH_TIMEOUT_S");
    unsigned long long n = 0;
    if (t && parse_uint(t, n) && n > 0 && n < 86400) return static_cast<unsigned>(n);
    return 60;
}

// How long the agent's thread has to answer a detach request before the
// host detaches through gdb (seconds): MSMEMSCOPE_DETACH_TIMEOUT_S, default
// 30 (a test makes it short instead of waiting 30 s for each step).
static unsigned detach_timeout_s() {
    const char* t = getenv("MSMEMSCOPE_DETACH_TIMEOUT_S");
    unsigned long long n = 0;
    if (t && parse_uint(t, n) && n > 0 && n < 86400) return static_cast<unsigned>(n);
    return 30;
}

int Session::attach(pid_t pid) {
    if (std::string why = attach::check_target(pid); !why.empty()) {
        std::cerr << "msmemscope: error: " << why << "\n";
        return 2;
    }
    std::vector<std::string> libs;
    std::string err;
    agent_library_paths(libs, err);
    if (!err.empty()) {
        std::cerr << "msmemscope: error: " << err << "\n";
        return 2;
    }
    if (std::string why = make_dirs(cfg_.output); !why.empty()) {
        std::cerr << "msmemscope: error: --output: cannot create or write '" << cfg_.output << "': " << why << "\n";
        return 2;
    }
    if (std::string why = unsafe_output_reason(cfg_.output); !why.empty()) {
        std::cerr << "msmemscope: error: --output: '" << cfg_.output << "' is not safe for a run as root: " << why
                  << "; give a folder that only root can write\n";
        return 2;
    }
    remove_stale_sessions(cfg_.output);
    std::string tmpl = cfg_.output + "/.msmemscope_session_XXXXXX";
    if (!mkdtemp(tmpl.data())) {
        std::cerr << "msmemscope: error: --output: cannot create a session folder in '" << cfg_.output
                  << "': " << strerror(errno) << "\n";
        return 2;
    }
    dir_ = fs::absolute(tmpl).lexically_normal().string();
    own_dir_ = true;
    if (std::string why = write_session_owner(dir_); !why.empty()) {
        std::cerr << "msmemscope: error: --output: " << why << "\n";
        return 2;
    }
    attach::Injection what;
    what.agent = fs::absolute(libs[0]).lexically_normal().string();
    what.dir = dir_;
    // Collection starts now, whatever --collect-mode says; children the
    // process forks from now on are not followed (their parent's detach
    // could not end them).
    std::string opts = cfg_.agent_options();
    for (auto [from, to] : {std::pair<std::string, std::string>{";follow_fork=1", ";follow_fork=0"},
                            {";collect_mode=deferred", ";collect_mode=immediate"}})
        if (size_t at = opts.find(from); at != std::string::npos) opts.replace(at, from.size(), to);
    what.options = opts;
    for (size_t i = 1; i < libs.size(); ++i) what.libs += (what.libs.empty() ? "" : "\n") + libs[i];
    {
        std::string home = fs::path(Registry::agent_dir()).parent_path().parent_path().string();
        std::string why;
        std::string path = python_boot_path(home, dir_, why);
        if (size_t colon = path.rfind(':'); colon != std::string::npos) what.pypath = path.substr(colon + 1);
    }
    what.steps = cfg_.attach_steps;

    struct sigaction on{}, old_int{}, old_term{}, old_hup{};
    on.sa_handler = on_attach_signal;
    on.sa_flags = SA_RESTART;
    sigemptyset(&on.sa_mask);
    sigaction(SIGINT, &on, &old_int);
    sigaction(SIGTERM, &on, &old_term);
    sigaction(SIGHUP, &on, &old_hup);
    auto restore = [&] {
        sigaction(SIGINT, &old_int, nullptr);
        sigaction(SIGTERM, &old_term, nullptr);
        sigaction(SIGHUP, &old_hup, nullptr);
    };

    std::string installed;
    if (std::string why = attach::inject(pid, what, attach_timeout_s(), installed); !why.empty()) {
        restore();
        if (why == attach::kCancelled) {
            int sig = attach::g_stop_signal;
            const char* abbrev = sigabbrev_np(sig);
            std::cerr << "msmemscope: --attach: interrupted by "
                      << (abbrev ? std::string("SIG") + abbrev : "signal " + std::to_string(sig)) << " while waiting for pid " << pid
                      << " to call malloc, free, calloc or realloc: not attached, it runs on untouched\n";
            return 128 + sig;
        }
        std::cerr << "msmemscope: error: " << why << "\n";
        return 2;
    }
    // Each collector's hooks went in by GOT patching (README "Attach to a
    // running program"); one that did not is named, the others collect.
    std::vector<std::string> hooked;
    for (size_t b = 0; b < installed.size();) {
        size_t e = installed.find('\n', b);
        std::string line = escape_controls(installed.substr(b, e == std::string::npos ? std::string::npos : e - b));
        b = e == std::string::npos ? installed.size() : e + 1;
        if (line.rfind("failed ", 0) == 0)
            say_warning("--attach: " + line.substr(7) + "; collecting without it");
        else if (line.rfind("hooks ", 0) == 0)
            hooked.push_back(line.substr(6, line.find(':') - 6));
    }
    if (std::find_if(hooked.begin(), hooked.end(), [](const std::string& n) { return n.find("cuda") != std::string::npos; }) !=
        hooked.end())
        say_warning("--attach: a CUDA runtime that started before the attach found its driver functions then "
                    "(cuGetProcAddress): its allocations are not seen; calls a program makes to libcuda itself are");
    root_pid_ = pid;
    // This line and the warnings above come before the process's log opens
    // (at the first scan): kept as console notes, the log repeats them
    // (console_notes.h).
    say_status("msmemscope: attached to pid " + std::to_string(pid) + "; " +
               (cfg_.attach_steps ? "detaching after " + std::to_string(cfg_.attach_steps) + " step(s)"
                : cfg_.attach_for_s ? "detaching after " + std::to_string(cfg_.attach_for_s) + " s"
                                    : std::string("Ctrl-C detaches")) +
               " (the process goes on running)");

    using clock = std::chrono::steady_clock;
    auto start = clock::now();
    bool requested = false, forced = false;
    clock::time_point requested_at{};
    bool exited = false;
    for (;;) {
        scan();
        bool all_gone = !running_.empty();
        for (auto& r : running_) all_gone = all_gone && writer_gone(r.capture);
        if (all_gone) break;
        if (!attach::alive(pid)) {
            exited = true;
            break;
        }
        auto now = clock::now();
        if (!requested && (attach::g_stop_signal || (cfg_.attach_for_s && now - start >= std::chrono::seconds(cfg_.attach_for_s)))) {
            std::string name = "detach." + std::to_string(pid);
            int dfd = open(dir_.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);  // #29 item 4
            int fd = dfd < 0 ? -1 : openat(dfd, name.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
            if (fd >= 0) close(fd);
            if (dfd >= 0) close(dfd);
            requested = true;
            requested_at = now;
        }
        // These lines come while the process's log is written by its worker:
        // said_during_run_ takes them to the log (a reader of the log alone
        // learns why the detach took long, or why the outputs are incomplete).
        const unsigned answer_s = detach_timeout_s();
        if (requested && !forced && now - requested_at > std::chrono::seconds(answer_s)) {
            // The agent's thread did not answer: detach from a malloc entry.
            forced = true;
            say_during_run(ReportLine::Warning, "pid " + std::to_string(pid) +
                                                    " did not answer the detach request within " +
                                                    std::to_string(answer_s) + " s; detaching through gdb");
            if (std::string why = attach::force_detach(pid, what.agent, attach_timeout_s()); !why.empty())
                say_during_run(ReportLine::Warning, why);
        }
        if (forced && now - requested_at > std::chrono::seconds(answer_s + 2 * attach_timeout_s() + 30)) {
            say_during_run(ReportLine::Error, "pid " + std::to_string(pid) +
                                                  " still holds its capture; giving up (the outputs are incomplete)");
            supervisor::abandon(SIGTERM);
            break;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    if (!exited && attach::alive(pid)) root_status_ = "detached (it goes on running)";
    scan();
    join_all();
    restore();
    for (auto& s : summaries_)
        if (s.pid == static_cast<uint32_t>(pid))
            s.report.insert(s.report.begin(),
                            "  attached to a running process: host and driver blocks allocated before the attach "
                            "are unknown (their frees are ignored); CPU tensors alive at the attach are shadow "
                            "rows");
    return 0;
}

}  // namespace msms
