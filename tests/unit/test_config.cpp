// Config validation: every bad input gets one exact message naming the option
// and what is allowed; good inputs give the documented effective config.
#include <doctest/doctest.h>

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include <msmemscope/abi.h>

#include "config.h"
#include "api_words.h"
#include "config_fixture.h"

using namespace msms;
using namespace msms_test;


TEST_CASE("defaults follow COMPAT §1") {
    auto r = run({"--", "prog"});
    REQUIRE(r.ok);
    CHECK(r.cfg.devices == std::vector<std::string>{"npu"});
    CHECK(r.cfg.level == 0);
    CHECK(r.cfg.events == std::set<std::string>{"alloc", "free", "launch"});
    CHECK(r.cfg.analyzers == std::vector<std::string>{"leaks"});
    CHECK(r.cfg.sinks == std::vector<std::string>{"csv"});
    CHECK(r.cfg.output == "memscopeDumpResults");
    CHECK(r.cfg.log_level == "info");
    CHECK(r.cfg.collect_mode == "immediate");
    CHECK(r.cfg.program == std::vector<std::string>{"prog"});
}

TEST_CASE("our options are read anywhere before --, only -- protects the program's own") {
    auto r = run({"--device=cpu", "bash", "user.sh", "--device=npu", "--level=kernel"});
    REQUIRE(r.ok);
    CHECK(r.cfg.devices == std::vector<std::string>{"npu"});  // the last one given
    CHECK(r.cfg.level == 1);
    CHECK(r.cfg.program == std::vector<std::string>{"bash", "user.sh"});
    auto p = run({"--device=cpu", "--", "bash", "user.sh", "--device=npu"});
    REQUIRE(p.ok);
    CHECK(p.cfg.program == std::vector<std::string>{"bash", "user.sh", "--device=npu"});
    CHECK(only_error(run({"--device=cpu", "python", "train.py", "--lr=0.1"})) ==
          "unknown option '--lr'; put the program's own options after '--' (msmemscope [options] -- <prog> [args])");
}

TEST_CASE("options also take their value as the next word") {
    auto r = run({"--output", "/tmp/x", "--", "prog"});
    REQUIRE(r.ok);
    CHECK(r.cfg.output == "/tmp/x");
}

TEST_CASE("unknown options suggest the closest one") {
    CHECK(only_error(run({"--devce=cpu", "--", "p"})) == "unknown option '--devce'; did you mean '--device'?");
    CHECK(only_error(run({"--zzzzzzzz", "--", "p"})) == "unknown option '--zzzzzzzz'");
    CHECK(only_error(run({"-x", "--", "p"})) == "unknown option '-x' (see --help)");
}

TEST_CASE("device values") {
    CHECK(only_error(run({"--device=gpu", "--", "p"})) ==
          "--device: invalid value 'gpu' (allowed: npu, npu:{0..31}, cpu, cuda, cuda:{0..31})");
    CHECK(only_error(run({"--device=npu:32", "--", "p"})) ==
          "--device: invalid value 'npu:32' (allowed: npu, npu:{0..31}, cpu, cuda, cuda:{0..31})");
    CHECK(only_error(run({"--device=", "--", "p"})) ==
          "--device: empty value (allowed: npu, npu:{0..31}, cpu, cuda, cuda:{0..31})");
    auto r = run({"--device=npu:1\xEF\xBC\x8C" "cpu,npu:7", "--", "p"});
    REQUIRE(r.ok);
    CHECK(r.cfg.devices == std::vector<std::string>{"npu:1", "cpu", "npu:7"});
    auto all = run({"--device=npu:1,npu", "--", "p"});
    REQUIRE(all.ok);
    CHECK(all.cfg.devices == std::vector<std::string>{"npu"});
    CHECK(run({"--device=cuda:3", "--", "p"}).cfg.backend() == "cuda");
}

TEST_CASE("steps") {
    CHECK(only_error(run({"--steps=1,2,3,4,5,6", "--", "p"})) == "--steps: at most 5 steps, got 6");
    CHECK(only_error(run({"--steps=1,x", "--", "p"})) ==
          "--steps: invalid value 'x' (allowed: step ids 1..4294967295, e.g. --steps=1,2,3)");
    CHECK(run({"--steps=1,3", "--", "p"}).cfg.steps == std::vector<long long>{1, 3});
}

