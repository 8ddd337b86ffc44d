// Sink `csv`: memscope_dump_{ts}.csv per device (COMPAT §3, §4) and the
// python_trace CSV (§5). Rows arrive in time order and are written as they
// come, through a large buffer. Attr changes that analyzers make later
// (annotations, e.g. inefficient) are applied in one pass at the end.
#include <msmemscope/plugin.hpp>

#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <stdexcept>
#include <unordered_map>

#include "dump_row.h"
#include "output_file.h"
#include "util/csv.h"
#include "util/text.h"
#include "util/written_events.h"

namespace fs = std::filesystem;

namespace {

using msmemscope::view;

using File = msms::OutputFile;

class CsvSink : public msmemscope::ISink {
public:
    static constexpr const char* kTypeName = "csv";
    static constexpr const char* kVersion = "1.0.0";
    static constexpr const char* kDescription =
        "memscope_dump_{ts}.csv per device and python_trace CSV, compatible with msMemScope";

    CsvSink(msmemscope::Host host, const msmemscope::Options& opts)
        : host_(host), written_(msms::WrittenEvents::from_option(opts.get("write_events", "all"))) {}

    static const msms_option_spec* options(uint32_t& count) {
        static const msms_option_spec specs[] = {msms::WrittenEvents::kOptionSpec};
        count = 1;
        return specs;
    }

    void begin(const msmemscope::RunInfo& run) override {
        dir_ = run.output_dir;
        ts_ = run.timestamp;
    }

    void on_event(const msms_event& ev) override {
        if (!written_.wants(ev)) return;  // --events is what is written (frees still reach the analyzers)
        if (ev.kind == MSMS_EV_PY_TRACE) {
            if (!trace_) {
                std::string dev = first_device_.empty() ? "cpu" : first_device_;
                trace_ = std::make_unique<File>(dir_ + "/device_" + dev + "/dump/python_trace_" + ts_ + ".csv",
                                                msms::kPythonTraceHeader);
            }
            trace_rows_.append(trace_->buffer(), ev);
            if (trace_->maybe_flush()) progress();
            return;
        }
        if (ev.device_kind == MSMS_DEV_NA) {
            // A row without a device (SYSTEM, MSTX, steps...) goes into every
            // device's file with that file's Device Id, as upstream writes the
            // device current on the thread; files of devices seen later get
            // the earlier ones first.
            std::string head, tail;
            msms::append_dump_row_head(head, ev);
            msms::append_dump_row_tail(tail, ev);
            bool wrote = false;
            for (auto& [dev, f] : files_) {
                f->buffer() += head;
                f->buffer() += dev;
                f->buffer() += tail;
                wrote |= f->maybe_flush();
            }
            if (wrote) progress();
            if (history_.size() < kMaxHistory) {
                history_.emplace_back(std::move(head), std::move(tail));
            } else if (!history_full_) {
                history_full_ = true;
                host_.warn("csv: more than " + std::to_string(kMaxHistory) +
                           " rows without a device; the files of devices first seen from now on miss the earlier ones");
            }
            if (files_.empty() && history_.size() >= kMaxHistory) open("cpu");
            return;
        }
        File& f = open(msmemscope::device_label(ev));
        msms::append_dump_row(f.buffer(), ev);
        if (f.maybe_flush()) progress();
    }

    void on_annotation(uint64_t id, std::string_view key, std::string_view value) override {
        patches_[id].emplace_back(std::string(key), std::string(value));
    }

    void finish() override {
        if (files_.empty()) open("cpu");  // an empty run still leaves a valid file
        uint64_t total = 0;
        for_each_file([&](File& f) { total += f.written() + f.pending(); });
        progress(total);
        for (auto& [dev, f] : files_) f->close();
        if (trace_) trace_->close();
        if (!patches_.empty()) {
            // Analyzers' later Attr changes: every dump file is read and written again.
            uint64_t rewrite = 0, done = 0;
            for (auto& [dev, f] : files_) rewrite += file_size(f->path());
            for (auto& [dev, f] : files_) apply_patches(f->path(), done, rewrite);
        }
        // The end: the files' final sizes.
        uint64_t final_size = 0;
        for_each_file([&](File& f) { final_size += file_size(f.path()); });
        host_.progress(final_size, final_size);
    }

private:
    static constexpr size_t kMaxHistory = 100000;
    static constexpr uint64_t kReportEvery = 8 << 20;
    uint64_t reported_ = 0;

