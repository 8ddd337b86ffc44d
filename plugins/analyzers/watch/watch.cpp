// Analyzer `watch` (COMPAT §5, §6): writes the watch_dump output from the
// checkpoint events the target sends (see README.md for the contract): MSTX
// Mark events named "msmemscope.watch" with Attr op, count, watched, idx,
// when and crc64 (hash mode) or file (full-content mode).
//
//   hash mode:  <proc>/device_{dev}/watch_dump/watch_dump_data_check_sum_{ts}.csv
//               "Tensor info,Check data sum" rows
//   full:       <proc>/device_{dev}/watch_dump/{name}.bin (the target's staging file moved)
// with name = {dev}_{tid}.{op}_{count}-{watched}_{idx}_{before|after}.bin ('/' and "::" -> '.').
// At the end it reports, per watched tensor, every op whose "after" hash
// differs from its "before" hash (the ops that changed it), and every change
// between two operators (code outside the watched operators changed it).
//
// Only our own files (issue #29, DESIGN §9): a `file` Attr is never a path.
// It is the name of a staging file the target made in this live run's
// session folder (0700, of this user), watch_{token}_{pid}_{n}.bin, where the
// token is the host's random per-session value (MSMEMSCOPE_HOST_WATCH_*,
// set by the host in live runs only) and pid the process of this capture.
// The file is opened without following links and must be a regular file of
// this user with one link. Anything else a mark names (a path, a link, a
// folder, '..', another token, any file at all in --replay or --analyze) is
// neither opened for writing, moved nor deleted: one warning says how many.
#include <msmemscope/plugin.hpp>

#include <fcntl.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "../common/analyzer_util.h"

namespace fs = std::filesystem;

namespace {

using namespace msms_an;
using msmemscope::attr;

class WatchAnalyzer : public msmemscope::IAnalyzer {
public:
    static constexpr const char* kTypeName = "watch";
    static constexpr const char* kVersion = "1.0.0";
    static constexpr const char* kDescription =
        "tensor watch: writes the watch_dump hashes or tensor files sent by the target (--watch, watcher.watch())";
    static constexpr const char* kEvents = "launch";

    WatchAnalyzer(msmemscope::Host host, const msmemscope::Options&) : host_(host) {}
    ~WatchAnalyzer() override {
        for (auto& [dev, f] : files_)
            if (f) std::fclose(f);
        if (staging_fd_ >= 0) close(staging_fd_);
    }

    void begin(const msmemscope::RunInfo& run) override {
        run_ = run;
        dir_ = run.output_dir;
        ts_ = run.timestamp;
        pid_ = run.pid;
        open_staging();
        read_spec(run.config_json);
    }

