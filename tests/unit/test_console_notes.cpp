#include <doctest/doctest.h>

#include <chrono>
#include <iostream>
#include <sstream>

#include <spdlog/logger.h>
#include <spdlog/sinks/ostream_sink.h>

#include "console_notes.h"
#include "process_run.h"
#include "warning_out.h"

using namespace msms;

// The logs repeat what the console said before they existed (-q hides the
// warnings from the console, not from the log, as --log-level's log does).
TEST_CASE("console notes keep what was said, in order, with the time it was said") {
    size_t before = console_notes().size();
    auto start = std::chrono::system_clock::now();
    set_warnings_shown(false);
    say_warning("plugin /p/libx.so refused: cannot load");
    say_error("plugin 'x' (selected by --analysis) cannot be loaded; running without it");
    set_warnings_shown(true);
    auto end = std::chrono::system_clock::now();
    auto notes = console_notes();
    REQUIRE(notes.size() == before + 2);
    CHECK(notes[before].text == "plugin /p/libx.so refused: cannot load");
    CHECK(notes[before].kind == ConsoleNote::Warning);
    CHECK(notes[before + 1].text == "plugin 'x' (selected by --analysis) cannot be loaded; running without it");
    CHECK(notes[before + 1].kind == ConsoleNote::Error);
    CHECK(start <= notes[before].when);
    CHECK(notes[before].when <= notes[before + 1].when);
    CHECK(notes[before + 1].when <= end);
}

// A line said on stdout before the logs existed (--replay's matches) is
// printed whatever the level: a log keeps it at every level, as it keeps the
// report; the level still filters the warnings.
TEST_CASE("a log keeps the console's stdout lines at every level, its warnings through its level") {
    say_warning("a warning the error level drops");
    say_out("msmemscope: --replay: 2 captures match 'r/*.msmcap'");
    std::ostringstream written;
    spdlog::logger log("msmemscope", std::make_shared<spdlog::sinks::ostream_sink_st>(written));
    log.set_pattern("[%l] %v");
    log.set_level(spdlog::level::err);
    log_console_notes(log);
    CHECK(written.str().find("[info] msmemscope: --replay: 2 captures match 'r/*.msmcap'\n") != std::string::npos);
    CHECK(written.str().find("a warning the error level drops") == std::string::npos);
    CHECK(log.level() == spdlog::level::err);  // left at its level
}

// --attach's "attached to pid N" line is a status line on stderr (stdout is
// the report's): printed there alone, and kept by a log as the console's
// stdout lines are, at every level.
TEST_CASE("a status line is said on stderr only and kept by a log at every level") {
    const std::string line = "msmemscope: attached to pid 42; Ctrl-C detaches (the process goes on running)";
    std::ostringstream out, err;
    auto* old_out = std::cout.rdbuf(out.rdbuf());
    auto* old_err = std::cerr.rdbuf(err.rdbuf());
    say_status(line);
    std::cout.rdbuf(old_out);
    std::cerr.rdbuf(old_err);
    CHECK(out.str().empty());
    CHECK(err.str() == line + "\n");
    std::ostringstream written;
    spdlog::logger log("msmemscope", std::make_shared<spdlog::sinks::ostream_sink_st>(written));
    log.set_pattern("[%l] %v");
    log.set_level(spdlog::level::err);
    log_console_notes(log);
    CHECK(written.str().find("[info] " + line + "\n") != std::string::npos);
}