TEST_CASE("level, events and their implications") {
    CHECK(only_error(run({"--level=2", "--", "p"})) == "--level: invalid value '2' (allowed: op, kernel, op,kernel; 0 = op, 1 = kernel)");
    CHECK(run({"--level=kernel", "--", "p"}).cfg.level == 1);
    CHECK(only_error(run({"--events=alloc,foo", "--", "p"})) ==
          "--events: invalid value 'foo' (allowed: alloc, free, launch, access, traceback, none)");
    // alloc implies free; access implies alloc and free
    CHECK(run({"--events=alloc", "--analysis=", "--", "p"}).cfg.events == std::set<std::string>{"alloc", "free"});
    CHECK(run({"--events=access", "--analysis=", "--", "p"}).cfg.events ==
          std::set<std::string>{"access", "alloc", "free"});
    CHECK(run({"--events=launch", "--analysis=", "--", "p"}).cfg.events == std::set<std::string>{"launch"});
    // analyzers turn on what they declare
    CHECK(run({"--events=launch", "--analysis=leaks", "--", "p"}).cfg.events ==
          std::set<std::string>{"alloc", "free", "launch"});
    CHECK(run({"--events=traceback", "--analysis=inefficient", "--", "p"}).cfg.events ==
          std::set<std::string>{"access", "alloc", "free", "launch", "traceback"});
}

TEST_CASE("call stacks") {
    auto r = run({"--call-stack=c:20,python", "--", "p"});
    REQUIRE(r.ok);
    CHECK(r.cfg.c_depth == 20);
    CHECK(r.cfg.py_depth == 50);
    CHECK(only_error(run({"--call-stack=c:2000", "--", "p"})) ==
          "--call-stack: depth '2000' of c out of range (allowed: 0..1000)");
    CHECK(only_error(run({"--call-stack=java", "--", "p"})) ==
          "--call-stack: invalid value 'java' (allowed: c, python, each with an optional :depth 0..1000, e.g. "
          "c:20,python:10)");
}

TEST_CASE("analysis names, empty analysis and the oom:K argument") {
    CHECK(run({"--analysis=", "--", "p"}).cfg.analyzers.empty());
    CHECK(only_error(run({"--analysis=leak", "--", "p"})) ==
          "--analysis: unknown analyzer 'leak'; did you mean 'leaks'? (available: decompose, inefficient, leaks, oom, or none)");
    auto r = run({"--analysis=oom:25", "--", "p"});
    REQUIRE(r.ok);
    CHECK(r.cfg.plugin_options["oom"]["k"] == "25");
    auto zero = run({"--analysis=oom:0", "--", "p"});  // msMemScope: warns and keeps K=10
    REQUIRE(zero.ok);
    CHECK(zero.cfg.plugin_options["oom"]["k"] == "10");
    CHECK(zero.cfg.warnings ==
          std::vector<std::string>{"--analysis: invalid OOM top-K value '0' (allowed: 1..1000); using the default 10"});
    CHECK(only_error(run({"--analysis=leaks:3", "--", "p"})) ==
          "--analysis: analyzer 'leaks' takes no ':' argument (only oom[:K], K 1..1000; other options: "
          "--plugin-option=leaks.KEY=VALUE)");
}

TEST_CASE("data format, sinks, output, log level, collect mode") {
    CHECK(only_error(run({"--data-format=json", "--", "p"})) == "--data-format: invalid value 'json' (allowed: csv, db)");
    CHECK(run({"--data-format=db", "--sinks=trace", "--", "p"}).cfg.sinks == std::vector<std::string>{"db", "trace"});
    CHECK(only_error(run({"--sinks=htm", "--", "p"})) ==
          "--sinks: unknown sink 'htm' (available: csv, db, trace)");
    CHECK(only_error(run({"--output=" + std::string(4097, 'a'), "--", "p"})) ==
          "--output: path longer than 4096 characters");
    CHECK(only_error(run({"--log-level=trace", "--", "p"})) ==
          "--log-level: invalid value 'trace' (allowed: debug, info, warning, warn, error)");
    CHECK(run({"--log-level=warning", "--", "p"}).cfg.log_level == "warn");
    CHECK(only_error(run({"--collect-mode=later", "--", "p"})) ==
          "--collect-mode: invalid value 'later' (allowed: immediate, deferred)");
}

