// Every case of msMemScope's parser tests (test/framework/test_client_parser.cpp,
// upstream HEAD f069acf), restated for our parser: the same command line must
// give the same outcome (accepted or an error) and the same values. Each case
// names the upstream TEST it ports. Where upstream's outcome is "printHelpInfo"
// (its way of rejecting), ours is an error (and a non-zero exit in main()).
// Upstream numbers bits (events: alloc 1, free 2, launch 4, access 8; levels:
// op 1, kernel 2); we compare sets. Upstream's Parse() leaves the implied
// events to a later SetEventDefaultConfig(); our validate() does both, so its
// "eventType right after parsing" is our written_events (what --events lists).
#include <doctest/doctest.h>

#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <set>
#include <string>
#include <vector>

#include "config.h"
#include "config_fixture.h"

using namespace msms;
using namespace msms_test;

namespace {

using Set = std::set<std::string>;

// Upstream's cases parse options only; we add a program so that validation
// has something to run (except where the case is about the program itself).
Result cli(std::vector<std::string> args) {
    args.push_back("--");
    args.push_back("prog");
    return run(args);
}

bool rejected(std::vector<std::string> args) { return !cli(std::move(args)).ok; }

const Set kDefaultEvents{"alloc", "free", "launch"};

}  // namespace

TEST_CASE("upstream: help") {
    // pass_help_parameter_expect_get_print_help_info
    CHECK(cli({"--help"}).raw.help);
    // pass_help_parameter_expect_show_help_info
    CHECK(help_text().find("Usage") != std::string::npos);
    // InvalidParamCheckHelpInfo (helper): an invalid value is rejected, see the cases below.
}

TEST_CASE("upstream: analysis types") {
    // pass_valid_analysis_type_case_not_set: leaks by default
    CHECK(cli({}).cfg.analyzers == std::vector<std::string>{"leaks"});
    // pass_valid_analysis_type_case_memscope: "memscope" is not an analysis (upstream keeps leaks and asks for help)
    CHECK(rejected({"--analysis=memscope"}));
    // pass_valid_analysis_type_case_decompose
    auto d = cli({"--analysis=decompose"});
    REQUIRE(d.ok);
    CHECK(d.cfg.analyzers == std::vector<std::string>{"decompose"});
    // pass_valid_analysis_type_case_all: rejected at "memscope"; the events stay the default
    auto all = cli({"--analysis=memscope,decompose"});
    CHECK_FALSE(all.ok);
    CHECK(all.cfg.written_events == kDefaultEvents);
    // pass_invalid_analysis_type_case
    CHECK(rejected({"--analysis=lekas"}));
}

TEST_CASE("upstream: levels") {
    // pass_valid_level_value_expect_level0
    CHECK(cli({"--level=0"}).cfg.levels == 1u);
    // pass_valid_level_value_expect_level1
    CHECK(cli({"--level=1"}).cfg.levels == 2u);
    // pass_valid_level_value_expect_level_0_and_level_1
    CHECK(cli({"--level=0,1"}).cfg.levels == 3u);
    CHECK(cli({"--level=kernel,op"}).cfg.levels == 3u);
    // pass_invalid_level_expect_show_help_info
    CHECK(rejected({"--level=3"}));
}

TEST_CASE("upstream: event types") {
    // pass_valid_event_type_case_not_set (upstream passes --level=3, rejected, events untouched)
    auto bad = cli({"--level=3"});
    CHECK_FALSE(bad.ok);
    CHECK(bad.cfg.written_events == kDefaultEvents);
    CHECK(cli({}).cfg.written_events == kDefaultEvents);
    // pass_valid_event_type_case_traceback (upstream asserts nothing; accepted)
    auto tb = cli({"--events=traceback"});
    REQUIRE(tb.ok);
    CHECK(tb.cfg.events.count("traceback") == 1);
    // pass_valid_event_type_case_alloc
    CHECK(cli({"--events=alloc"}).cfg.written_events == Set{"alloc"});
    // pass_valid_event_type_case_free
    CHECK(cli({"--events=free"}).cfg.written_events == Set{"free"});
    // pass_valid_event_type_case_launch
    CHECK(cli({"--events=launch"}).cfg.written_events == Set{"launch"});
    // pass_valid_event_type_case_access
    CHECK(cli({"--events=access"}).cfg.written_events == Set{"access"});
    // pass_valid_event_type_case_all
    CHECK(cli({"--events=alloc,free,launch,access"}).cfg.written_events == Set{"alloc", "free", "launch", "access"});
    // pass_invalid_event_type_case
    CHECK(rejected({"--events=alloc,free,launhc"}));
}

