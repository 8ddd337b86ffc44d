// ndjson: every event as one JSON object per line, in the order the host
// delivers them (timestamp order, IDs increasing), into
// <output>/msmemscope_{PID}_{ts}_{backend}/<file> (option `file`, default
// events_{ts}.ndjson). A line:
//
//   {"id":3,"event":"MALLOC","type":"HOST","name":null,"timestamp_ns":1700000000000000123,
//    "pid":42,"tid":42,"device":"cpu","ptr":"0x00005555a0b0c0d0","size":64,
//    "attrs":{"allocation_id":"1","addr":"0x00005555a0b0c0d0","size":"64","used":"64"}}
//
// With stacks=true the objects also carry "py_stack" and "c_stack". Kinds
// and types newer than this plugin are written as their numbers.
// Annotations (Attr changes that analyzers make to earlier events) and
// findings are not written: NDJSON is append-only.
#include <msmemscope/plugin.hpp>

#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <stdexcept>
#include <string>

namespace {

using msmemscope::view;

// Written here on purpose: an example builds against the installed SDK
// alone, which has no JSON helper (the host's framework/util/json is not
// part of it).
void json_string(std::string& out, std::string_view s) {
    out += '"';
    for (char ch : s) {
        unsigned char c = static_cast<unsigned char>(ch);
        switch (c) {
        case '"': out += "\\\""; break;
        case '\\': out += "\\\\"; break;
        case '\n': out += "\\n"; break;
        case '\r': out += "\\r"; break;
        case '\t': out += "\\t"; break;
        default:
            if (c < 0x20) {
                char buf[8];
                std::snprintf(buf, sizeof(buf), "\\u%04x", c);
                out += buf;
            } else {
                out += ch;
            }
        }
    }
    out += '"';
}

class NdjsonSink : public msmemscope::ISink {
public:
    static constexpr const char* kTypeName = "ndjson";
    static constexpr const char* kVersion = "1.0.0";
    static constexpr const char* kDescription = "newline-delimited JSON, one object per event (SDK example)";

    static const msms_option_spec* options(uint32_t& count) {
        static const msms_option_spec specs[] = {
            {"file", MSMS_OPT_STRING, "", nullptr, 0, 0,
             "file name in the process's output folder (default events_{ts}.ndjson)"},
            {"stacks", MSMS_OPT_BOOL, "false", nullptr, 0, 0, "also write the Python and C call stacks"},
        };
        count = sizeof(specs) / sizeof(specs[0]);
        return specs;
    }

    NdjsonSink(msmemscope::Host, const msmemscope::Options& opts)
        : file_(opts.get("file")), stacks_(opts.get_bool("stacks")) {
        if (file_.find('/') != std::string::npos) throw std::invalid_argument("ndjson.file must be a file name, not a path");
    }
    ~NdjsonSink() override { close(); }

    void begin(const msmemscope::RunInfo& run) override {
        std::string name = file_.empty() ? "events_" + run.timestamp + ".ndjson" : file_;
        path_ = run.output_dir + "/" + name;
        // Created relative to the run folder's descriptor, O_EXCL|O_NOFOLLOW
        // (sdk/README.md "Writing files"): never through a link.
        std::string why;
        msmemscope::files::Fd dir(run.open_output_dir(why));
        f_ = dir ? msmemscope::files::create_stream(dir.get(), name, why) : nullptr;
        if (!f_) throw std::runtime_error("cannot write " + path_ + ": " + why);
        buf_.reserve(kFlushAt + 4096);
    }

    void on_event(const msms_event& ev) override {
        if (!f_) return;
        char num[64];
        buf_ += "{\"id\":";
        buf_ += std::to_string(ev.id);
        buf_ += ",\"event\":";
        const char* kind = msms_event_kind_name(ev.kind);
        if (kind) json_string(buf_, kind);
        else buf_ += std::to_string(ev.kind);
        buf_ += ",\"type\":";
        const char* type = msms_event_type_name(ev.type);
        if (type) json_string(buf_, type);
        else buf_ += std::to_string(ev.type);
        buf_ += ",\"name\":";
        if (ev.name.size) json_string(buf_, view(ev.name));
        else buf_ += "null";
        buf_ += ",\"timestamp_ns\":" + std::to_string(ev.timestamp_ns);
        buf_ += ",\"pid\":" + std::to_string(ev.pid) + ",\"tid\":" + std::to_string(ev.tid);
        buf_ += ",\"device\":";
        switch (ev.device_kind) {
        case MSMS_DEV_CPU: buf_ += "\"cpu\""; break;
        case MSMS_DEV_NPU:
        case MSMS_DEV_CUDA: buf_ += std::to_string(ev.device_id < 0 ? 0 : ev.device_id); break;
        default: buf_ += "null";
        }
        if (ev.kind == MSMS_EV_MALLOC || ev.kind == MSMS_EV_FREE || ev.kind == MSMS_EV_ACCESS) {
            std::snprintf(num, sizeof(num), ",\"ptr\":\"0x%016" PRIx64 "\"", ev.ptr);
            buf_ += num;
            buf_ += ",\"size\":" + std::to_string(ev.size);
        }
        buf_ += ",\"attrs\":{";
        for (uint32_t i = 0; ev.attrs && i < ev.attr_count; ++i) {
            if (i) buf_ += ',';
            json_string(buf_, view(ev.attrs[i].key));
            buf_ += ':';
            json_string(buf_, view(ev.attrs[i].value));
        }
        buf_ += '}';
        if (stacks_) {
            buf_ += ",\"py_stack\":";
            json_string(buf_, view(ev.py_stack));
            buf_ += ",\"c_stack\":";
            json_string(buf_, view(ev.c_stack));
        }
        buf_ += "}\n";
        if (buf_.size() >= kFlushAt) flush();
    }

    // The second and later calls find the file closed and do nothing.
    void finish() override {
        if (!f_) return;
        flush();
        close();
    }

private:
    static constexpr size_t kFlushAt = 1 << 20;

    void flush() {
        if (f_ && !buf_.empty()) {
            if (std::fwrite(buf_.data(), 1, buf_.size(), f_) != buf_.size()) {
                buf_.clear();
                throw std::runtime_error("cannot write " + path_ + ": " + std::strerror(errno));
            }
            buf_.clear();
        }
    }
    void close() {
        if (f_) std::fclose(f_);
        f_ = nullptr;
    }

    std::string file_;
    bool stacks_;
    std::string path_;
    std::FILE* f_ = nullptr;
    std::string buf_;
};

}  // namespace

MSMEMSCOPE_PLUGIN(NdjsonSink)