TEST_CASE("--output: 32 folder levels, counted on the absolute path's folder names") {
    auto deep = [](int n, const std::string& tail) {
        std::string p;
        for (int i = 0; i < n; ++i) p += "/d";
        return p + tail;
    };
    CHECK(run({"--output=" + deep(32, ""), "--", "p"}).ok);
    CHECK(run({"--output=" + deep(32, "/"), "--", "p"}).ok);  // a trailing '/' names no folder
    CHECK(run({"--output=" + deep(31, "//./d/"), "--", "p"}).ok);
    CHECK(only_error(run({"--output=" + deep(33, ""), "--", "p"})) == "--output: more than 32 folder levels deep");
    // A relative path counts the working directory's folders too (as upstream's check of the resolved path).
    char cwd[4096];
    REQUIRE(getcwd(cwd, sizeof cwd));
    int here = 0;
    for (const char* c = cwd; *c; ++c) here += *c == '/' && c[1] && c[1] != '/';
    if (here < 32) {
        std::string rel = deep(32 - here, "").substr(1);
        CHECK(run({"--output=" + rel, "--", "p"}).ok);
        CHECK(only_error(run({"--output=" + rel + "/e", "--", "p"})) == "--output: more than 32 folder levels deep");
    }
}

TEST_CASE("watch") {
    auto r = run({"--watch=op0:out1,op1,full-content", "--", "p"});  // our older outN form still reads
    REQUIRE(r.ok);
    REQUIRE(r.cfg.watch.has_value());
    CHECK(r.cfg.watch->start == "op0");
    CHECK(r.cfg.watch->out_index == 1);
    CHECK(r.cfg.watch->end == "op1");
    CHECK(r.cfg.watch->full_content);
    CHECK(r.cfg.watch->text == "op0:out1,op1,full-content");
    CHECK(run({"--watch=,op9", "--", "p"}).cfg.watch->end == "op9");
    CHECK(run({"--watch=,op9", "--", "p"}).cfg.watch->text == ",op9");
    auto scoped = run({"--watch=aten::mul:3,aten::sum", "--", "p"});
    REQUIRE(scoped.ok);
    CHECK(scoped.cfg.watch->start == "aten::mul");
    CHECK(scoped.cfg.watch->out_index == 3);
    CHECK(scoped.cfg.watch->text == "aten::mul:out3,aten::sum");
    CHECK(only_error(run({"--watch=op9", "--", "p"})) ==
          "--watch: invalid value 'op9': no ',' before the end op (allowed: [start[:N]],end[,full-content], e.g. "
          "--watch=op1:0,op2 or --watch=,op2)");
    CHECK(only_error(run({"--watch=a,b,c", "--", "p"})) ==
          "--watch: invalid value 'a,b,c': only 'full-content' may follow the end op (allowed: [start[:N]],end[,"
          "full-content], e.g. --watch=op1:0,op2 or --watch=,op2)");
}

TEST_CASE("compare and missing program") {
    CHECK(only_error(run({})) == "no program given (usage: msmemscope [options] -- <prog> [args], or see --help)");
    CHECK(only_error(run({"--compare", "--input=a"})) ==
          "--input: --compare needs exactly two inputs, --input=<base>,<compare>");
    CHECK(only_error(run({"--compare", "--input=/nonexistent/a\xEF\xBC\x8C/tmp"})) ==
          "--input: '/nonexistent/a' does not exist");
    CHECK(run({"--compare", "--input=/tmp\xEF\xBC\x8C/tmp"}).ok);
    CHECK(only_error(run({"--input=a,b", "--", "p"})) == "--input: only valid together with --compare");
}

