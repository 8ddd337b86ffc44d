#include "registry.h"

#include <dlfcn.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <boost/dll/runtime_symbol_info.hpp>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <cctype>
#include <set>

#include <msmemscope/entry.hpp>

#include "util/file_trust.h"
#include "util/text.h"

extern char** environ;

namespace fs = std::filesystem;

namespace msms {

std::string plugin_kind_name(int kind) {
    switch (kind) {
    case MSMS_KIND_COLLECTOR: return "collector";
    case MSMS_KIND_ANALYZER: return "analyzer";
    case MSMS_KIND_SINK: return "sink";
    default: return "unknown";
    }
}

std::string LoadedPlugin::kind_name() const { return plugin_kind_name(descriptor ? descriptor->kind : 0); }

bool valid_option_name(const std::string& n) {
    if (n.empty() || n.size() > 64 || !std::isalpha(static_cast<unsigned char>(n[0]))) return false;
    for (char c : n)
        if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_' && c != '-') return false;
    return true;
}

namespace {

constexpr size_t kMaxText = 4096;      // version, description, events, devices, option texts
constexpr uint32_t kMaxOptions = 256;
constexpr size_t kSize10 = offsetof(msms_plugin_descriptor, finish) + sizeof(void*);      // ABI 1.0
constexpr size_t kSize11 = offsetof(msms_plugin_descriptor, last_error) + sizeof(void*);  // ABI 1.1

// A string field: NULL allowed or not, at most `max` bytes.
std::string text_problem(const char* s, const std::string& what, size_t max, bool required) {
    if (!s) return required ? what + " is missing" : "";
    size_t n = strnlen(s, max + 1);
    if (n > max) return what + " is longer than " + std::to_string(max) + " bytes";
    if (required && n == 0) return what + " is empty";
    return "";
}

std::vector<std::string> split_on(const std::string& s, char sep) {
    std::vector<std::string> out;
    size_t start = 0;
    while (start <= s.size()) {
        size_t end = s.find(sep, start);
        if (end == std::string::npos) end = s.size();
        out.push_back(s.substr(start, end - start));
        start = end + 1;
    }
    return out;
}

std::string trim(const std::string& s) {
    size_t a = s.find_first_not_of(" \t"), b = s.find_last_not_of(" \t");
    return a == std::string::npos ? "" : s.substr(a, b - a + 1);
}

// The option schema: names, types, allowed values, ranges, then the defaults
// against the schema's own rules.
std::string schema_problem(const PluginInfo& info) {
    std::set<std::string> seen;
    for (auto& o : info.options) {
        if (!valid_option_name(o.name))
            return "option name '" + o.name + "' is not [A-Za-z][A-Za-z0-9_-]* of at most 64 characters";
        if (!seen.insert(o.name).second) return "option '" + o.name + "' is declared twice";
        if (o.type < MSMS_OPT_STRING || o.type > MSMS_OPT_LIST)
            return "option '" + o.name + "' has unknown type " + std::to_string(o.type) +
                   " (allowed: 0 string, 1 int, 2 bool, 3 enum, 4 list)";
        if (o.description.empty()) return "option '" + o.name + "' has no description";
        if (o.type == MSMS_OPT_ENUM || (o.type == MSMS_OPT_LIST && !o.allowed.empty())) {
            std::set<std::string> choices;
            bool any = false;
            for (auto& c : split_on(o.allowed, '|')) {
                if (o.allowed.empty()) break;
                if (c.empty() || c.find(',') != std::string::npos)
                    return "option '" + o.name + "' has an empty or comma-holding allowed value in '" + o.allowed + "'";
                if (!choices.insert(c).second) return "option '" + o.name + "' allows '" + c + "' twice";
                any = true;
            }
            if (!any) return "ENUM option '" + o.name + "' lists no allowed values";
        }
        if (o.type == MSMS_OPT_INT && o.min > o.max)
            return "INT option '" + o.name + "' has min > max (" + std::to_string(o.min) + " > " + std::to_string(o.max) + ")";
    }
    std::vector<std::string> errors;
    std::map<std::string, std::string> out;
    if (!validate_plugin_options(info, {}, "bad default", out, errors) && !errors.empty()) return errors.front();
    return "";
}

}  // namespace

PluginInfo plugin_info(const msms_plugin_descriptor* d) {
    PluginInfo info;
    info.name = d->type_name;
    info.kind = static_cast<int>(d->kind);
    info.events = split_list(d->events ? d->events : "");
    info.devices = split_list(d->devices ? d->devices : "");
    for (uint32_t i = 0; i < d->option_count; ++i) {
        const msms_option_spec& s = d->options[i];
        PluginInfo::Option o;
        o.name = s.name ? s.name : "";
        o.type = static_cast<int>(s.type);
        o.has_default = s.default_value != nullptr;
        o.default_value = s.default_value ? s.default_value : "";
        o.allowed = s.allowed ? s.allowed : "";
        o.min = s.min;
        o.max = s.max;
        o.description = s.description ? s.description : "";
        info.options.push_back(o);
    }
    return info;
}

std::string check_descriptor(const msms_plugin_descriptor* d) {
    if (!d) return "the entry returned no descriptor";
    if (d->abi_major != MSMS_ABI_MAJOR || d->abi_minor > MSMS_ABI_MINOR)
        return "wrong ABI version: got " + std::to_string(d->abi_major) + "." + std::to_string(d->abi_minor) +
               ", supported " + std::to_string(MSMS_ABI_MAJOR) + "." + std::to_string(MSMS_ABI_MINOR);
    // Everything up to finish() is part of ABI 1.0, last_error of 1.1.
    size_t need = d->abi_minor >= 1 ? kSize11 : kSize10;
    if (d->struct_size < need)
        return "descriptor too small for ABI " + std::to_string(d->abi_major) + "." + std::to_string(d->abi_minor) +
               ": " + std::to_string(d->struct_size) + " bytes (at least " + std::to_string(need) + ")";
    if (d->kind < MSMS_KIND_COLLECTOR || d->kind > MSMS_KIND_SINK)
        return "unknown plugin kind " + std::to_string(d->kind) + " (allowed: 1 collector, 2 analyzer, 3 sink)";
    std::string name = d->type_name ? std::string(d->type_name, strnlen(d->type_name, 65)) : "";
    bool ok = !name.empty() && name[0] >= 'a' && name[0] <= 'z' && name.size() <= 64;
    for (char c : name)
        if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_')) ok = false;
    if (!ok) return "invalid type name '" + name + "' (allowed: [a-z][a-z0-9_]*, at most 64 characters)";
    const std::string who = "plugin '" + name + "'";
    for (auto p : {text_problem(d->version, "its version", 64, true),
                   text_problem(d->description, "its description", kMaxText, true),
                   text_problem(d->events, "its events", kMaxText, false),
                   text_problem(d->devices, "its devices", kMaxText, false),
                   text_problem(d->agent_library, "its agent library", 255, false)})
        if (!p.empty()) return who + ": " + p;
    static const std::set<std::string> events{"alloc", "free", "launch", "access", "traceback"};
    for (auto& e : split_list(d->events ? d->events : ""))
        if (!events.count(trim(e)))
            return who + ": unknown event class '" + e + "' in events (allowed: alloc, free, launch, access, traceback)";
    if (d->kind == MSMS_KIND_COLLECTOR) {
        static const std::set<std::string> devices{"cpu", "npu", "cuda", "*"};
        for (auto& dv : split_list(d->devices ? d->devices : ""))
            if (!devices.count(trim(dv))) return who + ": unknown device '" + dv + "' in devices (allowed: cpu, npu, cuda, *)";
        if (d->agent_library && (std::string(d->agent_library).find('/') != std::string::npos || !*d->agent_library))
            return who + ": agent_library must be a file name, not a path: '" + d->agent_library + "'";
    } else if (d->agent_library) {
        return who + ": only collectors may name an agent library";
    }
    if (!d->create || !d->destroy) return who + " has no create/destroy function";
    if (d->kind != MSMS_KIND_COLLECTOR && !d->on_event) return who + " has no on_event function";
    if (d->option_count > kMaxOptions)
        return who + " declares " + std::to_string(d->option_count) + " options (at most " + std::to_string(kMaxOptions) + ")";
    if (d->option_count && !d->options) return who + " declares " + std::to_string(d->option_count) + " options but no table";
    for (uint32_t i = 0; i < d->option_count; ++i) {
        const msms_option_spec& s = d->options[i];
        if (!s.name) return who + " has an option without a name";
        std::string o = "option '" + std::string(s.name, strnlen(s.name, 65)) + "'";
        for (auto p : {text_problem(s.name, "option name", 64, true),
                       text_problem(s.default_value, o + ": its default", kMaxText, false),
                       text_problem(s.allowed, o + ": its allowed values", kMaxText, false),
                       text_problem(s.description, o + ": its description", kMaxText, false)})
            if (!p.empty()) return who + ": " + p;
    }
    std::string schema = schema_problem(plugin_info(d));
    if (!schema.empty()) return who + ": " + schema;
    return "";
}

std::string plugin_last_error(const msms_plugin_descriptor* d, void* instance) {
    if (!d || !instance || d->abi_minor < 1 || d->struct_size < kSize11 || !d->last_error) return "";
    const char* m = d->last_error(instance);
    // Shown on the terminal and in the summary: control characters escaped.
    return m ? escape_controls(std::string_view(m, strnlen(m, MSMS_ERROR_MESSAGE_SIZE))) : "";
}

Registry::Registry() {
    std::string helper = agent_dir() + "/msmemscope-plugin-probe";
    if (access(helper.c_str(), X_OK) == 0) probe_helper_ = helper;
}

bool Registry::load(const std::string& path) {
    auto refuse = [&](std::string why, std::string name = "") {
        refused_.push_back({path, std::move(why), std::move(name)});
        return false;
    };
    // As root, nothing another user could have written is loaded (#16).
    if (std::string why = untrusted_reason(path); !why.empty()) return refuse(why);
    dlerror();
    void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!handle) {
        const char* e = dlerror();
        return refuse(std::string("cannot load: ") + (e ? e : "unknown loader error"));
    }
    std::shared_ptr<void> lib(handle, [](void* h) { dlclose(h); });
    std::string why;
    msms_entry_fn entry = msmemscope::resolve_entry(handle, why);
    if (!entry) return refuse(why);
    const msms_plugin_descriptor* d = nullptr;
    try {
        d = entry();
    } catch (const std::exception& e) {
        return refuse(std::string("entry failed: ") + e.what());
    } catch (...) {
        return refuse("entry failed: unknown exception");
    }
    why = check_descriptor(d);
    std::string name = d && d->type_name ? std::string(d->type_name, strnlen(d->type_name, 65)) : "";
    if (!why.empty()) return refuse(why, name);
    for (auto& p : plugins_)
        if (p.info.name == name)
            return refuse("duplicate type name '" + name + "' (already provided by " + p.path + ")", name);
    LoadedPlugin lp;
    lp.path = path;
    lp.library = lib;
    lp.descriptor = d;
    lp.info = plugin_info(d);
    plugins_.push_back(std::move(lp));
    return true;
}