    void on_event(const msms_event& ev) override {
        if (ev.kind == MSMS_EV_OP_LAUNCH && ev.type == MSMS_T_ATEN_START) {
            // which operators ran: to say why a --watch window wrote nothing
            ++ops_run_;
            if (!start_.empty() && op_matches(view(ev.name), start_)) ++start_runs_;
            return;
        }
        if (ev.kind != MSMS_EV_MSTX || ev.type != MSMS_T_MARK || view(ev.name) != "msmemscope.watch") return;
        std::string dev = device_label(ev);
        if (dev == "N/A") dev = "cpu";
        std::string op(attr(ev, "op")), watched(attr(ev, "watched")), when(attr(ev, "when"));
        std::string count(attr(ev, "count")), idx(attr(ev, "idx"));
        if (op.empty() || when.empty()) {
            host_.warn("watch: a checkpoint event without op/when was ignored (event " + std::to_string(ev.id) + ")");
            return;
        }
        if (attr(ev, "unchecked") == "budget") {
            // watcher.watch(dump_nums=N): the first checkpoint its budget no
            // longer allows. Nothing is written for it; the report and the
            // budget file say that the tensor was not checked from here on.
            Tensor& t = tensor(watched + "_" + idx, std::string(), std::string());
            // (one mark per budget: a tensor watched again under the same
            // name has a budget, and maybe a gap, of its own)
            if (t.gaps.empty() || !t.gaps.back().resumed_at.empty()) {
                t.dev = dev;
                Gap g;
                g.dump_nums = std::string(attr(ev, "dump_nums"));
                g.points = t.points - t.points_before;
                g.last = t.last_point;
                g.from = op + "_" + count + " (" + when + ")";
                t.gaps.push_back(std::move(g));
            }
            return;
        }
        // the --watch windows: opened by the start operator's first
        // checkpoint (its outputs, after it), closed by the end operator's after
        // (a later call of the start operator inside an open window is one
        // of its checkpoints, not a new window)
        if (!start_.empty() && !window_open_ && op == watched && when == "after" && op_matches(op, start_)) {
            ++from_start_;
            window_open_ = true;
            window_from_ = op + "_" + std::string(count);
            window_points_ = 0;
        }
        if (window_open_) ++window_points_;
        if (!end_.empty() && when == "after" && op_matches(op, end_)) {
            window_open_ = false;
            ++end_seen_;
        }
        std::string name = file_name(dev + "_" + std::to_string(ev.tid) + "/" + op + "_" + count + "-" + watched + "_" +
                                     idx + "_" + when + ".bin");
        std::string rel_folder = "device_" + dev + "/watch_dump";
        std::string folder = dir_ + "/" + rel_folder;
        std::string_view file = attr(ev, "file");
        std::string_view crc = attr(ev, "crc64");
        if (!file.empty()) {
            std::string why = move_staged(file, folder, rel_folder, name);
            if (why.empty()) {
                ++written_;
            } else if (!ignored_++) {
                ignored_example_ = "'" + printable(file) + "' (" + why + ")";
            }
        } else if (!crc.empty()) {
            std::FILE* f = csv(dev, folder, rel_folder);
            std::string line = name + "," + std::string(crc) + "\n";
            if (std::fwrite(line.data(), 1, line.size(), f) != line.size())
                throw std::runtime_error("watch: cannot write " + folder + ": " + std::strerror(errno));
            ++written_;
        }
        // Who changed the tensor (a full-content checkpoint carries the hash
        // of the bytes it dumped too): an op whose after hash differs from
        // its before hash; or code outside the watched operators, when a
        // before hash differs from the tensor's last one. An after with no
        // before of the same call is the start op's: a new tensor.
        if (!crc.empty()) {
            std::string call = dev + "_" + std::to_string(ev.tid) + "/" + op + "_" + count;
            std::string point = op + "_" + count;
            Tensor& t = tensor(watched + "_" + idx, op == watched && when == "after" ? point : std::string(),
                               call);
            ++t.points;
            if (!t.gaps.empty() && t.gaps.back().resumed_at.empty()) {
                // watched again: its checkpoints count from here
                t.gaps.back().resumed_at = point + " (" + when + ")";
                t.points_before = t.points - 1;
                // a change across the gap is said on the gap's line, not as
                // one "outside the watched operators"
                t.gaps.back().changed = !t.last.empty() && t.last != crc;
                t.last.clear();
            }
            if (when == "before") {
                if (!t.last.empty() && t.last != crc)
                    t.outside.push_back("between " + t.last_point + " and " + point + " (before)");
                t.before_call = call;
                t.before = std::string(crc);
            } else if (when == "after") {
                if (t.before_call == call && !t.before.empty() && t.before != crc) t.changed_by.push_back(point);
                t.before.clear();
                t.before_call.clear();
            }
            t.last = std::string(crc);
            t.last_point = point + " (" + when + ")";
        }
    }