TEST_CASE("plugin options are checked against the plugin's schema") {
    CHECK(only_error(run({"--plugin-option=inefficient.idle=5", "--", "p"})) ==
          "--plugin-option: plugin 'inefficient' has no option 'idle'; did you mean 'idle_threshold'? (options: "
          "idle_threshold)");
    CHECK(only_error(run({"--plugin-option=inefficient.idle_threshold=abc", "--", "p"})) ==
          "--plugin-option: inefficient.idle_threshold: invalid value 'abc' (allowed: an integer in 1..1000000)");
    CHECK(only_error(run({"--plugin-option=nosuch.x=1", "--", "p"})) ==
          "--plugin-option: options for unknown plugin 'nosuch'");
    auto r = run({"--", "p"});
    CHECK(r.cfg.plugin_options["inefficient"]["idle_threshold"] == "3000");
}

TEST_CASE("YAML: keys with - or _, lists, the command line wins, unknown keys") {
    auto r = run({"--device=cpu", "--", "p"}, "device: npu\ncall_stack: c:5\nevents: [alloc, launch]\nanalysis: \"\"\n");
    REQUIRE(r.ok);
    CHECK(r.cfg.devices == std::vector<std::string>{"cpu"});
    CHECK(r.cfg.c_depth == 5);
    CHECK(r.cfg.events == std::set<std::string>{"alloc", "free", "launch"});
    CHECK(r.cfg.analyzers.empty());

    auto bad = run({"--", "p"}, "device: cpu\ndevce: npu\n");
    REQUIRE(bad.errors.size() == 1);
    CHECK(bad.errors[0].find(":2: unknown key 'devce'; did you mean 'device'?") != std::string::npos);

    auto val = run({"--", "p"}, "level: 7\n");
    REQUIRE(val.errors.size() == 1);
    CHECK(val.errors[0].find(":1: level: invalid value '7' (allowed: op, kernel, op,kernel; 0 = op, 1 = kernel)") !=
          std::string::npos);

    auto plug = run({"--", "p"}, "plugins:\n  search_paths: [/tmp]\n  options:\n    oom: {k: 5}\n");
    REQUIRE(plug.ok);
    CHECK(plug.cfg.plugin_search_paths == std::vector<std::string>{"/tmp"});
    CHECK(plug.cfg.plugin_options["oom"]["k"] == "5");

    auto pk = run({"--", "p"}, "plugins:\n  serch_paths: [a]\n");
    REQUIRE(pk.errors.size() == 1);
    CHECK(pk.errors[0].find(":2: plugins.serch_paths: unknown key; did you mean 'search-paths'? (allowed: search_paths, options)") !=
          std::string::npos);
}

TEST_CASE("every error is reported, not just the first") {
    auto r = run({"--device=gpu", "--level=9", "--data-format=xml", "--", "p"});
    CHECK(r.errors.size() == 3);
}

TEST_CASE("agent options carry what the target needs") {
    auto r = run({"--device=cpu", "--events=alloc", "--call-stack=c:8", "--analysis=", "--", "p"});
    REQUIRE(r.ok);
    std::string s = r.cfg.agent_options();
    CHECK(s.find("events=alloc,free;") == 0);
    CHECK(s.find(";call_stack=c:8;") != std::string::npos);
    CHECK(s.find(";collectors=host_heap") != std::string::npos);
    // upstream's default level: op
    CHECK(s.find(";level=op;") != std::string::npos);
}

TEST_CASE("operators' accesses are collected only where something reads or writes them (issue #30)") {
    auto op_access_off = [](std::vector<std::string> args) {
        args.insert(args.end(), {"--", "p"});
        auto r = run(args);
        REQUIRE(r.ok);
        CHECK(r.cfg.events.count("access"));  // the owner tags come through either way
        return r.cfg.agent_options().find(";op_access=0;") != std::string::npos;
    };
    // decompose's access is its owner tags: neither written nor read per operator
    CHECK(op_access_off({"--device=cpu", "--analysis=decompose"}));
    CHECK(op_access_off({"--device=cpu", "--analysis=leaks,decompose", "--aggregate"}));
    // an analyzer that reads them, or access asked for (and so written): collected
    CHECK_FALSE(op_access_off({"--device=cpu", "--analysis=decompose,inefficient"}));
    CHECK_FALSE(op_access_off({"--device=cpu", "--analysis=decompose", "--events=alloc,free,access"}));
    CHECK_FALSE(op_access_off({"--device=cpu", "--analysis=", "--events=access"}));
    // no access at all: nothing to say
    auto r = run({"--device=cpu", "--analysis=leaks", "--", "p"});
    REQUIRE(r.ok);
    CHECK(r.cfg.agent_options().find("op_access") == std::string::npos);
}

