// The command line: splits argv into our options and the program, and turns
// the options into raw values (checked later by validate()).
#include "config.h"

#include <boost/program_options.hpp>
#include <algorithm>
#include "options.h"
#include "util/text.h"

namespace msms {
using namespace cfgopt;

namespace po = boost::program_options;

bool parse_command_line(int argc, const char* const* argv, RawConfig& raw, std::vector<std::string>& errors) {
    // Split: options first, then the program (after "--" or at the first
    // word that is not an option) with all of its own arguments.
    std::vector<std::string> opts;
    int i = 1;
    for (; i < argc; ++i) {
        std::string a = argv[i];
        if (a == "--") {
            ++i;
            break;
        }
        if (a.size() < 2 || a[0] != '-') break;
        if (a == "-h") a = "--help";
        if (a == "-v") a = "--version";
        if (a.rfind("--", 0) != 0) {
            errors.push_back("unknown option '" + a + "' (see --help)");
            continue;
        }
        std::string name = a.substr(2);
        std::string value;
        bool has_value = false;
        size_t eq = name.find('=');
        if (eq != std::string::npos) {
            value = name.substr(eq + 1);
            name = name.substr(0, eq);
            has_value = true;
        }
        std::string canon = canonical(name);
        auto& names = option_names();
        if (std::find(names.begin(), names.end(), canon) == names.end()) {
            std::string guess = did_you_mean(canon, names);
            errors.push_back("unknown option '--" + name + "'" + (guess.empty() ? "" : "; did you mean '--" + guess + "'?"));
            continue;
        }
        if (option_takes_value(canon)) {
            if (!has_value) {
                if (i + 1 < argc) {
                    value = argv[++i];
                } else {
                    errors.push_back("--" + canon + ": missing value");
                    continue;
                }
            }
            // An empty value goes in without '=' and comes out as the implicit "".
            opts.push_back(value.empty() ? "--" + canon : "--" + canon + "=" + value);
        } else {
            if (has_value) {
                errors.push_back("--" + canon + ": takes no value");
                continue;
            }
            opts.push_back("--" + canon);
        }
    }
    for (; i < argc; ++i) raw.program.push_back(argv[i]);

    po::options_description desc;
    for (auto& o : options()) {
        if (!o.takes_value)
            desc.add_options()(o.name, o.help);
        else if (std::string(o.name) == "plugin-option" || std::string(o.name) == "plugin-path")
            desc.add_options()(o.name, po::value<std::vector<std::string>>()->composing(), o.help);
        else  // an empty value ("--analysis=") is meaningful: no analysis
            desc.add_options()(o.name,
                               po::value<std::vector<std::string>>()->implicit_value(std::vector<std::string>{""}, ""),
                               o.help);
    }
    po::variables_map vm;
    try {
        std::vector<const char*> args{"msmemscope"};
        for (auto& s : opts) args.push_back(s.c_str());
        po::store(po::parse_command_line(static_cast<int>(args.size()), args.data(), desc), vm);
    } catch (const std::exception& e) {
        errors.push_back(e.what());
        return false;
    }
    for (auto& o : options()) {
        std::string n = o.name;
        if (!vm.count(n)) continue;
        if (!o.takes_value) {
            if (n == "help") raw.help = true;
            else if (n == "version") raw.version = true;
            else if (n == "list-plugins") raw.list_plugins = true;
            else raw.values[n] = RawValue{"true", "--" + n};
            continue;
        }
        auto vals = vm[n].as<std::vector<std::string>>();
        if (n == "plugin-option") {
            for (auto& v : vals) {
                size_t dot = v.find('.'), eq = v.find('=');
                if (dot == std::string::npos || eq == std::string::npos || dot > eq) {
                    errors.push_back("--plugin-option: invalid value '" + v + "' (allowed: NAME.KEY=VALUE)");
                    continue;
                }
                std::string plugin = v.substr(0, dot);
                std::string key = v.substr(dot + 1, eq - dot - 1);
                raw.plugin_options[plugin][key] = v.substr(eq + 1);
                raw.plugin_option_origin[plugin] = "--plugin-option";
            }
            continue;
        }
        if (n == "plugin-path") {
            for (auto& v : vals) raw.search_paths.push_back(v);
            continue;
        }
        if (vals.size() > 1) {
            errors.push_back("--" + n + ": given more than once");
            continue;
        }
        if (n == "config") raw.config_file = vals[0];
        else raw.values[n] = RawValue{vals[0], "--" + n};
    }
    return errors.empty();
}

}  // namespace msms