    File& open(const std::string& dev) {
        auto it = files_.find(dev);
        if (it != files_.end()) return *it->second;
        auto f = std::make_unique<File>(dir_ + "/device_" + dev + "/dump/memscope_dump_" + ts_ + ".csv", msms::kDumpHeader);
        if (first_device_.empty()) first_device_ = dev;
        for (auto& [head, tail] : history_) {
            f->buffer() += head;
            f->buffer() += dev;
            f->buffer() += tail;
            f->maybe_flush();
        }
        return *files_.emplace(dev, std::move(f)).first->second;
    }

    template <class F>
    void for_each_file(F f) {
        for (auto& [dev, file] : files_) f(*file);
        if (trace_) f(*trace_);
    }
    // Bytes written so far, for the status line (ABI 1.2 progress).
    void progress(uint64_t total = 0) {
        uint64_t done = 0;
        for_each_file([&](File& f) { done += f.written(); });
        host_.progress(done, total);
    }
    static uint64_t file_size(const std::string& path) {
        struct stat st;
        return ::stat(path.c_str(), &st) == 0 ? static_cast<uint64_t>(st.st_size) : 0;
    }

    static bool is_memory_event(const std::string& e) { return e == "MALLOC" || e == "FREE" || e == "ACCESS"; }

    // done/total: bytes rewritten over every file, for the status line.
    void apply_patches(const std::string& path, uint64_t& done, uint64_t total) {
        std::FILE* in = std::fopen(path.c_str(), "r");
        if (!in) throw std::runtime_error("cannot reread " + path);
        std::string tmp = path + ".tmp";
        std::FILE* out = std::fopen(tmp.c_str(), "w");
        if (!out) {
            std::fclose(in);
            throw std::runtime_error("cannot write " + tmp);
        }
        msms::CsvReader reader(in);
        std::vector<std::string> fields;
        std::string line;
        bool header = true;
        while (reader.next(fields)) {
            line = reader.raw();
            if (!header && fields.size() == 12) {
                unsigned long long id = 0;
                auto it = msms::parse_uint(fields[0], id) ? patches_.find(id) : patches_.end();
                if (it != patches_.end()) {
                    auto attrs = msms::parse_attr_list(fields[9]);
                    for (auto& [k, v] : it->second) {
                        bool set = false;
                        for (auto& a : attrs)
                            if (a.first == k) {
                                a.second = v;
                                set = true;
                            }
                        if (!set) attrs.emplace_back(k, v);
                    }
                    if (is_memory_event(fields[1])) msms::order_memory_attrs(attrs);
                    fields[9] = msms::render_attr(attrs);
                    line.clear();
                    for (size_t i = 0; i < fields.size(); ++i) {
                        if (i) line += ',';
                        msms::csv_field(line, fields[i], i >= 9 && !fields[i].empty());
                    }
                }
            }
            header = false;
            line += '\n';
            std::fwrite(line.data(), 1, line.size(), out);
            done += reader.raw().size() + 1;
            if (done - reported_ >= kReportEvery) {
                reported_ = done;
                host_.progress(std::min(done, total), total, "updating csv");
            }
        }
        std::fclose(in);
        if (std::fclose(out) != 0) throw std::runtime_error("cannot write " + tmp);
        std::rename(tmp.c_str(), path.c_str());
    }

    msmemscope::Host host_;
    msms::WrittenEvents written_;
    std::string dir_, ts_, first_device_;
    std::map<std::string, std::unique_ptr<File>> files_;
    std::unique_ptr<File> trace_;
    msms::PythonTraceRowWriter trace_rows_;
    // Rows without a device so far, before and after their Device Id.
    std::vector<std::pair<std::string, std::string>> history_;
    bool history_full_ = false;
    std::unordered_map<uint64_t, std::vector<std::pair<std::string, std::string>>> patches_;
};

}  // namespace

MSMEMSCOPE_PLUGIN(CsvSink)