TEST_CASE("agent options bound the unread capture unless it is saved (issue #18 item 4)") {
    auto budget_of = [](std::vector<std::string> args) -> std::string {
        args.insert(args.end(), {"--", "p"});
        auto r = run(args);
        REQUIRE(r.ok);
        std::string s = r.cfg.agent_options();
        auto at = s.find(";capture_budget=");
        if (at == std::string::npos) return "none";
        return s.substr(at + 16, s.find(';', at + 1) - at - 16);
    };
    unsetenv("MSMEMSCOPE_CAPTURE_KEEP_MIB");
    unsetenv("MSMEMSCOPE_CAPTURE_UNREAD_MIB");
    // 64 MiB kept for a crashed plugin's re-run + 256 MiB unread, in 64 KiB chunks.
    CHECK(budget_of({"--device=cpu"}) == "5120");
    // --aggregate keeps nothing: 64 MiB unread.
    CHECK(budget_of({"--device=cpu", "--aggregate"}) == "1024");
    CHECK(budget_of({"--device=cpu", "--save-capture=true"}) == "none");
    CHECK(budget_of({"--device=cpu", "--aggregate", "--save-capture=true"}) == "none");
    setenv("MSMEMSCOPE_CAPTURE_KEEP_MIB", "0", 1);
    setenv("MSMEMSCOPE_CAPTURE_UNREAD_MIB", "32", 1);
    CHECK(budget_of({"--device=cpu"}) == "512");
    CHECK(budget_of({"--device=cpu", "--aggregate"}) == "512");
    setenv("MSMEMSCOPE_CAPTURE_UNREAD_MIB", "1", 1);  // at least 6 MiB
    CHECK(budget_of({"--device=cpu", "--aggregate"}) == "96");
    setenv("MSMEMSCOPE_CAPTURE_UNREAD_MIB", "0", 1);  // never wait
    CHECK(budget_of({"--device=cpu"}) == "none");
    CHECK(budget_of({"--device=cpu", "--aggregate"}) == "none");
    unsetenv("MSMEMSCOPE_CAPTURE_KEEP_MIB");
    unsetenv("MSMEMSCOPE_CAPTURE_UNREAD_MIB");
}

TEST_CASE("agent options name every --level given (op, kernel or both)") {
    auto level_of = [](const char* arg) {
        auto r = run({"--device=cpu", arg, "--", "p"});
        REQUIRE(r.ok);
        std::string s = r.cfg.agent_options();
        auto at = s.find(";level=");
        REQUIRE(at != std::string::npos);
        return s.substr(at + 7, s.find(';', at + 1) - at - 7);
    };
    CHECK(level_of("--level=kernel") == "kernel");
    CHECK(level_of("--level=1") == "kernel");
    CHECK(level_of("--level=0") == "op");
    CHECK(level_of("--level=kernel,op") == "op,kernel");
    CHECK(level_of("--level=0,1") == "op,kernel");
}

namespace {
std::vector<std::string> yaml_errors(const std::string& path) {
    RawConfig raw;
    std::vector<std::string> errors;
    std::string arg = "--config=" + path;
    const char* argv[] = {"msmemscope", arg.c_str(), "--", "p"};
    parse_command_line(4, argv, raw, errors);
    if (errors.empty()) load_yaml(raw.config_file, raw, errors);
    return errors;
}
}  // namespace

