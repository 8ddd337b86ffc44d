// msmemscope: the command line. Parses and validates everything first, then
// runs the program (or a replay, or a comparison) and prints a summary.
#include <errno.h>
#include <string.h>
#include <unistd.h>

#include <iostream>

#include "compare.h"
#include "compare_log.h"
#include "config.h"
#include "offline/offline.h"
#include "registry.h"
#include "replay_devices.h"
#include "session.h"
#include "util/host_process.h"

#ifndef MSMEMSCOPE_VERSION
#define MSMEMSCOPE_VERSION "0.0.0"
#endif

using namespace msms;

namespace {

void warn(const std::vector<std::string>& warnings) {
    for (auto& w : warnings) std::cerr << "msmemscope: warning: " << w << "\n";
}

int fail(const std::vector<std::string>& errors) {
    for (auto& e : errors) std::cerr << "msmemscope: error: " << e << "\n";
    return 2;
}

void list_plugins(const Registry& reg) {
    std::cout << "NAME                 KIND       VERSION    PATH\n";
    for (auto& p : reg.plugins()) {
        std::string name = p.info.name, kind = p.kind_name(), ver = p.descriptor->version ? p.descriptor->version : "";
        name.resize(std::max<size_t>(name.size(), 20), ' ');
        kind.resize(std::max<size_t>(kind.size(), 10), ' ');
        ver.resize(std::max<size_t>(ver.size(), 10), ' ');
        std::cout << name << " " << kind << " " << ver << " " << p.path << "\n";
    }
    for (auto& r : reg.refused()) std::cout << "refused: " << r.path << ": " << r.reason << "\n";
}

int run_main(int argc, char** argv) {
    RawConfig raw;
    std::vector<std::string> errors;
    parse_command_line(argc, argv, raw, errors);
    if (raw.help) {
        std::cout << help_text();
        return 0;
    }
    if (raw.version) {
        std::cout << "msmemscope " << MSMEMSCOPE_VERSION << "\n";
        return 0;
    }
    if (!errors.empty()) return fail(errors);
    if (!raw.config_file.empty() && !load_yaml(raw.config_file, raw, errors)) return fail(errors);

    Registry registry;
    registry.discover(Registry::search_dirs(raw.search_paths));
    if (raw.list_plugins) {
        list_plugins(registry);
        return 0;
    }
    for (auto& r : registry.refused())
        std::cerr << "msmemscope: warning: plugin " << r.path << " refused: " << r.reason << "\n";

    Config cfg;
    if (!validate(raw, registry.catalog(), cfg, errors)) return fail(errors);
    warn(cfg.warnings);
    if (geteuid() == 0)
        std::cerr << "msmemscope: warning: running as root: plugins and agent libraries that a user other than "
                     "root owns or could write (they or a folder above them) are refused; run as an ordinary "
                     "user where possible\n";

    if (cfg.compare) {
        CompareLog log(cfg.output);
        int rc = compare_main(cfg);
        log.finish(rc);
        return rc;
    }
    if (cfg.analyze) return offline_main(cfg, registry);
    // A replay without --device reproduces the devices recorded in the capture.
    if (!cfg.replay.empty() && !cfg.devices_given)
        if (auto devices = capture_devices(cfg.replay); !devices.empty()) cfg.devices = devices;
    Session session(cfg, registry);
    int code;
    if (!cfg.serve_session.empty()) {
        code = session.serve(cfg.serve_session, cfg.parent_pid);
    } else if (!cfg.replay.empty()) {
        code = session.replay(cfg.replay);
    } else {
        code = session.run_program();
    }
    int status = session.print_summary(std::cout);
    // The program's own status when every output is complete; else 70 (an
    // output is incomplete) or 71 (a plugin was dropped): README "Exit status".
    return status ? status : code;
}

}  // namespace

int main(int argc, char** argv) {
    host_process_setup();
    // No exception leaves the tool unreported: one clear line and 70.
    try {
        int code = run_main(argc, argv);
        std::cout.flush();
        if (!std::cout) {
            std::cerr << "msmemscope: error: cannot write to standard output: " << strerror(errno) << "\n";
            return code ? code : 70;
        }
        return code;
    } catch (const std::bad_alloc&) {
        std::cerr << "msmemscope: error: out of memory (the host reached its memory or address-space limit, "
                     "ulimit -v); the output is incomplete\n";
    } catch (const std::exception& e) {
        std::cerr << "msmemscope: error: " << e.what() << "; the output is incomplete\n";
    } catch (...) {
        std::cerr << "msmemscope: error: unexpected failure; the output is incomplete\n";
    }
    return 70;
}
