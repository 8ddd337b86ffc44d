#include "process_run.h"

#include "live/live_state.h"

#include <spdlog/sinks/basic_file_sink.h>
#include <spdlog/spdlog.h>

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>
#include <utility>
#include <vector>

#include "api_words.h"
#include "capture_disk.h"
#include "console_notes.h"
#include "oom_watch.h"
#include "plugin_cli.h"
#include "process_summary_json.h"
#include "program_status.h"
#include "provisional_step.h"
#include "run_processes.h"
#include "step_filter.h"
#include "step_gap.h"
#include "util/json.h"
#include "supervisor.h"
#include "symbolizer.h"
#include "util/output_dir.h"
#include "util/text.h"
#include "util/text.h"

namespace fs = std::filesystem;

namespace msms {

bool replaced_by_exec(const ProcessSummary& s) {
    return s.replaced_by_exec || s.attach_exec || s.exec_unfollowed ||
           s.end_kind == static_cast<uint32_t>(capture::EndKind::Exec);
}

const char kEndStatusUnknown[] =
    "exited, exit status not known (msmemscope's Python API ends the recording at the interpreter's exit, before "
    "the status is set)";

std::string unrecorded_exec_words(const ProcessSummary& s) {
    if (s.attach_exec) return "replaced by exec, which an attach does not follow (the new image runs on unrecorded)";
    if (s.exec_unfollowed && !s.replaced_by_exec)
        return "replaced by exec without the agent (an exec the agent did not record, and no later capture of this "
               "pid came: a static or set-user-ID program, or an environment that does not preload the agent)";
    if (s.replaced_by_exec || s.end_kind != static_cast<uint32_t>(capture::EndKind::Exec)) return "";
    std::string words = "replaced by exec of " + escape_controls(s.exec_path) + " without the agent ";
    if (s.end_code == capture::kExecKeepsAgent)
        return words + "(its environment preloads the agent, but the new program did not load it: a static or "
                       "set-user-ID program)";
    return words + "(the new program's environment does not preload it, e.g. env -i)";
}

bool end_unrecorded(const ProcessSummary& s) {
    return s.end_kind == static_cast<uint32_t>(capture::EndKind::Unknown) && !s.end_corrupt && !s.ended_normally &&
           !s.attach_exec && !s.facts.exec_replaced;
}

bool capture_name_parts(const std::string& path, uint32_t& pid, uint32_t& index) {
    std::string base = fs::path(path).filename().string();
    size_t a = base.find('.'), b = base.find('.', a + 1);
    if (a == 0 || a == std::string::npos || b == std::string::npos || b == a + 1 ||
        base.compare(b, std::string::npos, ".msmcap") != 0)
        return false;
    auto digits = [](const std::string& s) { return s.find_first_not_of("0123456789") == std::string::npos; };
    std::string p = base.substr(0, a), n = base.substr(a + 1, b - a - 1);
    if (!digits(p) || !digits(n)) return false;
    pid = static_cast<uint32_t>(std::strtoul(p.c_str(), nullptr, 10));
    index = static_cast<uint32_t>(std::strtoul(n.c_str(), nullptr, 10));
    return true;
}

CaptureIdentity capture_identity(const std::string& path) {
    int fd = open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) return {};
    capture::CaptureHeader h;
    memset(static_cast<void*>(&h), 0, sizeof(h));
    ssize_t n = pread(fd, static_cast<void*>(&h), sizeof(h), 0);
    close(fd);
    if (n != static_cast<ssize_t>(sizeof(h)) || memcmp(h.magic, capture::kMagic, sizeof(capture::kMagic)) != 0 ||
        h.fixed_sum != capture::fixed_sum(&h))
        return {};
    CaptureIdentity id;
    if (capture::has_start_ticks(&h)) id.start_ticks = h.start_ticks;
    if (capture::has_forked_from(&h)) id.forked_from = h.forked_from;
    return id;
}

std::string awaited_exec_words(const ProcessSummary& s) {
    return "replaced by exec of " + escape_controls(s.exec_path) + ", waiting for the new program's agent";
}

std::shared_ptr<spdlog::logger> make_process_log(int fd, const Config& cfg) {
    auto log = std::make_shared<spdlog::logger>("msmemscope", std::make_shared<FdLogSink>(fd));
    static const spdlog::level::level_enum kLevels[] = {spdlog::level::debug, spdlog::level::info,
                                                        spdlog::level::warn, spdlog::level::err};
    log->set_level(kLevels[cfg.log_file_threshold()]);
    log->flush_on(spdlog::level::info);
    return log;
}

void log_console_notes(spdlog::logger& log) {
    const spdlog::level::level_enum threshold = log.level();
    for (auto& note : console_notes()) {
        if (note.kind == ConsoleNote::Out) {
            log.set_level(std::min(threshold, spdlog::level::info));
            log.log(note.when, spdlog::source_loc{}, spdlog::level::info, note.text);
            log.set_level(threshold);
            continue;
        }
        log.log(note.when, spdlog::source_loc{},
                note.kind == ConsoleNote::Error ? spdlog::level::err : spdlog::level::warn, note.text);
    }
}

std::string timestamp_string(uint64_t wall_ns) {
    time_t secs = static_cast<time_t>(wall_ns / 1000000000ull);
    struct tm tm;
    localtime_r(&secs, &tm);
    char buf[32];
    strftime(buf, sizeof(buf), "%Y%m%d%H%M%S", &tm);
    return buf;
}

std::string make_dirs(const std::string& path) {
    std::error_code ec;
    fs::create_directories(path, ec);
    if (ec) return ec.message();
    if (access(path.c_str(), W_OK) != 0) return "not writable";
    return "";
}

std::string make_fresh_dir(const std::string& path, std::string& error) {
    constexpr int kVariants = 100;
    for (int n = 1; n <= kVariants; ++n) {
        std::string p = n == 1 ? path : path + "_" + std::to_string(n);
        if (mkdir(p.c_str(), 0777) == 0) return p;  // the umask applies (main keeps o+w out of it)
        if (errno != EEXIST) {
            error = p + ": cannot create the output folder: " + strerror(errno);
            return "";
        }
    }
    error = path + ": cannot create the output folder: it and " + std::to_string(kVariants - 1) +
            " numbered variants (_2, _3, ...) exist";
    return "";
}