TEST_CASE("empty or meaningless values are clear errors (#16)") {
    CHECK(only_error(run({"--config=", "--", "p"})) == "--config: empty value (allowed: a YAML file)");
    CHECK(only_error(run({"--serve-session="})) == "--serve-session: empty value (allowed: a session folder)");
    CHECK(only_error(run({"--steps=", "--", "p"})) ==
          "--steps: empty value (allowed: at most 5 step ids 1..4294967295, e.g. --steps=1,2,3)");
    CHECK(only_error(run({"--plugin-path=/nonexistent/plugins", "--", "p"})) ==
          "--plugin-path: '/nonexistent/plugins' does not exist");
    CHECK(only_error(run({"--plugin-path=/etc/hostname", "--", "p"})) == "--plugin-path: '/etc/hostname' is not a folder");
    CHECK(only_error(run({"--replay="})) == "--replay: empty value (allowed: a capture file, .msmcap)");
    // leaks has options, but msMemScope's analyses take no ':' argument (only oom:K)
    CHECK(only_error(run({"--analysis=leaks:5", "--", "p"})) ==
          "--analysis: analyzer 'leaks' takes no ':' argument (only oom[:K], K 1..1000; other options: "
          "--plugin-option=leaks.KEY=VALUE)");
    // a value echoed in an error is cut at 80 characters
    CHECK(only_error(run({"--collect-mode=" + std::string(200, 'x'), "--", "p"})) ==
          "--collect-mode: invalid value '" + std::string(80, 'x') + "\xE2\x80\xA6' (allowed: immediate, deferred)");
}

TEST_CASE("--config that is a folder, too large, or with duplicate and many unknown keys (#16)") {
    CHECK(yaml_errors("/tmp") == std::vector<std::string>{"--config: '/tmp' is a folder, not a YAML file"});
    std::string big = "/tmp/msmemscope_test_big_" + std::to_string(getpid()) + ".yaml";
    {
        std::ofstream f(big);
        f << "device: cpu\n# " << std::string(1 << 20, 'x') << "\n";
    }
    auto e = yaml_errors(big);
    std::remove(big.c_str());
    REQUIRE(e.size() == 1);
    CHECK(e[0] == "--config: '" + big + "' is larger than 1 MiB (1048591 bytes); a profile is a short list of options");

    auto dup = run({"--", "p"}, "device: cpu\nlevel: op\ndevice: npu\nplugins:\n  options:\n    oom: {k: 1, k: 2}\n");
    REQUIRE(dup.errors.size() == 2);
    CHECK(dup.errors[0].find(".yaml:3: duplicate key 'device' (first given at line 1)") != std::string::npos);
    CHECK(dup.errors[1].find(".yaml:6: duplicate key 'plugins.options.oom.k' (first given at line 6)") !=
          std::string::npos);

    std::string many;
    for (int i = 0; i < 25; ++i) many += "zz_unknown_" + std::to_string(i) + ": 1\n";
    auto unk = run({"--", "p"}, many);
    REQUIRE(unk.errors.size() == 21);
    CHECK(unk.errors[0].find(":1: unknown key 'zz_unknown_0'") != std::string::npos);
    CHECK(unk.errors[20].find(": and 5 more unknown keys") != std::string::npos);
}

TEST_CASE("paths in YAML are relative to the YAML file's folder (#17)") {
    // run() writes the profile into /tmp
    auto r = run({"--", "p"}, "output: results\nplugins:\n  search_paths: [.]\n");
    REQUIRE(r.ok);
    CHECK(r.cfg.output == "/tmp/results");
    CHECK(r.cfg.plugin_search_paths == std::vector<std::string>{"/tmp/."});
    auto missing = run({"--", "p"}, "plugins:\n  search_paths: [no_such_plugins]\n");
    REQUIRE(missing.errors.size() == 1);
    CHECK(missing.errors[0].find(":2: plugins.search_paths: '/tmp/no_such_plugins' does not exist (relative paths are "
                                 "relative to the YAML file's folder)") != std::string::npos);
    auto replay = run({}, "replay: no_such.msmcap\n");
    REQUIRE(replay.errors.size() == 1);
    CHECK(replay.errors[0].find(":1: replay: '/tmp/no_such.msmcap' does not exist (relative paths are relative to "
                                "the YAML file's folder)") != std::string::npos);
    // the command line is taken as given (relative to the working directory)
    CHECK(run({"--output=results", "--", "p"}, "output: other\n").cfg.output == "results");
}