TEST_CASE("upstream: the program") {
    // pass_empty_prog_name_expect_get_empty_bin_cmd
    auto none = run({});
    CHECK(none.cfg.program.empty());
    CHECK(none.raw.program.empty());
    // pass_test_as_prog_expect_get_bin_cmd_test
    auto t = run({"test"});
    REQUIRE(t.ok);
    CHECK(t.cfg.program == std::vector<std::string>{"test"});
}

TEST_CASE("upstream: invalid_single_dash_option_expect_one_error") {
    auto r = cli({"-log-file=log.txt"});
    REQUIRE(r.errors.size() == 1);
    CHECK(r.errors[0] == "unknown option '-l' (in '-log-file=log.txt') (see --help)");
}

TEST_CASE("upstream: steps") {
    // test_parse_select_steps
    CHECK(cli({"--steps=2,3,123"}).cfg.steps == std::vector<long long>{2, 3, 123});
    CHECK(cli({"--steps=2\xEF\xBC\x8C" "3,234"}).cfg.steps == std::vector<long long>{2, 3, 234});
    CHECK(cli({"--steps=4294967295"}).cfg.steps == std::vector<long long>{4294967295LL});
    // test_invalid_select_steps
    CHECK(rejected({"--steps=-1,0,3"}));
    CHECK(rejected({"--steps=2:3.4"}));
    CHECK(rejected({"--steps=4294967296"}));
    CHECK(rejected({"--steps=429496729500"}));
    CHECK(only_error(cli({"--steps=0"})) == "--steps: invalid value '0' (allowed: step ids 1..4294967295, e.g. --steps=1,2,3)");
    // test_exceed_five_steps_expect_print_help_info
    CHECK(only_error(cli({"--steps=1,2,3,4,5,6"})) == "--steps: at most 5 steps, got 6");
}

TEST_CASE("upstream: compare inputs") {
    // test_compare_dump_data: two paths that do not exist are not correct input paths
    auto missing = run({"--compare", "--input=path1,path2"});
    CHECK(missing.errors ==
          std::vector<std::string>{"--input: 'path1' does not exist", "--input: 'path2' does not exist"});
    auto fw = run({"--compare", "--input=path1\xEF\xBC\x8Cpath2"});
    CHECK_FALSE(fw.ok);
    CHECK(fw.cfg.compare);
    // test_invalid_compare_dump_data
    CHECK_FALSE(run({"--input=path1"}).ok);
    CHECK(only_error(run({"--compare"})) == "--input: --compare needs exactly two inputs, --input=<base>,<compare>");
}

