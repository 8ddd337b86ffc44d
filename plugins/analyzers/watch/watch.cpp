// Analyzer `watch` (COMPAT §5, §6): writes the watch_dump output from the
// checkpoint events the target sends (see README.md for the contract): MSTX
// Mark events named "msmemscope.watch" with Attr op, count, watched, idx,
// when and crc64 (hash mode) or file (full-content mode).
//
//   hash mode:  <proc>/device_{dev}/watch_dump/watch_dump_data_check_sum_{ts}.csv
//               "Tensor info,Check data sum" rows
//   full:       <proc>/device_{dev}/watch_dump/{name}.bin (the target's file moved)
// with name = {dev}_{tid}.{op}_{count}-{watched}_{idx}_{before|after}.bin ('/' and "::" -> '.').
// At the end it reports, per watched tensor, the first op whose "after" hash
// differs from its "before" hash (the op that changed it).
#include <msmemscope/plugin.hpp>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>

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
    }

    void begin(const msmemscope::RunInfo& run) override {
        dir_ = run.output_dir;
        ts_ = run.timestamp;
    }

    void on_event(const msms_event& ev) override {
        if (ev.kind != MSMS_EV_MSTX || ev.type != MSMS_T_MARK || view(ev.name) != "msmemscope.watch") return;
        std::string dev = device_label(ev);
        if (dev == "N/A") dev = "cpu";
        std::string op(attr(ev, "op")), watched(attr(ev, "watched")), when(attr(ev, "when"));
        std::string count(attr(ev, "count")), idx(attr(ev, "idx"));
        if (op.empty() || when.empty()) {
            host_.warn("watch: a checkpoint event without op/when was ignored (event " + std::to_string(ev.id) + ")");
            return;
        }
        std::string name = file_name(dev + "_" + std::to_string(ev.tid) + "/" + op + "_" + count + "-" + watched + "_" +
                                     idx + "_" + when + ".bin");
        std::string folder = dir_ + "/device_" + dev + "/watch_dump";
        std::string_view file = attr(ev, "file");
        std::string_view crc = attr(ev, "crc64");
        if (!file.empty()) {
            std::error_code ec;
            fs::create_directories(folder, ec);
            fs::path to = fs::path(folder) / name;
            fs::rename(std::string(file), to, ec);
            if (ec) {  // another file system: copy
                ec.clear();
                fs::copy_file(std::string(file), to, fs::copy_options::overwrite_existing, ec);
                if (!ec) fs::remove(std::string(file), ec);
            }
            if (ec) {
                host_.error("watch: cannot move " + std::string(file) + " to " + to.string() + ": " + ec.message());
            } else {
                ++written_;
                // The target's private staging folder goes once it is empty
                // (the target makes a new one if it needs it again).
                fs::path staging = fs::path(std::string(file)).parent_path();
                if (staging.filename().string().rfind("msmemscope_watch_", 0) == 0) fs::remove(staging, ec);
            }
        } else if (!crc.empty()) {
            std::FILE* f = csv(dev, folder);
            std::string line = name + "," + std::string(crc) + "\n";
            if (std::fwrite(line.data(), 1, line.size(), f) != line.size())
                throw std::runtime_error("watch: cannot write " + folder + ": " + std::strerror(errno));
            ++written_;
            // the op that changed a tensor: its after hash differs from its before hash
            std::string tensor = watched + "_" + idx;
            std::string call = dev + "_" + std::to_string(ev.tid) + "/" + op + "_" + count;
            auto& t = tensors_[tensor];
            if (when == "before") {
                t.before_call = call;
                t.before = std::string(crc);
            } else if (when == "after") {
                if (t.before_call == call && !t.before.empty() && t.before != crc && t.changed_by.empty())
                    t.changed_by = op + "_" + count;
                t.before.clear();
            }
        }
    }

    void finish() override {
        for (auto& [dev, f] : files_)
            if (f) {
                std::fclose(f);
                f = nullptr;
            }
        if (!written_) return;
        host_.report("watch: " + std::to_string(written_) + " checkpoint(s) written under device_*/watch_dump");
        for (auto& [tensor, t] : tensors_)
            if (!t.changed_by.empty())
                host_.report("watch: tensor " + tensor + " was changed by " + t.changed_by);
    }

private:
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

    struct Tensor {
        std::string before_call, before, changed_by;
    };

    std::FILE* csv(const std::string& dev, const std::string& folder) {
        auto it = files_.find(dev);
        if (it != files_.end()) return it->second;
        std::error_code ec;
        fs::create_directories(folder, ec);
        std::string path = folder + "/watch_dump_data_check_sum_" + ts_ + ".csv";
        std::FILE* f = std::fopen(path.c_str(), "w");
        if (!f) throw std::runtime_error("watch: cannot write " + path + ": " + std::strerror(errno));
        std::fputs("Tensor info,Check data sum\n", f);
        files_[dev] = f;
        return f;
    }

    msmemscope::Host host_;
    std::string dir_ = ".", ts_;
    std::map<std::string, std::FILE*> files_;
    std::map<std::string, Tensor> tensors_;
    uint64_t written_ = 0;
};

}  // namespace

MSMEMSCOPE_PLUGIN(WatchAnalyzer)