TEST_CASE("options for a plugin that is not selected warn (#17)") {
    auto r = run({"--plugin-option=inefficient.idle_threshold=5", "--sinks=trace", "--", "p"});
    REQUIRE(r.ok);
    CHECK(r.cfg.warnings == std::vector<std::string>{
                                "--plugin-option: analyzer 'inefficient' is not selected, so its options have no effect "
                                "(select it with --analysis=inefficient)"});
    CHECK(run({"--plugin-option=inefficient.idle_threshold=5", "--analysis=inefficient", "--", "p"}).cfg.warnings.empty());
}

TEST_CASE("--analyze says views and formats asked beside it are not used: it runs no sink") {
    auto r = run({"--analyze=leaks", "--input=d.csv", "--sinks=trace", "--format=db"});
    REQUIRE(r.ok);
    CHECK(r.cfg.warnings ==
          std::vector<std::string>{"--sinks: not used with --analyze, which writes its results into the input file and on "
                                   "the console (a capture's --replay writes the views)",
                                   "--format: not used with --analyze, which writes its results into the input file and "
                                   "on the console (a capture's --replay writes the views)"});
    CHECK(run({"--analyze=leaks", "--input=d.csv"}).cfg.warnings.empty());
    CHECK(run({"--sinks=trace", "--", "p"}).cfg.warnings.empty());
}

TEST_CASE("events an analysis adds are said once per event, the analyses as one value the user would set") {
    auto cli = run({"--events=alloc", "--analysis=leaks,decompose", "--", "p"});
    REQUIRE(cli.cfg.warnings.size() == 1);
    CHECK(cli.cfg.warnings[0] ==
          "--events=alloc: also collecting access (for --analysis=decompose), free (for --analysis=leaks,decompose); "
          "only the events listed are written");
    auto api = run({"--serve-session=/s", "--events=alloc", "--analysis=leaks,decompose"});
    REQUIRE(api.cfg.warnings.size() == 1);
    CHECK(api.cfg.warnings[0] ==
          "events=\"alloc\": also collecting access (for analysis=\"decompose\"), free (for analysis=\"leaks,decompose\"); "
          "only the events listed are written");
}

TEST_CASE("a Python API session (--serve-session) is told in config()'s words") {
    // the validator: the origins and the examples are config()'s keys
    CHECK(only_error(run({"--serve-session=/s", "--steps=0"})) ==
          "steps: invalid value '0' (allowed: step ids 1..4294967295, e.g. msmemscope.config(steps=\"1,2,3\"))");
    CHECK(only_error(run({"--serve-session=/s", "--format=xml"})) == "format: invalid value 'xml' (allowed: csv, db)");
    // ... its internal options keep their names
    CHECK(only_error(run({"--serve-session=/s", "--ready-fd=x"})) ==
          "--ready-fd: invalid value 'x' (allowed: a descriptor number (3 or more))");
    // the command line's run is told as before
    CHECK(only_error(run({"--steps=0", "--", "p"})) ==
          "--steps: invalid value '0' (allowed: step ids 1..4294967295, e.g. --steps=1,2,3)");
    // what the host prints for that session
    CHECK(msms::api_words("leaks: the leak analysis is off when --steps selects steps") ==
          "leaks: the leak analysis is off when 'steps' selects steps");
    CHECK(msms::api_words("--events=alloc: also collecting free (for --analysis=leaks); only") ==
          "events=\"alloc\": also collecting free (for analysis=\"leaks\"); only");
    CHECK(msms::api_words("collect stacks with --call-stack=python or c)") ==
          "collect stacks with call_stack=\"python\" or c)");
    CHECK(msms::api_words("--steps=1,2,3, or --watch=op1:0,op2.") ==
          "steps=\"1,2,3\", or watch=\"op1:0,op2\".");
    CHECK(msms::api_words("set --plugin-option=leaks.max_lines=9") == "set plugin_options={\"leaks.max_lines\": \"9\"}");
    // a value in brackets ends at the bracket (the symbolizer's stack notes)
    CHECK(msms::api_words("[CPython's start-up: a C stack taken without --call-stack=c]") ==
          "[CPython's start-up: a C stack taken without call_stack=\"c\"]");
    // not a config() key, or not an option: as it was
    CHECK(msms::api_words("--serve-session: x; --save-capture=true; a--steps; msmemscope --attach=1") ==
          "--serve-session: x; --save-capture=true; a--steps; msmemscope --attach=1");
}