TEST_CASE("upstream: watch") {
    // test_watch_config_set_all
    auto all = cli({"--watch=start:123,end,full-content"});
    REQUIRE(all.ok);
    REQUIRE(all.cfg.watch);
    CHECK(all.cfg.watch->start == "start");
    CHECK(all.cfg.watch->end == "end");
    CHECK(all.cfg.watch->out_index == 123);
    CHECK(all.cfg.watch->full_content);
    // test_watch_config_set_only_end
    auto end = cli({"--watch=,end,"});
    REQUIRE(end.ok);
    CHECK(end.cfg.watch->start.empty());
    CHECK(end.cfg.watch->end == "end");
    CHECK(end.cfg.watch->out_index == -1);
    CHECK_FALSE(end.cfg.watch->full_content);
    // test_watch_config_set_only_start_and_end
    auto se = cli({"--watch=start,end,"});
    REQUIRE(se.ok);
    CHECK(se.cfg.watch->start == "start");
    CHECK(se.cfg.watch->end == "end");
    CHECK(se.cfg.watch->out_index == -1);
    CHECK_FALSE(se.cfg.watch->full_content);
    // test_watch_config_set_only_start_with_id_and_end
    auto sie = cli({"--watch=start:123,end,"});
    REQUIRE(sie.ok);
    CHECK(sie.cfg.watch->start == "start");
    CHECK(sie.cfg.watch->end == "end");
    CHECK(sie.cfg.watch->out_index == 123);
    CHECK_FALSE(sie.cfg.watch->full_content);
    // test_watch_config_unset
    auto unset = cli({"--level=0"});
    REQUIRE(unset.ok);
    CHECK_FALSE(unset.cfg.watch.has_value());
    // test_watch_config_null
    CHECK(rejected({"--watch="}));
    // test_watch_config_empty_end
    CHECK(rejected({"--watch=,"}));
    // test_watch_config_error_outputid
    CHECK(only_error(cli({"--watch=start:error,end"})) ==
          "--watch: invalid value 'start:error,end': the output index must be a number 0..4294967295 without leading "
          "zeros (allowed: [start[:N]],end[,full-content], e.g. --watch=op1:0,op2 or --watch=,op2)");
    // test_watch_config_error_start_part
    CHECK(only_error(cli({"--watch=:,end"})) ==
          "--watch: invalid value ':,end': ':' needs a start op before it and an output index after it (allowed: "
          "[start[:N]],end[,full-content], e.g. --watch=op1:0,op2 or --watch=,op2)");
    // test_watch_config_error_full_content
    CHECK(rejected({"--watch=start:123,end,full-contents"}));
}

TEST_CASE("upstream: collect mode") {
    // test_collect_mode_full
    CHECK(cli({"--collect-mode=immediate"}).cfg.collect_mode == "immediate");
    // test_collect_mode_custom
    CHECK(cli({"--collect-mode=deferred"}).cfg.collect_mode == "deferred");
    // test_collect_mode_empty
    auto empty = cli({"--collect-mode="});
    CHECK_FALSE(empty.ok);
    CHECK(empty.cfg.collect_mode == "immediate");
    // test_collect_mode_input_error
    auto bad = cli({"--collect-mode=full2"});
    CHECK(only_error(bad) == "--collect-mode: invalid value 'full2' (allowed: immediate, deferred)");
    CHECK(bad.cfg.collect_mode == "immediate");
}

TEST_CASE("upstream: version") {
    // test_print_version
    CHECK(cli({"--version"}).raw.version);
    // print_version: asks for the version, not the help
    auto v = cli({"--version"});
    CHECK_FALSE(v.raw.help);
}

TEST_CASE("upstream: output path") {
    // test_not_set_output
    CHECK(cli({}).cfg.output == "memscopeDumpResults");
    // test_set_invalid_output (upstream keeps the default and goes on; we stop with an error)
    CHECK(only_error(cli({"--output= "})) == "--output: empty value (allowed: a folder path)");
    CHECK(only_error(cli({"--output=/MyPath1/MyPath2?"})) ==
          "--output: invalid character '?' in '/MyPath1/MyPath2?' (allowed: letters, digits, '.', '/', '_', '-', '~', "
          "spaces, Chinese characters)");
    CHECK(rejected({"--output=/MyPath1/MyPath2*/"}));
    CHECK(rejected({"--output=MyPath|"}));
    CHECK(only_error(cli({"--output=" + std::string(256, 'A')})) == "--output: a folder name is longer than 255 characters");
}

TEST_CASE("upstream: log levels") {
    // test_input_valid_log_level_expect_valid_loglv
    CHECK(cli({"--log-level=warn"}).cfg.log_level == "warn");
    CHECK(cli({"--log-level=info"}).cfg.log_level == "info");
    CHECK(cli({"--log-level=error"}).cfg.log_level == "error");
    // test_input_invalid_log_level_expect_invalid_loglv
    CHECK(rejected({"--log-level=test"}));
    CHECK(rejected({"--log-level="}));
}

