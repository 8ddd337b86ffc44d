// The configuration under test: a small plugin catalog (leaks, decompose,
// inefficient, oom, csv/db/trace sinks, a cpu collector) and run(), which
// parses argv (and an optional YAML text) and validates like main() does.
#pragma once

#include <doctest/doctest.h>

#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include <msmemscope/abi.h>

#include "config.h"

namespace msms_test {
using namespace msms;

inline Catalog catalog() {
    Catalog c;
    PluginInfo leaks;
    leaks.name = "leaks";
    leaks.kind = MSMS_KIND_ANALYZER;
    leaks.events = {"alloc", "free"};
    c.push_back(leaks);
    PluginInfo decompose;
    decompose.name = "decompose";
    decompose.kind = MSMS_KIND_ANALYZER;
    decompose.events = {"alloc", "free", "access"};
    c.push_back(decompose);
    PluginInfo ineff;
    ineff.name = "inefficient";
    ineff.kind = MSMS_KIND_ANALYZER;
    ineff.events = {"alloc", "free", "access", "launch"};
    PluginInfo::Option thr;
    thr.name = "idle_threshold";
    thr.type = MSMS_OPT_INT;
    thr.default_value = "3000";
    thr.has_default = true;
    thr.min = 1;
    thr.max = 1000000;
    ineff.options.push_back(thr);
    c.push_back(ineff);
    PluginInfo oom;
    oom.name = "oom";
    oom.kind = MSMS_KIND_ANALYZER;
    PluginInfo::Option k;
    k.name = "k";
    k.type = MSMS_OPT_INT;
    k.default_value = "10";
    k.has_default = true;
    k.min = 1;
    k.max = 1000;
    oom.options.push_back(k);
    c.push_back(oom);
    for (const char* s : {"csv", "db", "trace"}) {
        PluginInfo p;
        p.name = s;
        p.kind = MSMS_KIND_SINK;
        c.push_back(p);
    }
    PluginInfo heap;
    heap.name = "host_heap";
    heap.kind = MSMS_KIND_COLLECTOR;
    heap.events = {"alloc", "free"};
    heap.devices = {"cpu"};
    c.push_back(heap);
    return c;
}

struct Result {
    bool ok;
    Config cfg;
    RawConfig raw;
    std::vector<std::string> errors;
};

inline Result run(std::vector<std::string> args, const std::string& yaml = "") {
    std::vector<const char*> argv{"msmemscope"};
    for (auto& a : args) argv.push_back(a.c_str());
    Result r;
    RawConfig& raw = r.raw;
    parse_command_line(static_cast<int>(argv.size()), argv.data(), raw, r.errors);
    if (!yaml.empty()) {
        std::string path = "/tmp/msmemscope_test_config_" + std::to_string(getpid()) + ".yaml";
        std::ofstream(path) << yaml;
        raw.config_file = path;
        load_yaml(path, raw, r.errors);
        std::remove(path.c_str());
    }
    if (r.errors.empty()) validate(raw, catalog(), r.cfg, r.errors);
    r.ok = r.errors.empty();
    return r;
}

inline std::string only_error(const Result& r) {
    REQUIRE(r.errors.size() == 1);
    return r.errors[0];
}

}  // namespace msms_test