    void finish() override {
        for (auto& [dev, f] : files_)
            if (f) {
                std::fclose(f);
                f = nullptr;
            }
        if (ignored_)
            host_.warn("watch: " + std::to_string(ignored_) +
                       " checkpoint file(s) named by the events were ignored, first " + ignored_example_ +
                       "; only the profiled program's own staging files of this live run are moved (never a path "
                       "read from a capture or dump)");
        explain_spec();
        write_budget_files();
        if (!written_ && !budget_gaps_) return;
        if (written_)
            host_.report("watch: " + std::to_string(written_) + " checkpoint(s) written under " + watch_folders());
        // Each window's tensor on lines of its own, in the order they were
        // made: the start operator makes a new one at each call.
        constexpr size_t kMaxTensors = 10;
        size_t shown = 0, more = 0, more_budget = 0;
        for (const Tensor& t : tensors_) {
            if (t.changed_by.empty() && t.outside.empty() && t.gaps.empty()) continue;
            if (shown == kMaxTensors) {
                if (!t.changed_by.empty() || !t.outside.empty()) ++more;
                if (!t.gaps.empty()) ++more_budget;
                continue;
            }
            ++shown;
            if (!t.changed_by.empty()) host_.report("watch: tensor " + t.name + " was changed by " + listed(t.changed_by));
            if (!t.outside.empty())
                host_.report("watch: tensor " + t.name + " was changed outside the watched operators " +
                             listed(t.outside));
            for (const Gap& g : t.gaps) host_.report("watch: " + budget_line(t, g));
        }
        if (more)
            host_.report("watch: and " + std::to_string(more) +
                         " more watched tensor(s) were changed (every hash is in " + watch_folders() + ")");
        if (more_budget)
            host_.report("watch: and " + std::to_string(more_budget) +
                         " more watched tensor(s) ran out of their checkpoint budget (dump_nums): each is in " +
                         watch_folders() + "/watch_dump_budget_used_up_*.txt");
    }

private:
    // Where the watch_dump folders are, as the console can name them: a
    // live run lists its run folder's files after these lines, so the
    // folder inside it is enough; `msmemscope --analyze` lists none, and
    // writes them into --output (the current folder's memscopeDumpResults
    // unless given), which is named.
    std::string watch_folders() const {
        const std::string inside = "device_*/watch_dump";
        if (!offline_analysis(run_.config_json)) return inside;
        return dir_ + (!dir_.empty() && dir_.back() == '/' ? "" : "/") + inside;
    }

    // --watch's spec as the run's config.json has it ("watch": "[start[:N]],end[,full-content]").
    void read_spec(const std::string& config_json) {
        size_t at = config_json.find("\"watch\": \"");
        if (at == std::string::npos) return;
        std::string text;
        for (size_t i = at + 10; i < config_json.size() && config_json[i] != '"'; ++i) {
            if (config_json[i] == '\\' && i + 1 < config_json.size()) ++i;
            text += config_json[i];
        }
        spec_ = text;
        std::vector<std::string> parts;
        size_t b = 0;
        for (;;) {
            size_t c = text.find(',', b);
            parts.push_back(text.substr(b, c == std::string::npos ? std::string::npos : c - b));
            if (c == std::string::npos) break;
            b = c + 1;
        }
        if (!parts.empty() && parts.back() == "full-content") parts.pop_back();
        if (parts.size() == 1) {
            end_ = parts[0];
        } else if (parts.size() == 2) {
            start_ = parts[0];
            end_ = parts[1];
            // start:N or start:outN (one colon, not the "::" of a namespace)
            size_t colon = start_.rfind(':');
            if (colon != std::string::npos && colon > 0 && start_[colon - 1] != ':') {
                std::string n = start_.substr(colon + 1);
                if (n.rfind("out", 0) == 0) n = n.substr(3);
                if (!n.empty() && n.find_first_not_of("0123456789") == std::string::npos) {
                    out_ = n;
                    start_ = start_.substr(0, colon);
                }
            }
        }
    }

    // An operator's name (aten::mul.Tensor as the watch checkpoints give it,
    // torch._ops.aten.mul.Tensor as the operator rows do) against a name of
    // the spec, with watcher.py's rules: with or without the overload
    // (aten::mul matches aten::mul.Tensor, aten::sum.default aten::sum), or
    // spelled as upstream's dump does (torch._ops.aten.mul.Tensor, with or
    // without torch._ops.).
    struct OpName {
        std::string ns, base, overload;
    };
    static OpName split_op(std::string_view n, bool dotted) {
        OpName o;
        if (n.rfind("torch._ops.", 0) == 0) {
            n.remove_prefix(11);
            dotted = true;
        }
        size_t sep = n.find("::");
        if (sep != std::string_view::npos) {
            o.ns = n.substr(0, sep);
            n.remove_prefix(sep + 2);
        } else if (dotted || n.find('.') != std::string_view::npos) {
            size_t d = n.find('.');
            if (d == std::string_view::npos) return o;
            o.ns = n.substr(0, d);
            n.remove_prefix(d + 1);
        }
        size_t d = n.find('.');
        o.base = n.substr(0, d);
        if (d != std::string_view::npos) o.overload = n.substr(d + 1);
        return o;
    }
    static bool op_matches(std::string_view name, const std::string& wanted) {
        OpName a = split_op(name, false), w = split_op(wanted, false);
        if (a.base.empty() || a.ns != w.ns || a.base != w.base) return false;
        std::string ov = a.overload.empty() ? "default" : a.overload;
        return w.overload.empty() || w.overload == ov;
    }