TEST_CASE("upstream: test_parse_call_stack_expect_true") {
    CHECK(cli({"--call-stack=c:10,python:10"}).ok);
    CHECK(only_error(cli({"--call-stack=c:00"})) == "--call-stack: depth '00' of c out of range (allowed: 0..1000)");
    auto off = cli({"--call-stack="});
    REQUIRE(off.ok);
    CHECK_FALSE(off.cfg.c_stack);
    CHECK_FALSE(off.cfg.py_stack);
    auto twice = cli({"--call-stack=c:10,c:15"});
    REQUIRE(twice.ok);
    CHECK(twice.cfg.c_stack);
    CHECK(twice.cfg.c_depth == 15);
    auto both = cli({"--call-stack=c:13,python:10,python:12"});
    REQUIRE(both.ok);
    CHECK(both.cfg.c_depth == 13);
    CHECK(both.cfg.py_stack);
    CHECK(both.cfg.py_depth == 12);
}

TEST_CASE("upstream: data format and pre-checks") {
    // pass_data_format_case_db
    CHECK(cli({"--data-format=db", "--output=./testmsmemscope"}).cfg.data_format == "db");
    // usercommand_precheck_false
    CHECK_FALSE(run({"--compare"}).ok);
    CHECK(only_error(cli({"--output="})) == "--output: empty value (allowed: a folder path)");
}

TEST_CASE("upstream: devices") {
    // test_invalid_device_case
    CHECK(only_error(cli({"--device="})) == "--device: empty value (allowed: npu, npu:{0..31}, cpu, cuda, cuda:{0..31})");
    CHECK(rejected({"--device=test"}));
    CHECK(rejected({"--device=npu:100"}));
    CHECK(rejected({"--device=npu:xx"}));
    // test_valid_device_case
    CHECK(cli({}).cfg.devices == std::vector<std::string>{"npu"});
    CHECK(cli({"--device=npu"}).cfg.devices == std::vector<std::string>{"npu"});
    CHECK(cli({"--device=npu:0,npu:2"}).cfg.devices == std::vector<std::string>{"npu:0", "npu:2"});
    CHECK(cli({"--device=npu:0,cpu"}).cfg.devices == std::vector<std::string>{"npu:0", "cpu"});
    // COMPAT §8: ids are read with base 0
    CHECK(cli({"--device=npu:0x1f"}).cfg.devices == std::vector<std::string>{"npu:31"});
}

TEST_CASE("upstream: collected and written events (RFC: precise event filtering)") {
    // set_event_default_config_only_extends_eventType: alloc collects free too, writes only alloc
    auto a = cli({"--events=alloc", "--analysis=none"});
    REQUIRE(a.ok);
    CHECK(a.cfg.events == Set{"alloc", "free"});
    CHECK(a.cfg.written_events == Set{"alloc"});
    // set_analysis_default_config_only_extends_eventType: leaks collects alloc,free, writes nothing
    auto l = cli({"--events=none", "--analysis=leaks"});
    REQUIRE(l.ok);
    CHECK(l.cfg.events == Set{"alloc", "free"});
    CHECK(l.cfg.written_events.empty());
    // pass_event_trace_type_none_expect_empty_eventType
    auto n = cli({"--events=none", "--analysis=none"});
    CHECK(n.cfg.written_events.empty());
    // pass_analysis_type_none_expect_empty_analysisType
    CHECK(cli({"--analysis=none"}).cfg.analyzers.empty());
    // pass_event_trace_type_none_mixed_expect_none_priority
    auto em = cli({"--events=alloc,none", "--analysis=none"});
    REQUIRE(em.ok);
    CHECK(em.cfg.events.empty());
    CHECK(em.cfg.written_events.empty());
    CHECK(em.cfg.warnings == std::vector<std::string>{"--events: 'none' mixed with other event types; no events are written"});
    // pass_analysis_type_none_mixed_expect_none_priority
    auto am = cli({"--analysis=leaks,none"});
    REQUIRE(am.ok);
    CHECK(am.cfg.analyzers.empty());
    CHECK(am.cfg.warnings ==
          std::vector<std::string>{"--analysis: 'none' mixed with other analysis types; no analysis is run"});
    // pass_event_trace_type_alloc_expect_dumpEventType_only_alloc
    CHECK(cli({"--events=alloc"}).cfg.written_events == Set{"alloc"});
    // initial_config_sets_dumpEventType_same_as_eventType
    auto def = cli({});
    CHECK(def.cfg.events == kDefaultEvents);
    CHECK(def.cfg.written_events == kDefaultEvents);
    // pass_events_and_analysis_none_expect_no_collection_no_analysis
    auto nn = cli({"--events=none", "--analysis=none"});
    REQUIRE(nn.ok);
    CHECK(nn.cfg.events.empty());
    CHECK(nn.cfg.written_events.empty());
    CHECK(nn.cfg.analyzers.empty());
    // COMPAT §8 (3757ec2): decompose also turns on access (collected, not written)
    auto dec = cli({"--analysis=decompose"});
    CHECK(dec.cfg.events.count("access") == 1);
    CHECK(dec.cfg.written_events == kDefaultEvents);
}

