#include <doctest/doctest.h>

#include <chrono>

#include "console_notes.h"
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
    CHECK_FALSE(notes[before].error);
    CHECK(notes[before + 1].text == "plugin 'x' (selected by --analysis) cannot be loaded; running without it");
    CHECK(notes[before + 1].error);
    CHECK(start <= notes[before].when);
    CHECK(notes[before].when <= notes[before + 1].when);
    CHECK(notes[before + 1].when <= end);
}
