// C++ side of the plugin SDK: base classes for the three plugin kinds, typed
// access to options and to the host, and MSMEMSCOPE_PLUGIN(Class), which
// builds the plain descriptor of abi.h and exports the one entry symbol.
//
//     class PeakAnalyzer : public msmemscope::IAnalyzer {
//     public:
//         static constexpr const char* kTypeName = "my_peak";
//         static constexpr const char* kVersion = "1.0.0";
//         static constexpr const char* kDescription = "peak bytes per step";
//         static constexpr const char* kEvents = "alloc,free";
//         PeakAnalyzer(msmemscope::Host host, const msmemscope::Options& opts);
//         void on_event(const msms_event& ev) override;
//     };
//     MSMEMSCOPE_PLUGIN(PeakAnalyzer)
//
// Optional members: `static const msms_option_spec* options(uint32_t& count)`,
// `kAgentLibrary`, `kDevices` (collectors). Exceptions thrown by the class are
// caught at the boundary and reported by the host with the plugin's name.
#pragma once

#include <boost/dll/alias.hpp>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <new>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "abi.h"
#include "output_files.hpp"

namespace msmemscope {

inline std::string_view view(msms_str s) { return std::string_view(s.data ? s.data : "", s.size); }
inline msms_str str(std::string_view s) { return msms_str{s.data(), static_cast<uint32_t>(s.size())}; }

// An event's device as the dump's "Device Id" column writes it: "cpu", the
// device number, or "N/A".
inline std::string device_label(const msms_event& ev) {
    switch (ev.device_kind) {
    case MSMS_DEV_CPU: return "cpu";
    case MSMS_DEV_NPU:
    case MSMS_DEV_CUDA: return std::to_string(ev.device_id < 0 ? 0 : ev.device_id);
    default: return "N/A";
    }
}

// A device for people to read: "cpu", "npu:0", "cuda:1" or "N/A".
inline std::string device_name(uint16_t kind, int16_t id) {
    switch (kind) {
    case MSMS_DEV_CPU: return "cpu";
    case MSMS_DEV_NPU: return "npu:" + std::to_string(id < 0 ? 0 : id);
    case MSMS_DEV_CUDA: return "cuda:" + std::to_string(id < 0 ? 0 : id);
    default: return "N/A";
    }
}

// Looks up an Attr entry of an event ("" when absent).
inline std::string_view attr(const msms_event& ev, std::string_view key) {
    for (uint32_t i = 0; i < ev.attr_count; ++i)
        if (view(ev.attrs[i].key) == key) return view(ev.attrs[i].value);
    return {};
}

// The blocks a row stands for: its Attr blocks (the imports' heap, Attr
// import:true, is one row for many host blocks: framework/agent/import_fold.h),
// 1 for every other row or a value that is not a positive 32-bit number.
inline uint32_t attr_blocks(const msms_event& ev) {
    std::string_view v = attr(ev, "blocks");
    if (v.empty() || v.size() > 10) return 1;
    uint64_t n = 0;
    for (char c : v) {
        if (c < '0' || c > '9') return 1;
        n = n * 10 + static_cast<uint64_t>(c - '0');
    }
    return n == 0 || n > UINT32_MAX ? 1u : static_cast<uint32_t>(n);
}

// The validated options of one plugin instance (every declared option is
// present, defaults filled in by the host).
class Options {
public:
    Options() = default;
    Options(const msms_kv* kv, uint32_t n) {
        for (uint32_t i = 0; i < n; ++i) items_.emplace_back(std::string(view(kv[i].key)), std::string(view(kv[i].value)));
    }
    bool has(std::string_view key) const { return find(key) != nullptr; }
    std::string get(std::string_view key, std::string_view fallback = {}) const {
        const std::string* v = find(key);
        return v ? *v : std::string(fallback);
    }
    long long get_int(std::string_view key, long long fallback = 0) const {
        const std::string* v = find(key);
        return v && !v->empty() ? std::strtoll(v->c_str(), nullptr, 10) : fallback;
    }
    bool get_bool(std::string_view key, bool fallback = false) const {
        const std::string* v = find(key);
        if (!v || v->empty()) return fallback;
        return *v == "true" || *v == "1" || *v == "yes" || *v == "on";
    }
    std::vector<std::string> get_list(std::string_view key) const {
        std::vector<std::string> out;
        std::string v = get(key);
        size_t start = 0;
        while (start <= v.size() && !v.empty()) {
            size_t comma = v.find(',', start);
            if (comma == std::string::npos) comma = v.size();
            if (comma > start) out.push_back(v.substr(start, comma - start));
            start = comma + 1;
        }
        return out;
    }
    const std::vector<std::pair<std::string, std::string>>& items() const { return items_; }

private:
    const std::string* find(std::string_view key) const {
        for (auto& kv : items_)
            if (kv.first == key) return &kv.second;
        return nullptr;
    }
    std::vector<std::pair<std::string, std::string>> items_;
};

// What a plugin may ask of the host.
class Host {
public:
    Host() = default;
    explicit Host(const msms_host_api* api) : api_(api) {}
    void info(std::string_view m) const { log(0, m); }
    void warn(std::string_view m) const { log(1, m); }
    void error(std::string_view m) const { log(2, m); }
    void log(int level, std::string_view m) const {
        if (api_ && api_->log) api_->log(api_->host, level, str(m));
    }
    bool add_attr(std::string_view key, std::string_view value) const {
        return api_ && api_->add_attr && api_->add_attr(api_->host, str(key), str(value)) == MSMS_OK;
    }
    bool annotate(uint64_t event_id, std::string_view key, std::string_view value) const {
        return api_ && api_->annotate && api_->annotate(api_->host, event_id, str(key), str(value)) == MSMS_OK;
    }
    bool emit(const msms_event& ev) const { return api_ && api_->emit && api_->emit(api_->host, &ev) == MSMS_OK; }
    bool add_finding(std::string_view table, const std::vector<std::pair<std::string, std::string>>& cols) const {
        if (!api_ || !api_->add_finding) return false;
        std::vector<msms_kv> kv;
        kv.reserve(cols.size());
        for (auto& c : cols) kv.push_back({str(c.first), str(c.second)});
        return api_->add_finding(api_->host, str(table), kv.data(), static_cast<uint32_t>(kv.size())) == MSMS_OK;
    }
    void report(std::string_view line) const {
        if (api_ && api_->report) api_->report(api_->host, str(line));
    }
    // ABI 1.2: where this plugin's own work stands (the status line on a
    // terminal), e.g. host.progress(bytes_written, total_bytes). total 0 =
    // not known; `what` empty = "writing <type name>". Does nothing on a
    // host older than 1.2. Returns whether the host took it.
    bool progress(uint64_t done, uint64_t total = 0, std::string_view what = {},
                  msms_progress_unit unit = MSMS_PROGRESS_BYTES, bool estimate = false) const {
        if (!has_progress()) return false;
        msms_progress p{};
        p.struct_size = sizeof(p);
        p.unit = static_cast<uint32_t>(unit);
        p.what = str(what);
        p.done = done;
        p.total = total;
        p.flags = estimate ? MSMS_PROGRESS_ESTIMATE : 0u;
        return api_->progress(api_->host, &p) == MSMS_OK;
    }
    // The host is 1.2 or newer and takes progress reports.
    bool has_progress() const {
        return api_ && api_->struct_size >= offsetof(msms_host_api, progress) + sizeof(api_->progress) &&
               api_->progress;
    }
    const msms_host_api* api() const { return api_; }

private:
    const msms_host_api* api_ = nullptr;
};

struct RunInfo {
    uint32_t pid = 0;
    std::string output_dir, timestamp, config_json, command_line;
    uint32_t level = 0;
    // ABI 1.3: the run folder's descriptor (opened without following links;
    // the host owns it). -1 from an older host: open_output_dir() then opens
    // output_dir itself. Create files with msmemscope::files::create(), never
    // by path (msmemscope/output_files.hpp).
    int output_dir_fd = -1;
    RunInfo() = default;
    explicit RunInfo(const msms_run_info& r)
        : pid(r.pid), output_dir(view(r.output_dir)), timestamp(view(r.timestamp)),
          config_json(view(r.config_json)), command_line(view(r.command_line)), level(r.level),
          output_dir_fd(r.struct_size >= offsetof(msms_run_info, output_dir_fd) + sizeof(r.output_dir_fd)
                            ? r.output_dir_fd
                            : -1) {}
    // A descriptor of the run's folder that the caller owns (and closes):
    // a duplicate of output_dir_fd, or (older hosts, tests) output_dir opened
    // O_DIRECTORY|O_NOFOLLOW. -1 with `error` set when neither works.
    int open_output_dir(std::string& error) const {
        if (output_dir_fd >= 0) {
            int fd = ::fcntl(output_dir_fd, F_DUPFD_CLOEXEC, 3);
            if (fd < 0) error = output_dir + ": " + std::strerror(errno);
            return fd;
        }
        int fd = ::open(output_dir.empty() ? "." : output_dir.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (fd < 0) error = (output_dir.empty() ? std::string(".") : output_dir) + ": " + std::strerror(errno);
        return fd;
    }
};

namespace detail {
template <class T>
struct Adapter;
}

// Common base; the three kinds below fix the descriptor's kind.
class PluginBase {
public:
    virtual ~PluginBase() = default;
    virtual void begin(const RunInfo&) {}
    virtual void on_event(const msms_event&) {}
    virtual void on_annotation(uint64_t /*event_id*/, std::string_view /*key*/, std::string_view /*value*/) {}
    virtual void on_finding(std::string_view /*table*/, const msms_kv* /*cols*/, uint32_t /*n*/) {}
    virtual void finish() {}

private:
    template <class T>
    friend struct detail::Adapter;
    // The finish rule (sdk/README.md): only the first finish() runs; later
    // calls return MSMS_OK and do nothing. Enforced here for every C++ plugin.
    bool finished_ = false;
    // The message of the last failed on_event/on_annotation/on_finding
    // (descriptor.last_error, ABI 1.1).
    msms_error error_{};
};

class IAnalyzer : public PluginBase {
public:
    static constexpr msms_plugin_kind kKind = MSMS_KIND_ANALYZER;
    void on_event(const msms_event& ev) override = 0;
};

class ISink : public PluginBase {
public:
    static constexpr msms_plugin_kind kKind = MSMS_KIND_SINK;
    void on_event(const msms_event& ev) override = 0;
};

// Host-side half of a collector: declares the agent library to load into the
// target and the devices it serves; may also see the event stream.
class ICollector : public PluginBase {
public:
    static constexpr msms_plugin_kind kKind = MSMS_KIND_COLLECTOR;
};

namespace detail {

template <class T, class = void>
struct has_options : std::false_type {};
template <class T>
struct has_options<T, std::void_t<decltype(T::options(std::declval<uint32_t&>()))>> : std::true_type {};
template <class T, class = void>
struct agent_library {
    static constexpr const char* value = nullptr;
};
template <class T>
struct agent_library<T, std::void_t<decltype(T::kAgentLibrary)>> {
    static constexpr const char* value = T::kAgentLibrary;
};
template <class T, class = void>
struct devices {
    static constexpr const char* value = nullptr;
};
template <class T>
struct devices<T, std::void_t<decltype(T::kDevices)>> {
    static constexpr const char* value = T::kDevices;
};
template <class T, class = void>
struct events {
    static constexpr const char* value = "";
};
template <class T>
struct events<T, std::void_t<decltype(T::kEvents)>> {
    static constexpr const char* value = T::kEvents;
};

inline void set_error(msms_error* err, const char* what) {
    if (!err) return;
    std::snprintf(err->message, sizeof(err->message), "%s", what ? what : "unknown error");
}

template <class F>
int guarded(msms_error* err, F&& f) noexcept {
    try {
        f();
        return MSMS_OK;
    } catch (const std::bad_alloc& e) {
        set_error(err, e.what());
        return MSMS_ERR_OUT_OF_MEMORY;
    } catch (const std::exception& e) {
        set_error(err, e.what());
    } catch (...) {
        set_error(err, "unknown exception");
    }
    return MSMS_ERR_EXCEPTION;
}

template <class T>
struct Adapter {
    static int create(const msms_host_api* host, const msms_kv* opts, uint32_t n, void** out, msms_error* err) {
        return guarded(err, [&] { *out = static_cast<PluginBase*>(new T(Host(host), Options(opts, n))); });
    }
    static void destroy(void* inst) {
        try {
            delete static_cast<PluginBase*>(inst);
        } catch (...) {
        }
    }
    static int begin(void* inst, const msms_run_info* run, msms_error* err) {
        return guarded(err, [&] { static_cast<PluginBase*>(inst)->begin(RunInfo(*run)); });
    }
    static int on_event(void* inst, const msms_event* ev) {
        auto* p = static_cast<PluginBase*>(inst);
        return guarded(&p->error_, [&] { p->on_event(*ev); });
    }
    static int on_annotation(void* inst, uint64_t id, msms_str key, msms_str value) {
        auto* p = static_cast<PluginBase*>(inst);
        return guarded(&p->error_, [&] { p->on_annotation(id, view(key), view(value)); });
    }
    static int on_finding(void* inst, msms_str table, const msms_kv* cols, uint32_t n) {
        auto* p = static_cast<PluginBase*>(inst);
        return guarded(&p->error_, [&] { p->on_finding(view(table), cols, n); });
    }
    static const char* last_error(void* inst) { return static_cast<PluginBase*>(inst)->error_.message; }
    static int finish(void* inst, msms_error* err) {
        auto* p = static_cast<PluginBase*>(inst);
        if (p->finished_) return MSMS_OK;
        p->finished_ = true;
        return guarded(err, [&] { p->finish(); });
    }
    static const msms_plugin_descriptor* descriptor() {
        static const msms_plugin_descriptor d = [] {
            msms_plugin_descriptor x;
            std::memset(&x, 0, sizeof(x));
            x.abi_major = MSMS_ABI_MAJOR;
            x.abi_minor = MSMS_ABI_MINOR;
            x.struct_size = sizeof(msms_plugin_descriptor);
            x.kind = T::kKind;
            x.type_name = T::kTypeName;
            x.version = T::kVersion;
            x.description = T::kDescription;
            x.events = events<T>::value;
            if constexpr (has_options<T>::value) {
                x.options = T::options(x.option_count);
            }
            x.agent_library = agent_library<T>::value;
            x.devices = devices<T>::value;
            x.create = &create;
            x.destroy = &destroy;
            x.begin = &begin;
            x.on_event = &on_event;
            x.on_annotation = &on_annotation;
            x.on_finding = &on_finding;
            x.finish = &finish;
            x.last_error = &last_error;
            return x;
        }();
        return &d;
    }
};

}  // namespace detail
}  // namespace msmemscope

// Exports the plugin's one entry symbol (MSMS_ENTRY_SYMBOL). One per .so.
#define MSMEMSCOPE_PLUGIN(Class)                                                          \
    namespace {                                                                           \
    const msms_plugin_descriptor* msmemscope_entry_impl() {                               \
        return ::msmemscope::detail::Adapter<Class>::descriptor();                        \
    }                                                                                     \
    }                                                                                     \
    BOOST_DLL_ALIAS(msmemscope_entry_impl, msmemscope_plugin)