TEST_CASE("upstream: CLI standardisation names") {
    // pass_new_standard_format_expect_data_format_parsed
    CHECK(cli({"--format=db"}).cfg.data_format == "db");
    CHECK(cli({"--format=csv"}).cfg.data_format == "csv");
    // pass_new_standard_input_path_expect_parsed (two files that exist; with --compare, as upstream's pre-check wants)
    std::string f1 = "/tmp/msmemscope_cli_std_input_" + std::to_string(getpid()) + "_1.csv";
    std::string f2 = "/tmp/msmemscope_cli_std_input_" + std::to_string(getpid()) + "_2.csv";
    std::ofstream(f1) << "ID,Event\n";
    std::ofstream(f2) << "ID,Event\n";
    auto in = run({"--compare", "--input-path=" + f1 + "," + f2});
    auto in_short = run({"--compare", "-i", f1 + "," + f2});
    auto in_alone = cli({"--input-path=" + f1 + "," + f2});
    std::remove(f1.c_str());
    std::remove(f2.c_str());
    REQUIRE(in.ok);
    CHECK(in.cfg.inputs.size() == 2);
    CHECK(in_short.ok);
    CHECK(only_error(in_alone) == "--input: only valid together with --compare");  // upstream's pre-check
    // pass_new_standard_output_path_expect_output_dir_set
    CHECK(cli({"--output-path=./testmsmemscope_cli_std"}).cfg.output == "./testmsmemscope_cli_std");
    CHECK(cli({"-o", "./testmsmemscope_cli_std"}).cfg.output == "./testmsmemscope_cli_std");
    // pass_old_alias_expect_deprecation_warning: the old names still parse the same (we print no deprecation)
    CHECK_FALSE(run({"--input=path1,path2"}).ok);
    CHECK(cli({"--output=./testmsmemscope_cli_std"}).cfg.output == "./testmsmemscope_cli_std");
    CHECK(cli({"--data-format=db"}).cfg.data_format == "db");
}

TEST_CASE("upstream: version, verbose, quiet, debug, log levels") {
    // pass_short_version_expect_print_version_info
    CHECK(cli({"-V"}).raw.version);
    CHECK(cli({"--version"}).raw.version);
    // pass_verbose_expect_log_level_debug
    auto v = cli({"-v"});
    CHECK_FALSE(v.raw.version);
    CHECK(v.cfg.log_level == "debug");
    CHECK(cli({"--verbose"}).cfg.log_level == "debug");
    // pass_quiet_expect_log_level_error
    CHECK(cli({"-q"}).cfg.log_level == "error");
    CHECK(cli({"--quiet"}).cfg.log_level == "error");
    // pass_debug_expect_log_level_debug
    CHECK(cli({"--debug"}).cfg.log_level == "debug");
    // pass_log_level_new_values_expect_parsed
    CHECK(cli({"--log-level=debug"}).cfg.log_level == "debug");
    CHECK(cli({"--log-level=warning"}).cfg.log_level == "warn");
    // pass_log_level_warn_alias_expect_warn_with_deprecation (the value is the same; we print no deprecation)
    CHECK(cli({"--log-level=warn"}).cfg.log_level == "warn");
    // default_log_level_expect_info
    CHECK(cli({}).cfg.log_level == "info");
}

TEST_CASE("upstream: pass_legacy_level_value_expect_parsed_with_deprecation") {
    CHECK(cli({"--level=0"}).cfg.levels == 1u);
    CHECK(cli({"--level=1"}).cfg.levels == 2u);
    CHECK(cli({"--level=op"}).cfg.levels == 1u);
}