namespace {

std::string signal_name(int sig) {
    const char* n = sigabbrev_np(sig);
    return n ? std::string("SIG") + n : "signal " + std::to_string(sig);
}

// The last non-empty line of a helper's output (the loader's message).
std::string last_line(const std::string& text) {
    size_t end = text.find_last_not_of("\n\r \t");
    if (end == std::string::npos) return "";
    size_t start = text.rfind('\n', end);
    start = start == std::string::npos ? 0 : start + 1;
    std::string line = text.substr(start, end - start + 1);
    if (line.size() > 400) line = line.substr(0, 400) + "...";
    return line;
}

}  // namespace

std::vector<std::pair<size_t, std::string>> Registry::probe(const std::vector<std::string>& files) const {
    std::vector<std::pair<size_t, std::string>> out;
    if (probe_helper_.empty() || files.empty()) return out;
    // Not profiled: a Python program under the CLI (LD_PRELOAD of the agent,
    // MSMEMSCOPE_SESSION) would otherwise record the helper as one more
    // process of its session.
    std::vector<std::string> env_store;
    for (char** e = environ; e && *e; ++e) {
        std::string kv = *e;
        if (kv.rfind("LD_PRELOAD=", 0) == 0 || kv.rfind("MSMEMSCOPE_SESSION=", 0) == 0 ||
            kv.rfind("MSMEMSCOPE_AGENT_OPTS=", 0) == 0)
            continue;
        env_store.push_back(kv);
    }
    std::vector<char*> envp;
    for (auto& kv : env_store) envp.push_back(const_cast<char*>(kv.c_str()));
    envp.push_back(nullptr);
    size_t first = 0;
    while (first < files.size()) {
        int proto[2], err[2];
        if (pipe2(proto, O_CLOEXEC) != 0) return out;
        if (pipe2(err, O_CLOEXEC) != 0) {
            close(proto[0]);
            close(proto[1]);
            return out;
        }
        posix_spawn_file_actions_t fa;
        posix_spawn_file_actions_init(&fa);
        posix_spawn_file_actions_adddup2(&fa, err[1], 1);
        posix_spawn_file_actions_adddup2(&fa, err[1], 2);
        posix_spawn_file_actions_adddup2(&fa, proto[1], 3);
        std::vector<std::string> args{probe_helper_};
        for (size_t i = first; i < files.size(); ++i) args.push_back(files[i]);
        std::vector<char*> argv;
        for (auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
        argv.push_back(nullptr);
        pid_t pid = -1;
        int rc = posix_spawn(&pid, probe_helper_.c_str(), &fa, nullptr, argv.data(), envp.data());
        posix_spawn_file_actions_destroy(&fa);
        close(proto[1]);
        close(err[1]);
        if (rc != 0) {
            close(proto[0]);
            close(err[0]);
            return out;  // no helper: every file is loaded here only
        }
        std::string proto_text, err_text;
        pollfd fds[2] = {{proto[0], POLLIN, 0}, {err[0], POLLIN, 0}};
        int open_fds = 2;
        while (open_fds > 0) {
            if (poll(fds, 2, -1) < 0) {
                if (errno == EINTR) continue;
                break;
            }
            for (int i = 0; i < 2; ++i) {
                if (fds[i].fd < 0 || !(fds[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
                char buf[4096];
                ssize_t n = read(fds[i].fd, buf, sizeof(buf));
                if (n > 0) {
                    std::string& into = i == 0 ? proto_text : err_text;
                    if (into.size() < (1u << 20)) into.append(buf, static_cast<size_t>(n));
                } else if (n == 0 || (errno != EINTR && errno != EAGAIN)) {
                    close(fds[i].fd);
                    fds[i].fd = -1;
                    --open_fds;
                }
            }
        }
        int status = 0;
        while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
        }
        // "begin N" / "end N" lines, N relative to `first`.
        long begun = -1, ended = -1;
        for (auto& line : split_on(proto_text, '\n')) {
            if (line.rfind("begin ", 0) == 0) begun = std::strtol(line.c_str() + 6, nullptr, 10);
            else if (line.rfind("end ", 0) == 0) ended = std::strtol(line.c_str() + 4, nullptr, 10);
        }
        bool clean = WIFEXITED(status) && WEXITSTATUS(status) == 0;
        if (clean || begun < 0 || begun == ended) break;  // every file survived (or nothing to blame)
        std::string why = WIFSIGNALED(status)
                              ? "crashed (" + signal_name(WTERMSIG(status)) + ") while being loaded"
                              : "ended the process (exit status " + std::to_string(WEXITSTATUS(status)) +
                                    ") while being loaded";
        std::string said = last_line(err_text);
        if (!said.empty()) why += ": " + said;
        size_t culprit = first + static_cast<size_t>(begun);
        out.emplace_back(culprit, why);
        first = culprit + 1;
    }
    return out;
}

void Registry::discover(const std::vector<std::string>& dirs) {
    std::vector<std::string> all;
    for (auto& dir : dirs) {
        std::error_code ec;
        if (!fs::is_directory(dir, ec)) continue;
        std::vector<std::string> files;
        for (auto& e : fs::directory_iterator(dir, ec)) {
            std::string name = e.path().filename().string();
            if (name.rfind("libmsmemscope_plugin_", 0) == 0 && name.size() > 3 &&
                name.compare(name.size() - 3, 3, ".so") == 0)
                files.push_back(e.path().string());
        }
        std::sort(files.begin(), files.end());
        for (auto& f : files) all.push_back(f);
    }
    // As root, the helper is run only when it passes the check a plugin does
    // (#29): MSMEMSCOPE_HOME or the Python package's prefix may name a tree
    // another user owns. Refused, it is never run and the files are loaded
    // here only (each one checked again by load()).
    if (!probe_helper_.empty() && !all.empty()) {
        if (std::string why = untrusted_reason(probe_helper_); !why.empty()) {
            refused_.push_back({probe_helper_, "the plugin probe helper is not run: " + why, ""});
            probe_helper_.clear();
        }
    }
    auto crashed = probe(all);
    size_t next = 0;
    for (size_t i = 0; i < all.size(); ++i) {
        if (next < crashed.size() && crashed[next].first == i) {
            refused_.push_back({all[i], crashed[next].second, ""});
            ++next;
            continue;
        }
        load(all[i]);
    }
}

const LoadedPlugin* Registry::find(const std::string& name, int kind) const {
    for (auto& p : plugins_)
        if (p.info.name == name && (kind == 0 || p.info.kind == kind)) return &p;
    return nullptr;
}

const RefusedPlugin* Registry::refusal_of(const std::string& name) const {
    for (auto& r : refused_)
        if (r.name == name) return &r;
    for (auto& r : refused_)
        if (r.name.empty() && fs::path(r.path).filename().string() == "libmsmemscope_plugin_" + name + ".so") return &r;
    return nullptr;
}

Catalog Registry::catalog() const {
    Catalog c;
    for (auto& p : plugins_) c.push_back(p.info);
    return c;
}

std::string Registry::builtin_plugin_dir() { return agent_dir() + "/plugins"; }

std::string Registry::agent_dir() {
    if (const char* env = std::getenv("MSMEMSCOPE_HOME"))  // <prefix> of an install or build tree
        return std::string(env) + "/lib/msmemscope";
    fs::path exe = boost::dll::program_location().string();
    return (exe.parent_path().parent_path() / "lib" / "msmemscope").lexically_normal().string();
}

std::vector<std::string> Registry::search_dirs(const std::vector<std::string>& extra) {
    return search_dirs(builtin_plugin_dir(), extra);
}

std::vector<std::string> Registry::search_dirs(const std::string& builtin, const std::vector<std::string>& extra) {
    std::vector<std::string> dirs{builtin};
    for (auto& e : extra) dirs.push_back(e);
    if (const char* env = std::getenv("MSMEMSCOPE_PLUGIN_PATH")) {
        std::string s = env;
        size_t start = 0;
        while (start <= s.size()) {
            size_t colon = s.find(':', start);
            if (colon == std::string::npos) colon = s.size();
            if (colon > start) dirs.push_back(s.substr(start, colon - start));
            start = colon + 1;
        }
    }
    return dirs;
}

std::vector<RefusedPlugin> refusals_to_warn(const Registry& reg, const std::vector<std::string>& user_dirs,
                                            bool verbose) {
    auto folder = [](const fs::path& p) {
        std::string s = p.lexically_normal().string();
        while (s.size() > 1 && s.back() == '/') s.pop_back();
        return s;
    };
    std::set<std::string> user;
    for (auto& d : user_dirs) user.insert(folder(d));
    std::vector<RefusedPlugin> out;
    for (auto& r : reg.refused()) {
        if (!verbose && user.count(folder(fs::path(r.path).parent_path()))) continue;
        out.push_back({escape_controls(r.path), escape_controls(r.reason), r.name});
    }
    return out;
}

}  // namespace msms