    // Why --watch wrote nothing, or never closed its window: a start
    // operator that never ran in this process (a misspelt name) or gave no
    // such output; an end operator that never came after it, so that every
    // operator up to the end of the run was checkpointed. Said only for a
    // process that ran operators (not a launcher shell before its program).
    void explain_spec() {
        if (spec_.empty() || !ops_run_) return;
        if (!start_.empty() && !from_start_) {
            if (!start_runs_)
                host_.warn("watch: --watch=" + spec_ + " wrote no checkpoint: its start operator " + start_ +
                           " never ran in this process (" + std::to_string(ops_run_) +
                           " operator call(s) ran; names as aten::mul, aten::mul.Tensor or torch._ops.aten.mul.Tensor)");
            else
                host_.warn("watch: --watch=" + spec_ + " wrote no checkpoint: its start operator " + start_ + " ran " +
                           std::to_string(start_runs_) + " time(s) but gave no " +
                           (out_.empty() ? std::string("CPU tensor") : "output " + out_ + " that is a CPU tensor"));
            return;
        }
        if (!start_.empty() && window_open_)
            host_.warn("watch: --watch=" + spec_ + ": the window opened by " + window_from_ +
                       " was still open at the end: its end operator " + end_ +
                       (end_seen_ ? std::string(" did not run after it") : std::string(" never ran in this process")) +
                       ", so every operator after it was checkpointed (" + std::to_string(window_points_) +
                       " checkpoint(s))");
    }

    // A file name from op and tensor names: '/' becomes '.' as upstream's
    // tensor_dumper does, and so does the "::" of an aten name
    // (aten::mul.Tensor -> aten.mul.Tensor): no colons in file names.
    static std::string file_name(const std::string& raw) {
        std::string out;
        out.reserve(raw.size());
        for (size_t i = 0; i < raw.size(); ++i) {
            if (raw[i] == ':' && i + 1 < raw.size() && raw[i + 1] == ':') {
                out += '.';
                ++i;
            } else {
                out += raw[i] == '/' ? '.' : raw[i];
            }
        }
        return out;
    }

    // The session folder of this live run, when the host says so: a folder
    // (not a link) of this user that only this user can enter.
    void open_staging() {
        const char* dir = std::getenv("MSMEMSCOPE_HOST_WATCH_STAGING");
        const char* token = std::getenv("MSMEMSCOPE_HOST_WATCH_TOKEN");
        if (!dir || !*dir || !token || std::strlen(token) != 32) return;
        for (const char* c = token; *c; ++c)
            if (!((*c >= '0' && *c <= '9') || (*c >= 'a' && *c <= 'f'))) return;
        int fd = open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (fd < 0) return;
        struct stat st;
        if (fstat(fd, &st) != 0 || !S_ISDIR(st.st_mode) || st.st_uid != geteuid() || (st.st_mode & 077)) {
            close(fd);
            return;
        }
        staging_fd_ = fd;
        token_ = token;
    }

    // watch_{token}_{pid}_{n}.bin with this session's token and this capture's pid.
    bool staging_name(std::string_view f) const {
        std::string head = "watch_" + token_ + "_" + std::to_string(pid_) + "_";
        if (f.size() <= head.size() + 4 || f.compare(0, head.size(), head) != 0) return false;
        if (f.compare(f.size() - 4, 4, ".bin") != 0) return false;
        for (size_t i = head.size(); i < f.size() - 4; ++i)
            if (f[i] < '0' || f[i] > '9') return false;
        return true;
    }