TEST_CASE("upstream: legacy_commands_regression_expect_unchanged") {
    auto r = run({"--events=alloc,free", "--", "python", "train.py"});
    REQUIRE(r.ok);
    CHECK(r.cfg.written_events == Set{"alloc", "free"});
    CHECK(r.cfg.program == std::vector<std::string>{"python", "train.py"});
    auto old = cli({"--data-format=db", "--output=./testmsmemscope_cli_std"});
    REQUIRE(old.ok);
    CHECK(old.cfg.data_format == "db");
    CHECK(old.cfg.output == "./testmsmemscope_cli_std");
}

TEST_CASE("upstream: show_help_info_standardized_format") {
    std::string h = help_text();
    for (const char* s : {"Description:", "Usage:", "General options:", "Collection options:", "Analysis options:",
                          "Input / Output options:", "-V, --version", "-v, --verbose", "-q, --quiet",
                          "--input-path <DIR>", "--output-path <DIR>", "--format <FORMAT>", "[default: info]",
                          "Examples:", "msmemscope -- python train.py"}) {
        CAPTURE(s);
        CHECK(h.find(s) != std::string::npos);
    }
    CHECK(h.find("--data-format") == std::string::npos);  // hidden alias
}

TEST_CASE("upstream: log_level_conflict_shortcuts_highest_visibility_wins") {
    CHECK(cli({"-q", "-v"}).cfg.log_level == "debug");
    CHECK(cli({"-v", "-q"}).cfg.log_level == "debug");
    CHECK(cli({"--verbose", "--quiet"}).cfg.log_level == "debug");
    CHECK(cli({"--quiet", "--debug"}).cfg.log_level == "debug");
    CHECK(cli({"-q"}).cfg.log_level == "error");
    CHECK(cli({"-qv"}).cfg.log_level == "debug");  // grouped short options
}

TEST_CASE("upstream: log_level_conflict_explicit_log_level_wins") {
    CHECK(cli({"--verbose", "--log-level=error"}).cfg.log_level == "error");
    CHECK(cli({"--log-level=error", "--verbose"}).cfg.log_level == "error");
    CHECK(cli({"-q", "--log-level=info"}).cfg.log_level == "info");
    CHECK(cli({"--log-level=debug", "-q"}).cfg.log_level == "debug");
}

// ---- COMPAT §8 beyond upstream's own test file (its getopt_long behaviour)

TEST_CASE("getopt: options after the program name, prefixes, repeats, -- protects") {
    auto r = run({"bash", "train.sh", "--device=cpu", "--level=kernel"});
    REQUIRE(r.ok);
    CHECK(r.cfg.program == std::vector<std::string>{"bash", "train.sh"});
    CHECK(r.cfg.devices == std::vector<std::string>{"cpu"});
    CHECK(r.cfg.level == 1);
    CHECK(run({"bash", "train.sh", "-h"}).raw.help);
    CHECK(cli({"--dev=cpu"}).cfg.devices == std::vector<std::string>{"cpu"});
    CHECK(cli({"--an=none"}).cfg.analyzers.empty());  // upstream's unique prefix, though we also have --analyze
    CHECK(cli({"--st=1"}).cfg.steps == std::vector<long long>{1});  // upstream's --steps, though we have --step-on
    CHECK(only_error(cli({"--de=cpu"})) == "option '--de' is ambiguous (could be --debug, --device)");
    CHECK(cli({"--level=op", "--level=kernel"}).cfg.levels == 2u);
    CHECK(only_error(run({"prog", "--bogus"})) ==
          "unknown option '--bogus'; put the program's own options after '--' (msmemscope [options] -- <prog> [args])");
    CHECK(run({"--", "prog", "--bogus"}).ok);
    CHECK(only_error(run({"prog", "--devce=cpu"})) ==
          "unknown option '--devce' (did you mean '--device'?); put the program's own options after '--' (msmemscope "
          "[options] -- <prog> [args])");
    CHECK(only_error(cli({"--compare=yes"})) == "--compare: takes no value");
    CHECK(only_error(run({"--device"})) == "--device: missing value");
}
