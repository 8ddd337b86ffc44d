#include "console_notes.h"

#include <iostream>
#include <mutex>

#include "warning_out.h"

namespace msms {

namespace {

std::mutex g_mutex;
std::vector<ConsoleNote> g_notes;

void keep(ConsoleNote::Kind kind, const std::string& text) {
    std::lock_guard<std::mutex> lock(g_mutex);
    g_notes.push_back({std::chrono::system_clock::now(), kind, text});
}

}  // namespace

void say_out(const std::string& line) {
    keep(ConsoleNote::Out, line);
    std::cout << line << "\n";
}

void say_status(const std::string& line) {
    keep(ConsoleNote::Out, line);
    std::cerr << line << "\n";
}

void say_warning(const std::string& text) {
    keep(ConsoleNote::Warning, text);
    warning_out() << "msmemscope: warning: " << text << "\n";
}

void say_error(const std::string& text) {
    keep(ConsoleNote::Error, text);
    std::cerr << "msmemscope: error: " << text << "\n";
}

std::vector<ConsoleNote> console_notes() {
    // Read by each process's thread while main may still be saying things.
    std::lock_guard<std::mutex> lock(g_mutex);
    return g_notes;
}

}  // namespace msms