    // Moves one staging file into `folder` as `name`; the reason when it is not moved.
    std::string move_staged(std::string_view file, const std::string& folder, const std::string& rel_folder,
                            const std::string& name) {
        if (staging_fd_ < 0) return "not a live run's session folder";
        if (file.find('/') != std::string_view::npos || file == "." || file == "..")
            return "not a file name of the session folder";
        if (!staging_name(file)) return "not a staging file name of this session and process";
        std::string src(file);
        int fd = openat(staging_fd_, src.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
        if (fd < 0) return errno == ELOOP ? "a symbolic link" : std::string(std::strerror(errno));
        struct stat st;
        std::string why;
        if (fstat(fd, &st) != 0) why = std::strerror(errno);
        else if (!S_ISREG(st.st_mode)) why = "not a regular file";
        else if (st.st_uid != geteuid()) why = "not a file of this user";
        else if (st.st_nlink != 1) why = "a file with other links";
        if (why.empty()) {
            // The run folder's watch_dump through an openat chain (#29 item 4).
            std::string open_why;
            int to = open_run_subdir(rel_folder, open_why);
            if (to < 0) {
                host_.error("watch: cannot open " + folder + ": " + open_why);
                why = "the watch_dump folder cannot be opened";
            } else {
                struct stat moved;
                if (renameat(staging_fd_, src.c_str(), to, name.c_str()) != 0) {
                    host_.error("watch: cannot move the staging file " + src + " to " + folder + "/" + name + ": " +
                                std::strerror(errno));
                    why = "cannot be moved";
                } else if (fstatat(to, name.c_str(), &moved, AT_SYMLINK_NOFOLLOW) != 0 || moved.st_ino != st.st_ino ||
                           moved.st_dev != st.st_dev) {
                    // replaced between the check and the move (only this user can)
                    host_.error("watch: the staging file " + src + " was replaced while it was moved to " + folder +
                                "/" + name);
                }
                close(to);
            }
        }
        close(fd);
        return why;
    }

    // A name from the events as it may be shown: no control characters, bounded.
    static std::string printable(std::string_view s) {
        std::string out(s.substr(0, 200));
        for (auto& c : out)
            if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) c = '?';
        if (s.size() > 200) out += "...";
        return out;
    }

    // A budget that ran out: the first checkpoint not taken
    // ("aten::add_.Tensor_2 (after)"), the checkpoints of that budget and the
    // last one, and where the tensor was checked again (watched again under
    // the same name), if it was.
    struct Gap {
        std::string dump_nums, from, last, resumed_at;
        uint64_t points = 0;
        bool changed = false;  // its hash when watched again differs from the last one
    };
    struct Tensor {
        std::string name;                 // "aten::mul_0 (made by aten::mul_2)", or watcher.watch()'s "<name>_<idx>"
        std::string before_call, before;  // the call in progress and its before hash
        std::string last, last_point;     // the last hash seen, and where ("aten::add_1 (after)")
        std::vector<std::string> changed_by, outside;
        uint64_t points = 0;              // checkpoints with a hash
        uint64_t points_before = 0;       // checkpoints before it was watched again
        std::string dev;
        std::vector<Gap> gaps;            // watcher.watch(dump_nums=N) budgets that ran out
    };

    // "tensor w_0: its checkpoint budget ran out (dump_nums=3): ..."
    static std::string budget_line(const Tensor& t, const Gap& g) {
        std::string s = "tensor " + t.name + ": its checkpoint budget ran out (dump_nums=" + g.dump_nums + "): " +
                        std::to_string(g.points) + " checkpoint(s)";
        if (!g.last.empty()) s += ", the last at " + g.last;
        s += "; not checked from " + g.from;
        if (g.resumed_at.empty()) return s + " on, so later changes are not reported";
        s += " until it was watched again at " + g.resumed_at;
        if (g.changed) return s + ", where its bytes had changed: the operators in between are not reported";
        return s + ", so changes in between are not reported";
    }