std::string valid_rank(const std::string& rank) {
    if (rank.empty() || rank.size() > 9) return "";
    for (char c : rank)
        if (c < '0' || c > '9') return "";
    return rank;
}

namespace {

// A sink reports only that it failed (the plugin ABI has no error text for
// on_event): say what limit the output folder met, when one is evident.
std::string output_limit_reached(const std::string& dir) {
    struct rlimit rl;
    if (getrlimit(RLIMIT_FSIZE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY) {
        std::error_code ec;
        for (fs::recursive_directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
            std::error_code ec2;
            if (it->is_regular_file(ec2) && it->file_size(ec2) >= rl.rlim_cur)
                return " (" + it->path().filename().string() + " reached the file-size limit, ulimit -f)";
        }
    }
    struct statvfs sv;
    if (statvfs(dir.c_str(), &sv) == 0 && static_cast<uint64_t>(sv.f_bavail) * sv.f_frsize < (1u << 20))
        return " (the disk is full)";
    return "";
}

// --steps kept failures outside the selected steps (step_filter.h): the
// user asked for other steps, so the output says why it holds them, and
// that the figures count the memory live at each failure (step_gap.h).
std::string failures_outside_text(uint32_t pid, const std::vector<std::string>& where) {
    std::vector<std::string> places;
    for (auto& w : where)
        if (std::find(places.begin(), places.end(), w) == places.end()) places.push_back(w);
    std::string in;
    for (size_t i = 0; i < places.size(); ++i) in += (i ? ", " : "") + places[i];
    const bool one = where.size() == 1;
    return "pid " + std::to_string(pid) + ": --steps: " +
           (one ? std::string("an allocation") : std::to_string(where.size()) + " allocations") +
           " failed for lack of memory outside the selected steps (in " + in + "); " +
           (one ? "its failure is" : "their failures are") + " kept, with the memory live at " +
           (one ? "that moment" : "those moments") + ", which the pools' figures count too";
}

}  // namespace

ProcessRun::ProcessRun(const Config& cfg, const Registry& registry, std::string capture_path)
    : cfg_(cfg), registry_(registry), capture_path_(std::move(capture_path)) {}

std::string ProcessRun::folder_name(const std::string& ts, const std::string& rank) const {
    std::string name = "msmemscope_" + std::to_string(reader_.pid()) + "_" + ts + "_" + cfg_.backend();
    // Only a number may become part of a folder name (valid_rank).
    if (!rank.empty()) name += "_rank" + rank;
    // The same pid again after exec: its own folder, never shared files.
    // (Another process given the same pid: its own name, made fresh.)
    if (follows_exec()) name += "_exec" + std::to_string(summary_.capture_index);
    return name;
}

void ProcessRun::name_rank(Pipeline& pipeline) const {
    std::string rank = rank_.rank();
    pipeline.set_rank(rank);
    run_processes::note_rank(reader_.pid(), rank);  // ranks are told apart on the console
    supervisor::name_process(reader_.pid(), rank);   // (and named by the line after a crash)
}

bool ProcessRun::take_rank(const RawEvent& e) {
    if (e.kind != MSMS_EV_SYSTEM || e.type != MSMS_T_NONE || !e.name_id) return false;
    const std::string* name = reader_.string(e.name_id);
    if (!name || *name != kRankEventName) return false;
    const std::string* attrs = e.attrs_id ? reader_.string(e.attrs_id) : nullptr;
    if (attrs) rank_.note_late(parse_attr_list(*attrs), reader_.pid());
    return true;
}

bool ProcessRun::take_program_warning(const RawEvent& e, spdlog::logger& log) {
    if (e.kind != MSMS_EV_SYSTEM || e.type != MSMS_T_NONE || !e.name_id) return false;
    const std::string* name = reader_.string(e.name_id);
    if (!name || *name != kProgramWarningEventName) return false;
    const std::string* text = e.attrs_id ? reader_.string(e.attrs_id) : nullptr;
    if (!text || text->empty()) return true;
    // The program's text never drives the terminal (escape_controls).
    summary_.warnings.push_back("pid " + std::to_string(reader_.pid()) + ": " + escape_controls(*text));
    log.warn(said(cfg_, summary_.warnings.back()));  // (the console's words: Session::print_summary)
    return true;
}

bool ProcessRun::keep(const RawEvent& e) const {
    if (e.dev_kind == MSMS_DEV_CPU) return cfg_.wants_device_kind("cpu");
    if (e.dev_kind == MSMS_DEV_NPU || e.dev_kind == MSMS_DEV_CUDA) {
        std::string kind = e.dev_kind == MSMS_DEV_NPU ? "npu" : "cuda";
        for (auto& d : cfg_.devices) {
            if (d == kind) return true;
            if (d == kind + ":" + std::to_string(e.dev_id)) return true;
        }
        return false;
    }
    return true;
}

void ProcessRun::convert(const RawEvent& e, Record& r, Symbolizer& sym) {
    msms_event& ev = r.ev;
    ev.kind = e.kind;
    ev.type = e.type;
    ev.timestamp_ns = static_cast<uint64_t>(static_cast<int64_t>(e.ts) + reader_.wall_offset());
    ev.pid = reader_.pid();
    ev.tid = e.tid;
    ev.device_kind = e.dev_kind;
    ev.device_id = e.dev_id;
    ev.ptr = e.ptr;
    ev.size = e.size;
    ev.aux0 = e.aux0;
    ev.aux1 = e.aux1;
    if ((e.kind == MSMS_EV_MALLOC || e.kind == MSMS_EV_FREE) && e.aux1) {
        // the pool's bytes after the event, + 1 (capture_format.h kGeneric)
        ev.pool_total = static_cast<int64_t>(e.aux1 - 1);
        ev.aux1 = 0;
    }
    if (e.kind == MSMS_EV_PY_TRACE && e.aux0)
        ev.aux0 = static_cast<uint64_t>(static_cast<int64_t>(e.aux0) + reader_.wall_offset());
    if (e.name_id) {
        if (const std::string* s = reader_.string(e.name_id)) r.name.assign(*s);
    }
    if (e.attrs_id) {
        if (const std::string* s = reader_.string(e.attrs_id)) r.attrs = parse_attr_list(*s);
    }
    ev.c_stack_id = e.cstack;
    ev.py_stack_id = e.pystack;
    const StackDef* cdef = e.cstack ? reader_.stack(e.cstack) : nullptr;
    if (cdef && cdef->kind == 4) {
        // The allocator's caller, not a C stack (capture_format.h kStack):
        // for analyses only, never written as the row's C stack.
        ev.c_stack_id = 0;
        ev.alloc_caller_id = e.cstack;
        r.caller_ref = sym.text(e.cstack);
    } else if (e.cstack) {
        r.c_ref = sym.text(e.cstack);
    }
    if (e.pystack) r.py_ref = sym.text(e.pystack);
}

void ProcessRun::notify_started(const std::string& error) {
    if (!started_) return;
    auto fn = std::move(started_);
    started_ = nullptr;
    fn(error);
}

std::string ProcessRun::named_for_user(const std::string& output_dir) const {
    if (cfg_.serve_session.empty()) return capture_path_;
    if (!output_dir.empty()) return output_dir;
    // <pid>.<n>.msmcap
    std::string base = fs::path(capture_path_).filename().string();
    return "process " + base.substr(0, base.find('.'));
}

void ProcessRun::run() {
    // Nothing escapes a process's thread: an exception there would end the
    // whole host (std::terminate) and lose every other process's output.
    try {
        run_stream();
    } catch (const std::bad_alloc&) {
        summary_.error = named_for_user(summary_.output_dir) + ": out of memory (the host reached its memory or address-space limit, ulimit -v)";
    } catch (const std::exception& e) {
        summary_.error = named_for_user(summary_.output_dir) + ": internal error: " + e.what();
    }
    notify_started(summary_.error.empty() ? "the capture ended before its pipeline started" : summary_.error);
}

bool ProcessRun::identify(CaptureReader& reader, std::string& error) {
    if (!reader.open(capture_path_, error)) return false;
    summary_.pid = reader.pid();
    summary_.ppid = reader.ppid();
    summary_.command = join(reader.cmdline(), " ");
    uint32_t pid = 0, index = 0;
    if (capture_name_parts(capture_path_, pid, index)) summary_.capture_index = index;
    summary_.start_ticks = reader.start_ticks();
    summary_.forked_from = reader.forked_from();
    return true;
}

void ProcessRun::run_stream() {
    if (!identify(reader_, summary_.error)) return;
    rank_ = ProcessRank(reader_.rank());
    if (std::string rank = reader_.rank(); !rank.empty() && valid_rank(rank).empty()) {
        std::string shown = rank.size() > 40 ? rank.substr(0, 40) + "..." : rank;
        for (auto& ch : shown)
            if (static_cast<unsigned char>(ch) < 0x20 || ch == 0x7f) ch = '?';
        summary_.warnings.push_back("pid " + std::to_string(reader_.pid()) + ": RANK '" + shown +
                                    "' is not a number; the output folder is named without it");
    }
    std::string ts = timestamp_string(reader_.wall_start());
    if (std::string why = make_dirs(cfg_.output); !why.empty()) {
        summary_.error = cfg_.output + ": cannot create the output folder: " + why;
        return;
    }
    // A folder of its own, made here (never one that was there before,
    // where planted links could redirect what is written), and held open:
    // everything in it -- the host's files and every plugin's -- is created
    // O_EXCL|O_NOFOLLOW relative to that descriptor (util/output_dir.h,
    // issue #29 item 4). The folder swapped for a link during the run is
    // never written through; it is reported at the end.
    root_fd_ = open_output_root(cfg_.output, summary_.error);
    if (!root_fd_) {
        summary_.error = "--output: cannot open the output folder: " + summary_.error;
        return;
    }
    // The rank from the target's environment (or a capture given to
    // --replay) names it from the start; one learned later, at the end.
    dir_fd_ = make_fresh_dir_at(root_fd_.get(), cfg_.output, folder_name(ts, valid_rank(reader_.rank())), dir_name_,
                                summary_.error);
    if (!dir_fd_) return;
    std::string dir = cfg_.output + "/" + dir_name_;
    summary_.output_dir = dir;
    std::string why;
    Fd logs_fd(files::open_dir(dir_fd_.get(), "msmemscope_logs", true, why));
    if (!logs_fd) {
        summary_.error = dir + "/msmemscope_logs: cannot create the folder: " + why;
        return;
    }
    if (!files::write_new(dir_fd_.get(), "config.json", config_json() + "\n", why)) {
        summary_.error = dir + "/config.json: cannot write: " + why;
        return;
    }
    RunContext run;
    run.pid = reader_.pid();
    run.output_dir = dir;
    run.output_dir_fd = dir_fd_.get();
    run.timestamp = ts;
    run.config_json = config_json();
    run.command_line = summary_.command;
    try {
        std::string log_name = "msmemscope_" + ts + ".log";
        int log_fd = files::create(logs_fd.get(), log_name, why);
        if (log_fd < 0) throw std::runtime_error(why);
        run.log = make_process_log(log_fd, cfg_);
        summary_.log_file = "msmemscope_logs/" + log_name;
        // A log that cannot be written (full disk) is one more incomplete
        // output, said once in the summary instead of on every line.
        run.log->set_error_handler([this](const std::string& msg) {
            if (log_error_.empty()) log_error_ = msg.empty() ? "cannot write the log file" : msg;
        });
    } catch (const std::exception& e) {
        summary_.error = dir + ": cannot create the log file: " + e.what();
        return;
    }
    // What the console said before this log existed (the configuration's
    // warnings, refused plugins, the run as root, --replay's matches:
    // console_notes.h; in config()'s words for a Python API session).
    log_console_notes(*run.log);
    // What this process's summary warned of before its log existed (RANK).
    for (auto& w : summary_.warnings) run.log->warn(said(cfg_, w));
    run.log->info("profiling pid {} ({}), capture {}", run.pid, run.command_line, capture_path_);
    // Plugins print into the process folder, never into the program's
    // stdout/stderr (supervisor.h; issue #29 item 7).
    if (std::string why = supervisor::redirect_plugin_output(dir, dir_fd_.get()); !why.empty())
        run.log->warn("plugins' stdout and stderr stay the tool's own: {}", why);

    progress::start_run(progress_, dir);
    Pipeline pipeline(cfg_, registry_);
    if (progress_) {
        // Plugins' own progress (ABI 1.2): what each sink is writing.
        pipeline.on_progress([this](const Pipeline::Progress& p) {
            if (p.ended) {
                progress::task_ended(progress_, p.plugin);
                return;
            }
            progress::TaskReport t;
            t.plugin = p.plugin;
            t.what = p.what;
            t.done = p.done;
            t.total = p.total;
            t.unit = p.unit;
            t.estimate = p.estimate;
            progress::task(progress_, t);
        });
    }
    pipeline.set_group_setup_warnings(true);  // said once per run (said_once.h, Session::print_summary)
    name_rank(pipeline);  // the environment's
    pipeline.start(run);
    notify_started("");
    // --live / --live-http: the view's snapshot every second (live/live_state.h).
    std::unique_ptr<live::LiveState> live_view;
    int live_fd = -1;
    auto live_write = [&](bool finished) {
        if (!live_view) return;
        struct timespec now;
        clock_gettime(CLOCK_REALTIME, &now);
        uint64_t ns = static_cast<uint64_t>(now.tv_sec) * 1000000000ull + static_cast<uint64_t>(now.tv_nsec);
        std::string why = live::write_atomic(live_fd, "live.txt", live_view->screen(ns, finished));
        if (why.empty()) why = live::write_atomic(live_fd, "live.json", live_view->snapshot(ns, finished));
        if (!why.empty()) {  // the view stops; the run goes on
            run.log->warn("live view: cannot write {}; the live view stops", why);
            live_view.reset();
        }
    };
    if (!cfg_.live_session.empty()) {
        live_fd = fcntl(dir_fd_.get(), F_DUPFD_CLOEXEC, 0);  // the process folder's own descriptor
        if (live_fd >= 0) {
            live_view = std::make_unique<live::LiveState>(cfg_.live_session, run.pid, run.command_line, [&pipeline] {
                live::Totals t;
                for (auto& [pool, f] : pipeline.device_totals())
                    t[pool] = live::PoolFigures{f.used, std::max(f.peak, f.used)};
                return t;
            });
            if (std::find(cfg_.analyzers.begin(), cfg_.analyzers.end(), "leaks") == cfg_.analyzers.end())
                live_view->set_leaks_off("--analysis does not list leaks");
            else if (!cfg_.steps.empty())
                live_view->set_leaks_off("it does not run with --steps");
            else if (supervisor::excluded("leaks"))
                live_view->set_leaks_off("it crashed in an earlier attempt and was left out");
            pipeline.set_live(live_view.get());
            live_write(false);
        }
    }
    auto live_last = std::chrono::steady_clock::now();
    // (a Python API session's stack notes name config()'s keys: api_words.h)
    Symbolizer sym(reader_, !cfg_.serve_session.empty());
    // The sinks' threads may hold sym's stack texts (Record::py_ref): they
    // end before sym does, also when an exception leaves this function.
    struct StopSinks {
        Pipeline& p;
        ~StopSinks() { p.stop_sinks(); }
    } stop_sinks{pipeline};
    StepFilter steps(cfg_.steps);
    StepGap gap([&pipeline](uint16_t dev_kind, int16_t dev_id, uint16_t type, bool virt, uint64_t ptr) {
        return pipeline.holds_block(dev_kind, dev_id, type, virt, ptr);
    });
    // The pipeline's picture of memory made true again after dropped steps
    // (step_gap.h): shadow rows at time ts. They are the host's rows, not
    // events the program sent: counted apart (the console's "events").
    uint64_t shadow_rows = 0;
    auto catch_up = [&](uint64_t ts) {
        for (Record& s : gap.catch_up(ts, reader_.pid())) {
            pipeline.feed(s);
            ++shadow_rows;
        }
    };
    ProvisionalStep held;  // the optimizer's provisional step mark (provisional_step.h)
    StepCounter step_count;  // for summary.json
    RawEvent raw;
    Record r;  // reused: its strings keep their storage from event to event
    // Only a live process (not a replay) has a cgroup to watch.
    bool live = cfg_.replay.empty();
    // A live session's capture is temporary (unless --save-capture): what
    // was read is released, so a long run's disk holds the outputs and the
    // unread part only, which the agent bounds by waiting for the host past
    // a budget (capture_disk.h). --aggregate releases at once; otherwise
    // the first capture_keep_bytes() stay for re-running a crashed plugin's
    // outputs.
    bool released_noted = false;
    if (live && !cfg_.save_capture) {
        if (std::string why = reader_.enable_release(cfg_.aggregate ? 0 : capture_keep_bytes()); !why.empty())
            run.log->warn("the capture's read part is kept: {}", why);
    }
    OomWatch oom(reader_.pid());
    if (live) oom.sample();
    auto last_sample = std::chrono::steady_clock::now();
    auto last_progress = last_sample;
    auto report_progress = [&](progress::Phase phase) {
        if (!progress_) return;
        progress::State st;
        st.phase = phase;
        st.events = pipeline.events() - shadow_rows;
        st.stacks = sym.stacks();
        st.stacks_total = reader_.stacks_defined();
        st.chunks_read = reader_.chunks_read();
        st.chunks_total = reader_.chunks_total();
        for (auto& [pool, t] : pipeline.device_totals()) st.used[pool] = t.used;
        progress::update(progress_, st);
    };
    for (;;) {
        // Exact order across threads when the target registered for
        // membarrier (capture_format.h), else a kWindowNs reorder window.
        size_t n = 0;
        auto poll_start = std::chrono::steady_clock::now();
        uint64_t watermark = reader_.poll_ordered(kWindowNs, n, kBarrierEveryNs);
        bool gone = watermark == UINT64_MAX;
        size_t delivered = 0;
        // The rows held after a provisional step mark (provisional_step.h)
        // come first when ready; all of them once the stream ended.
        bool from_held = false;
        while ((from_held = held.next(r)) || reader_.pop(raw, watermark) ||
               (gone && held.end() && (from_held = held.next(r)))) {
            if (!from_held) {
                ++delivered;
                if (take_rank(raw)) {  // the host's own row (process_rank.h)
                    name_rank(pipeline);  // a warning from now on names it
                    continue;
                }
                if (take_program_warning(raw, *run.log)) continue;
                if (!keep(raw)) continue;
                if (!live) note_stacks(raw);
                r.reset();
                convert(raw, r, sym);
                if (held.take(r)) continue;
            }
            step_count.feed(r.ev, r.name);
            if (!steps.keep(r.ev, r.name)) {  // --steps
                gap.dropped(r);
                continue;
            }
            // a failure kept outside the selected steps (step_filter.h) is
            // seen with the memory live when it happened
            if (r.ev.kind == MSMS_EV_OOM_DETAIL && r.ev.type == MSMS_T_OOM_TRIGGER && !steps.in_selected_step() &&
                gap.pending())
                catch_up(r.ev.timestamp_ns);
            // ... and a dump of it says so itself (START_TRACE's Attr
            // steps:[3, 4]): --analyze of a copy anywhere knows what it holds
            if (steps.active() && r.ev.kind == MSMS_EV_SYSTEM && r.ev.type == MSMS_T_START_TRACE)
                r.attrs.emplace_back("steps", steps.list_text());
            // ... and where its dropping starts and stops (Attr
            // step_selected, on the rows that mark steps): the views shade
            // those spans as "not collected" from the host's own rule
            if (r.ev.kind == MSMS_EV_SYSTEM || r.ev.kind == MSMS_EV_MSTX)
                if (const char* change = steps.selection_change()) r.attrs.emplace_back("step_selected", change);
            pipeline.feed(r);
            // a selected step begins (the STEP row that ends the step
            // before, or its mstx range's start) after dropped events: the
            // blocks live now, from then, and the frees of its own blocks
            if (steps.active() && steps.in_selected_step() && gap.pending()) catch_up(r.ev.timestamp_ns);
            // a host that is behind still shows the view every second
            if (live_view && (delivered & 4095) == 0 && std::chrono::steady_clock::now() - live_last >= std::chrono::seconds(1)) {
                live_write(false);
                live_last = std::chrono::steady_clock::now();
            }
            // ... and its status line moves: one poll can deliver seconds
            // of events (the whole backlog once the program has ended), and
            // the line said "program running" with the count of before.
            if (progress_ && (delivered & 4095) == 0 &&
                std::chrono::steady_clock::now() - last_progress > std::chrono::milliseconds(100)) {
                report_progress(live && !reader_.ended_normally() && !reader_.writer_seen_gone() ? progress::Phase::Running
                                                                                              : progress::Phase::Draining);
                last_progress = std::chrono::steady_clock::now();
            }
        }
        pipeline.idle();  // the sinks' threads get what this round gave them
        if (!released_noted && reader_.released_any()) {
            released_noted = true;
            supervisor::capture_released();
        }
        if (gone) break;
        if (live_view && std::chrono::steady_clock::now() - live_last >= std::chrono::seconds(1)) {
            live_write(false);
            live_last = std::chrono::steady_clock::now();
        }
        if (progress_ && std::chrono::steady_clock::now() - last_progress > std::chrono::milliseconds(100)) {
            report_progress(live && !reader_.ended_normally() && !reader_.writer_seen_gone() ? progress::Phase::Running
                                                                                              : progress::Phase::Draining);
            last_progress = std::chrono::steady_clock::now();
        }
        // A process may move to another cgroup while it runs (a job
        // launcher, or the program itself): look again every 10 ms.
        if (live && std::chrono::steady_clock::now() - last_sample > std::chrono::milliseconds(10)) {
            oom.sample();
            last_sample = std::chrono::steady_clock::now();
        }
        // A host that keeps up polled several times a millisecond. Polls
        // are at least kMinPollInterval apart (a host that falls behind
        // spends longer than that per round and never waits); at most one
        // in kBarrierEveryNs interrupts the target's CPUs (membarrier IPIs).
        if (n == 0 && delivered == 0) {
            std::this_thread::sleep_for(std::chrono::milliseconds(5));
        } else {
            auto next = poll_start + kMinPollInterval;
            if (std::chrono::steady_clock::now() < next) std::this_thread::sleep_until(next);
        }
    }
    // Where reading ended (every stack symbolized, the whole capture read).
    report_progress(progress::Phase::Draining);
    summary_.oom_kill_seen = live && oom.increased();
    // Replaced by exec, and the new image went on recording (the next capture
    // of this pid): the agent noted an exec that kept it preloaded, or saw
    // none (an exec not made through the PLT; a new image that lives on
    // with another command line is taken for one).
    const uint32_t end = reader_.end_kind();
    const bool exec_noted = end == static_cast<uint32_t>(capture::EndKind::Exec);
    bool exec_replaced = false;
    bool next_image_late = false;  // an exec that kept the agent; no capture of its next image yet
    if (live && cfg_.attach_pid != 0) {
        // An attach does not follow an exec: the new image has no agent.
        summary_.attach_exec = end == static_cast<uint32_t>(capture::EndKind::Unknown) && replaced_by_exec(false);
    } else if (live && end == static_cast<uint32_t>(capture::EndKind::Unknown)) {
        exec_replaced = replaced_by_exec(false);
    } else if (live && exec_noted && reader_.end_code() == capture::kExecKeepsAgent) {
        exec_replaced = replaced_by_exec(true);  // not when the new image did not load the agent (static)
        next_image_late = !exec_replaced;
    }
    // Any exec takes the image's memory with it: nothing is left to leak.
    if (exec_replaced || exec_noted || summary_.attach_exec) pipeline.release_all_by_exec();
    // A child forked without exec that ended with _exit() (Python's
    // multiprocessing and DataLoader workers): its memory went with it.
    if (reader_.end_kind() == static_cast<uint32_t>(capture::EndKind::QuickExit) && !follows_exec() &&
        forked_without_exec()) {
        pipeline.release_all_by_exec();
        summary_.exit_after_fork = true;
    }
    // --steps naming steps this process never reached: nothing of them is
    // in its output (said for a process that had steps at all: a launcher's
    // shell has none).
    if (std::vector<long long> missed = steps.unreached(); steps.saw_steps() && !missed.empty()) {
        std::string list;
        for (size_t i = 0; i < missed.size(); ++i) list += (i ? ", " : "") + std::to_string(missed[i]);
        summary_.warnings.push_back("pid " + std::to_string(reader_.pid()) + ": --steps: " +
                                    (missed.size() == 1 ? "step " + list + " was" : "steps " + list + " were") +
                                    " never reached (its last step was " + std::to_string(steps.current_step()) +
                                    "); nothing was collected for " + (missed.size() == 1 ? "it" : "them"));
        run.log->warn(said(cfg_, summary_.warnings.back()));  // (the console's words: Session::print_summary)
    }
    if (!steps.failures_outside().empty()) {
        summary_.warnings.push_back(failures_outside_text(reader_.pid(), steps.failures_outside()));
        run.log->warn(said(cfg_, summary_.warnings.back()));
    }
    report_progress(progress::Phase::Writing);
    pipeline.finish();
    report_progress(progress::Phase::Done);
    summary_.events = pipeline.events() - shadow_rows;
    summary_.steps_shadow_rows = shadow_rows;
    summary_.trace_marks = pipeline.trace_marks();
    summary_.dropped = reader_.dropped();
    summary_.stragglers = reader_.stragglers();
    summary_.corrupt = reader_.corrupt_records();
    summary_.ended_normally = reader_.ended_normally();
    summary_.agent_disabled = reader_.agent_disabled();
    summary_.end_kind = reader_.end_kind();
    summary_.end_code = reader_.end_code();
    summary_.end_corrupt = reader_.end_corrupt();
    summary_.exec_path = reader_.exec_path();
    if (summary_.end_corrupt) run.log->error("the capture's end record fails its checksum: not trusted");
    summary_.exact_order = reader_.exact_order();
    summary_.damage = reader_.first_corruption();
    if (!summary_.damage.empty()) run.log->error("first damage: {}", summary_.damage);
    summary_.totals = pipeline.device_totals();
    summary_.report = pipeline.report_lines();
    summary_.plugin_errors = pipeline.plugin_errors();
    summary_.setup_warnings = pipeline.setup_warnings();
    if (summary_.dropped) run.log->error("{} events could not be recorded (dropped)", summary_.dropped);
    if (summary_.stragglers) run.log->warn("{} events arrived later than the reorder window", summary_.stragglers);
    if (summary_.corrupt) run.log->error("{} corrupt records skipped", summary_.corrupt);
    // What makes this process's output incomplete (the CLI exits with 70).
    if (summary_.dropped) {
        std::string why;
        switch (static_cast<capture::DisabledReason>(reader_.disabled_reason())) {
        case capture::DisabledReason::NoSpace: why = " (the disk was full)"; break;
        case capture::DisabledReason::FileSize: why = " (the capture reached the file-size limit, ulimit -f)"; break;
        case capture::DisabledReason::AddressSpace: why = " (no address space for the capture, ulimit -v)"; break;
        case capture::DisabledReason::NoReader: why = " (msmemscope had stopped reading it)"; break;
        default: break;
        }
        summary_.incomplete.push_back(std::to_string(summary_.dropped) + " event(s) could not be recorded" + why);
    }
    if (summary_.corrupt)
        summary_.incomplete.push_back("corrupt capture: " + std::to_string(summary_.corrupt) +
                                      " damaged part(s) skipped (first: " + summary_.damage + ")");
    if (!reader_.read_error().empty()) summary_.incomplete.push_back(reader_.read_error());
    if (!log_error_.empty()) summary_.incomplete.push_back("log: " + log_error_);
    // host.error from a plugin: what it wrote is not what it meant to (70).
    for (auto& e : pipeline.reported_errors()) summary_.incomplete.push_back(e);
    for (auto& e : summary_.plugin_errors) {
        // "plugin 'NAME': ...": a sink that failed lost output; an analyzer
        // that failed was dropped.
        bool sink = false;
        for (auto& s : cfg_.sinks) sink = sink || e.rfind("plugin '" + s + "'", 0) == 0;
        if (sink) summary_.incomplete.push_back(e + output_limit_reached(dir));
        else summary_.plugin_dropped = true;
    }
    // summary.json (process_summary_json.h): what --merge combines.
    SummaryFacts facts;
    facts.ppid = reader_.ppid();
    facts.rank = rank_.rank();
    summary_.rank = facts.rank;
    if (!rank_.warning().empty()) {
        summary_.warnings.push_back(rank_.warning());
        run.log->warn(said(cfg_, rank_.warning()));
    }
    facts.steps = step_count.steps();
    for (auto& pf : pipeline.failures()) facts.plugin_failures.push_back({pf.plugin, pf.kind, said(cfg_, pf.what)});
    facts.wall_start_ns = reader_.wall_start();
    facts.exec_replaced = exec_replaced;
    // No end record (SIGKILL): the program the CLI started has its wait
    // status, which the CLI writes within milliseconds of the end.
    int wait_status = 0;
    if (static_cast<capture::EndKind>(summary_.end_kind) == capture::EndKind::Unknown && !summary_.end_corrupt &&
        !summary_.ended_normally && !exec_replaced && unrecorded_exec_words(summary_).empty() &&
        program_status::wait_for(static_cast<pid_t>(summary_.pid), std::chrono::seconds(2), wait_status))
        facts.wait_status = wait_status;
    facts.leaks_ran = cfg_.steps.empty() && !supervisor::excluded("leaks") &&
                      std::find(cfg_.analyzers.begin(), cfg_.analyzers.end(), "leaks") != cfg_.analyzers.end();
    for (auto& e : summary_.plugin_errors) facts.leaks_ran = facts.leaks_ran && e.rfind("plugin 'leaks'", 0) != 0;
    facts.inefficient_ran = !supervisor::excluded("inefficient") &&
                            std::find(cfg_.analyzers.begin(), cfg_.analyzers.end(), "inefficient") != cfg_.analyzers.end();
    for (auto& e : summary_.plugin_errors)
        facts.inefficient_ran = facts.inefficient_ran && e.rfind("plugin 'inefficient'", 0) != 0;
    summary_.leaks_ran = facts.leaks_ran;
    // A child forked without exec that ended with _exit(): what it held then
    // went with it (release_all_by_exec above), so none of it is a leak. Said
    // in words: an empty report would read as "judged, and clean".
    if (facts.leaks_ran && summary_.exit_after_fork) {
        std::string held;
        for (auto& [pool, t] : summary_.totals)
            if (t.used) held += (held.empty() ? "" : ", ") + pool + " " + human_bytes(static_cast<int64_t>(t.used));
        summary_.report.push_back("leaks: not judged at its end: what it held at its _exit (" +
                                  (held.empty() ? std::string("nothing") : held) +
                                  ") went with it, as a child forked without exec leaves its memory; its step leaks "
                                  "are judged as any process's");
    }
    // The process folder swapped for a link (or another folder) during the
    // run: nothing was written through it (every file went into the folder
    // this run made, wherever it was moved), but what the path now names is
    // not this run's output.
    if (!files::still_there(root_fd_.get(), dir_name_, dir_fd_.get())) {
        struct stat st;
        bool link = fstatat(root_fd_.get(), dir_name_.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISLNK(st.st_mode);
        summary_.incomplete.push_back(dir + ": the process folder was replaced during the run (" +
                                      (link ? std::string("by a symbolic link") : std::string("it is gone or another folder")) +
                                      "); nothing was written through it: this run's files stay in the folder it made, "
                                      "wherever that was moved");
        run.log->error("the process folder {} was replaced during the run", dir);
    }
    // The live view's last screen: what the analyses found, and how the
    // program ended (summary.json's words: a crash reads as one).
    if (live_view) {
        summary_.live_ended = next_image_late ? awaited_exec_words(summary_) : ended_text(summary_, facts);
        live_view->set_ended(summary_.live_ended);
    }
    live_write(true);
    if (live_fd >= 0) close(live_fd);
    // No plugin writes into the folder, nor runs, from here on: a rank that
    // came late may name it now, before summary.json and anything that
    // prints or links its path.
    pipeline.destroy_plugins();
    name_folder_by_rank(ts, *run.log);
    // config.json names the selected plugins that did not run to the end
    // (refused at load, crashed, threw): "dropped": {name: why}; a replay's
    // says which call stacks the capture held.
    if (std::string why = rewrite_config_json(); !why.empty())
        summary_.incomplete.push_back(summary_.output_dir + "/config.json: cannot rewrite: " + why);
    summary_.facts = facts;
    if (std::string why = write_process_summary_json_at(dir_fd_.get(), summary_, facts); !why.empty())
        summary_.incomplete.push_back(summary_.output_dir + "/summary.json: cannot write: " + why);
    run.log->info("done: {} events", summary_.events);
    run.log->flush();
}

void ProcessRun::name_folder_by_rank(const std::string& ts, spdlog::logger& log) {
    std::string rank = rank_.rank();
    // No rank, or the environment's, which named the folder from the start.
    if (rank.empty() || !valid_rank(reader_.rank()).empty()) return;
    // A folder replaced during the run was reported so above: it keeps its name.
    if (!files::still_there(root_fd_.get(), dir_name_, dir_fd_.get())) return;
    std::string why, pid = std::to_string(reader_.pid());
    std::string name = rename_fresh_at(root_fd_.get(), dir_name_, folder_name(ts, rank), dir_fd_.get(), why);
    if (name.empty()) {
        summary_.warnings.push_back("pid " + pid + ": its folder " + summary_.output_dir +
                                    " keeps its name, without its rank " + rank +
                                    " (from torch.distributed, known after the folder was made): cannot rename it: " + why);
        log.warn("the process folder keeps its name, without its rank {}: {}", rank, why);
        return;
    }
    // What the plugins and the host said of the folder by its old name (a
    // leak report's full list, a file that could not be written) now names
    // it as it is; a message already printed during the run named it as it
    // was then, which the console's "renamed from" line says.
    for (auto* lines : {&summary_.report, &summary_.plugin_errors, &summary_.incomplete, &summary_.warnings})
        for (auto& line : *lines) line = rename_mentions(line, dir_name_, name);
    std::string old_dir = summary_.output_dir;
    summary_.renamed_from = dir_name_;
    dir_name_ = name;
    summary_.output_dir = cfg_.output + "/" + name;
    supervisor::writing_into(summary_.output_dir);  // a worker that dies from here on: this folder
    log.info("the process folder {} is now {}: its rank {} came from torch.distributed after the folder was made",
             old_dir, summary_.output_dir, rank);
}

std::string ProcessRun::config_json() const {
    if (cfg_.replay.empty()) return cfg_.to_json();
    Config c = cfg_;
    c.program = reader_.cmdline();
    c.py_stack = replay_py_depth_ > 0;
    c.py_depth = static_cast<int>(replay_py_depth_);
    c.c_stack = replay_c_depth_ > 0;
    c.c_depth = static_cast<int>(replay_c_depth_);
    return c.to_json();
}

void ProcessRun::note_stacks(const RawEvent& e) {
    if (e.pystack)
        if (const StackDef* s = reader_.stack(e.pystack)) replay_py_depth_ = std::max(replay_py_depth_, s->frames.size());
    if (e.cstack)
        if (const StackDef* s = reader_.stack(e.cstack); s && s->kind == 0)
            replay_c_depth_ = std::max(replay_c_depth_, s->frames.size());
}

std::string ProcessRun::rewrite_config_json() {
    std::vector<std::pair<std::string, std::string>> dropped = dropped_at_load();
    auto add = [&](const std::string& name, const std::string& why) {
        for (auto& d : dropped)
            if (d.first == name) return;
        dropped.emplace_back(name, why);
    };
    // The supervisor's "plugin 'NAME' HOW in CALL; the outputs were re-run
    // without it" and the pipeline's "plugin 'NAME': WHAT; continuing without it".
    auto parse = [&](const std::string& msg, const char* sep, const char* tail) {
        if (msg.rfind("plugin '", 0) != 0) return;
        size_t q = msg.find('\'', 8);
        if (q == std::string::npos || msg.compare(q + 1, strlen(sep), sep) != 0) return;
        std::string why = msg.substr(q + 1 + strlen(sep));
        size_t t = why.rfind(tail);
        if (t != std::string::npos) why.erase(t);
        add(msg.substr(8, q - 8), why);
    };
    for (auto& n : supervisor::exclusion_notes()) parse(n, " ", "; the outputs were re-run without it");
    for (auto& e : summary_.plugin_errors) {
        const std::string own = Pipeline::kOwnOutputIncomplete;  // a sink that failed in its finish()
        bool in_finish = e.size() >= own.size() && e.compare(e.size() - own.size(), own.size(), own) == 0;
        parse(e, ": ", in_finish ? Pipeline::kOwnOutputIncomplete : "; continuing without it");
    }
    if (dropped.empty() && cfg_.replay.empty()) return "";
    std::string text = config_json() + "\n";
    if (!dropped.empty()) {
        Json d = Json::object();
        for (auto& [name, why] : dropped) d.set(name, Json(why));
        size_t close = text.rfind('}');
        if (close == std::string::npos) return "not a JSON object";
        size_t last = text.find_last_not_of(" \n", close - 1);
        std::string body;
        d.dump_to(body, 2, 1);
        text = text.substr(0, last + 1) + ",\n  \"dropped\": " + body + "\n}\n";
    }
    std::string why;
    if (!files::replace(dir_fd_.get(), "config.json", text, why)) return why;
    return "";
}

// This process was forked from a profiled process and did not exec. Its
// agent says so: the fork handler opened this capture and wrote the parent's
// pid in it (format 4.1), so the answer does not depend on the parent, which
// may have ended and had its capture emptied first. (A child that exec'ed
// after vfork or posix_spawn runs another program whose agent opened a fresh
// capture; one that exec'ed after fork has a capture index > 0.) Captures of
// older agents: a capture of its parent (the pid its agent saw as parent) in
// the same session folder has the same program and command and began before
// this one, found only while the parent's capture is still there.
bool ProcessRun::forked_without_exec() const {
    if (reader_.forked_from() != 0) return true;
    uint32_t ppid = reader_.ppid();
    if (ppid == 0 || ppid == reader_.pid()) return false;
    fs::path dir = fs::path(capture_path_).parent_path();
    if (dir.empty()) dir = ".";
    std::string prefix = std::to_string(ppid) + ".";
    std::vector<std::string> mine = reader_.cmdline();
    std::string my_exe = reader_.exe();
    std::error_code ec;
    for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
        std::string name = it->path().filename().string();
        if (name.rfind(prefix, 0) != 0 || name.size() < 7 || name.compare(name.size() - 7, 7, ".msmcap") != 0) continue;
        int fd = open(it->path().c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
        if (fd < 0) continue;
        alignas(capture::CaptureHeader) unsigned char buf[sizeof(capture::CaptureHeader)];
        bool got = pread(fd, buf, sizeof buf, 0) == static_cast<ssize_t>(sizeof buf);
        close(fd);
        const auto& h = *reinterpret_cast<const capture::CaptureHeader*>(buf);
        if (!got || memcmp(h.magic, capture::kMagic, sizeof h.magic) != 0 || h.pid != ppid) continue;
        if (h.wall_start_ns > reader_.wall_start()) continue;
        std::string exe(h.exe, strnlen(h.exe, sizeof h.exe));
        std::vector<std::string> args;
        const char* p = h.cmdline;
        const char* e = p + sizeof h.cmdline;
        while (p < e && *p) {
            size_t n = strnlen(p, static_cast<size_t>(e - p));
            args.emplace_back(p, n);
            p += n + 1;
        }
        if (exe == my_exe && args == mine) return true;
    }
    return false;
}

// The next image of this pid made its capture (pid.N+1), or (unless
// `capture_only`) the process lives on (not a zombie) with another command
// line: it exec'ed. Waited for briefly while the process lives (the new
// image's agent starts right after exec).
bool ProcessRun::replaced_by_exec(bool capture_only) const {
    uint32_t pid = reader_.pid();
    std::string dir = capture_path_.substr(0, capture_path_.rfind('/') + 1);
    std::string next = dir + std::to_string(pid) + "." + std::to_string(summary_.capture_index + 1) + ".msmcap";
    // An exec known to keep the agent: its capture is what tells a new image
    // that loaded it from one that did not (static), so it is given longer.
    auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(capture_only ? 2000 : 300);
    for (;;) {
        // The next image's capture keeps its name until the session ends
        // (also when that image has already exited).
        // Unless it is another process's: its pid was this one's (it ended
        // without an end record, SIGKILL) and the kernel gave it again.
        if (access(next.c_str(), F_OK) == 0) return continues(summary_.start_ticks, capture_identity(next));
        if (access((next + ".part").c_str(), F_OK) == 0 && summary_.start_ticks == 0) return true;
        std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
        std::string line;
        if (!std::getline(stat, line)) return false;
        size_t paren = line.rfind(')');
        if (paren == std::string::npos || paren + 2 >= line.size()) return false;
        char state = line[paren + 2];
        if (state == 'Z' || state == 'X') return false;
        // Another process with this pid (field 22, its start time, is not this one's).
        uint64_t started = 0;
        {
            std::istringstream fields(line.substr(paren + 2));
            std::string field;
            for (int i = 3; i <= 22 && (fields >> field); ++i)
                if (i == 22) started = std::strtoull(field.c_str(), nullptr, 10);
        }
        if (!same_process(summary_.start_ticks, started)) return false;
        std::ifstream cmd("/proc/" + std::to_string(pid) + "/cmdline");
        std::string args((std::istreambuf_iterator<char>(cmd)), std::istreambuf_iterator<char>());
        std::replace(args.begin(), args.end(), '\0', ' ');
        while (!args.empty() && args.back() == ' ') args.pop_back();
        if (!capture_only && !args.empty() && args != summary_.command) return true;
        if (std::chrono::steady_clock::now() > deadline) return false;
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
}

}  // namespace msms
