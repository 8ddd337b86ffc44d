// msmemscope: the command line. Parses and validates everything first, then
// runs the program (or a replay, or a comparison) and prints a summary.
#include <unistd.h>

#include <iostream>

#include "compare.h"
#include "config.h"
#include "offline/offline.h"
#include "registry.h"
#include "session.h"

#ifndef MSMEMSCOPE_VERSION
#define MSMEMSCOPE_VERSION "0.0.0"
#endif

using namespace msms;

namespace {

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

}  // namespace

int main(int argc, char** argv) {
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
    if (geteuid() == 0)
        std::cerr << "msmemscope: warning: running as root: file permission checks are skipped, which is a "
                     "security risk; run as an ordinary user where possible\n";

    if (cfg.compare) return compare_main(cfg);
    if (cfg.analyze) return offline_main(cfg, registry);
    Session session(cfg, registry);
    int code;
    if (!cfg.serve_session.empty()) {
        code = session.serve(cfg.serve_session, cfg.parent_pid);
    } else if (!cfg.replay.empty()) {
        code = session.replay(cfg.replay);
    } else {
        code = session.run_program();
    }
    session.print_summary(std::cout);
    return code;
}