    // One file per device folder whose tensors ran out of budget, beside the
    // checkpoints: watch_dump/watch_dump_budget_used_up_{ts}.txt, a line per
    // tensor (the report's). Without it the folder's checkpoints read as
    // all there was.
    void write_budget_files() {
        std::map<std::string, std::string> text;
        budget_gaps_ = 0;
        for (const Tensor& t : tensors_)
            for (const Gap& g : t.gaps) {
                text[t.dev] += budget_line(t, g) + "\n";
                ++budget_gaps_;
            }
        for (auto& [dev, body] : text) {
            std::string rel = "device_" + dev + "/watch_dump";
            std::string name = "watch_dump_budget_used_up_" + ts_ + ".txt";
            std::string why;
            msmemscope::files::Fd to(open_run_subdir(rel, why));
            std::FILE* f = to ? msmemscope::files::create_stream(to.get(), name, why, 0644) : nullptr;
            if (!f) {
                host_.error("watch: cannot write " + dir_ + "/" + rel + "/" + name + ": " + why);
                continue;
            }
            bool ok = std::fwrite(body.data(), 1, body.size(), f) == body.size();
            if (std::fclose(f) != 0 || !ok)
                host_.error("watch: cannot write " + dir_ + "/" + rel + "/" + name + ": " + std::strerror(errno));
        }
    }

    // "a, b and c", at most 10 named: "..., and N more".
    static std::string listed(const std::vector<std::string>& v) {
        constexpr size_t kMax = 10;
        std::string out;
        size_t n = std::min(v.size(), kMax);
        for (size_t i = 0; i < n; ++i) out += (i == 0 ? "" : i + 1 == n && v.size() <= kMax ? " and " : ", ") + v[i];
        if (v.size() > kMax) out += ", and " + std::to_string(v.size() - kMax) + " more";
        return out;
    }

    // A folder below the run folder, made or opened through an openat chain
    // from the run folder's descriptor (#29 item 4); -1 and `why` on failure.
    int open_run_subdir(const std::string& rel, std::string& why) {
        if (!run_fd_) {
            run_fd_.reset(run_.open_output_dir(why));
            if (!run_fd_) return -1;
        }
        return msmemscope::files::open_dir(run_fd_.get(), rel, true, why);
    }

    std::FILE* csv(const std::string& dev, const std::string& folder, const std::string& rel_folder) {
        auto it = files_.find(dev);
        if (it != files_.end()) return it->second;
        std::string name = "watch_dump_data_check_sum_" + ts_ + ".csv";
        std::string path = folder + "/" + name;
        // A new file of our own in the run folder: never one that was there
        // (O_EXCL), never through a link (the folders through an openat chain).
        std::string why;
        msmemscope::files::Fd to(open_run_subdir(rel_folder, why));
        std::FILE* f = to ? msmemscope::files::create_stream(to.get(), name, why, 0644) : nullptr;
        if (!f) throw std::runtime_error("watch: cannot write " + path + ": " + why);
        std::fputs("Tensor info,Check data sum\n", f);
        files_[dev] = f;
        return f;
    }

    msmemscope::Host host_;
    std::string dir_ = ".", ts_;
    msmemscope::RunInfo run_;
    msmemscope::files::Fd run_fd_;  // the run folder (RunInfo::open_output_dir), opened when first needed
    std::map<std::string, std::FILE*> files_;
    // The watched tensor a checkpoint is of: `base` is "<watched>_<idx>";
    // `made_at` the start operator's call ("aten::mul_2") when this is its
    // after dump. One with no before dump of the same call is a new tensor
    // (the next window's): it gets an entry of its own; the start operator
    // called again inside a window is a change of the one watched.
    Tensor& tensor(const std::string& base, const std::string& made_at, const std::string& call) {
        auto it = current_.find(base);
        if (it != current_.end() && (made_at.empty() || tensors_[it->second].before_call == call))
            return tensors_[it->second];
        tensors_.push_back(Tensor{});
        tensors_.back().name = made_at.empty() ? base : base + " (made by " + made_at + ")";
        current_[base] = tensors_.size() - 1;
        return tensors_.back();
    }

    std::vector<Tensor> tensors_;           // in the order they were first seen
    std::map<std::string, size_t> current_;  // "<watched>_<idx>" -> the tensor it names now
    uint64_t written_ = 0, budget_gaps_ = 0;
    uint32_t pid_ = 0;
    int staging_fd_ = -1;
    std::string token_;
    uint64_t ignored_ = 0;
    std::string ignored_example_;
    // --watch's spec and what this process did with it
    std::string spec_, start_, out_, end_, window_from_;
    uint64_t ops_run_ = 0, start_runs_ = 0, from_start_ = 0, end_seen_ = 0, window_points_ = 0;
    bool window_open_ = false;
};

}  // namespace

MSMEMSCOPE_PLUGIN(WatchAnalyzer)
