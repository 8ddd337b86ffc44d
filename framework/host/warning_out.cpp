#include "warning_out.h"

#include <atomic>
#include <iostream>
#include <streambuf>

namespace msms {

namespace {

std::atomic<bool> g_shown{true};

class Discard : public std::streambuf {
protected:
    int overflow(int c) override { return traits_type::not_eof(c); }
    std::streamsize xsputn(const char*, std::streamsize n) override { return n; }
};

}  // namespace

void set_warnings_shown(bool shown) { g_shown.store(shown, std::memory_order_relaxed); }

bool warnings_shown() { return g_shown.load(std::memory_order_relaxed); }

std::ostream& warning_out() {
    static Discard sink;
    static std::ostream discard(&sink);
    return g_shown.load(std::memory_order_relaxed) ? std::cerr : discard;
}

}  // namespace msms
