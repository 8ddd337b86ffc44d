#include "options.h"

#include <atomic>
#include <cstdlib>
#include <cstring>

namespace msms::agent {

Options g_options;

namespace {
// The option text: two buffers, so that a new text (reparse_options, the
// Python API's next range) is written where no hook reads it, then published.
char g_texts[2][8192];
std::atomic<const char*> g_text{g_texts[0]};

// Finds "key=" at the start of an item; returns the value and its length.
const char* find_value(const char* key, size_t& len) {
    size_t klen = strlen(key);
    const char* p = g_text.load(std::memory_order_acquire);
    while (*p) {
        const char* item_end = strchr(p, ';');
        if (!item_end) item_end = p + strlen(p);
        if (static_cast<size_t>(item_end - p) > klen && strncmp(p, key, klen) == 0 && p[klen] == '=') {
            len = static_cast<size_t>(item_end - (p + klen + 1));
            return p + klen + 1;
        }
        p = *item_end ? item_end + 1 : item_end;
    }
    len = 0;
    return nullptr;
}

bool list_has(const char* value, size_t len, const char* item) {
    size_t ilen = strlen(item);
    const char* p = value;
    const char* end = value + len;
    while (p < end) {
        const char* comma = static_cast<const char*>(memchr(p, ',', static_cast<size_t>(end - p)));
        if (!comma) comma = end;
        if (static_cast<size_t>(comma - p) == ilen && strncmp(p, item, ilen) == 0) return true;
        p = comma + 1;
    }
    return false;
}

// "c:20,python:10" -> depth of `which` (0 when absent; default depth 50).
uint32_t stack_depth(const char* value, size_t len, const char* which) {
    size_t wlen = strlen(which);
    const char* p = value;
    const char* end = value + len;
    while (p < end) {
        const char* comma = static_cast<const char*>(memchr(p, ',', static_cast<size_t>(end - p)));
        if (!comma) comma = end;
        if (static_cast<size_t>(comma - p) >= wlen && strncmp(p, which, wlen) == 0 &&
            (p + wlen == comma || p[wlen] == ':')) {
            if (p + wlen == comma) return 50;
            return static_cast<uint32_t>(strtoul(p + wlen + 1, nullptr, 10));
        }
        p = comma + 1;
    }
    return 0;
}

}  // namespace


void parse_options(const char* text) {
    char* buf = g_text.load(std::memory_order_relaxed) == g_texts[0] ? g_texts[1] : g_texts[0];
    strncpy(buf, text, sizeof(g_texts[0]) - 1);
    buf[sizeof(g_texts[0]) - 1] = 0;
    g_text.store(buf, std::memory_order_release);
    Options o;
    size_t len;
    if (const char* v = find_value("events", len)) {
        o.alloc = list_has(v, len, "alloc");
        o.free = list_has(v, len, "free");
        o.launch = list_has(v, len, "launch");
        o.access = list_has(v, len, "access");
        o.traceback = list_has(v, len, "traceback");
    }
    if (const char* v = find_value("level", len)) {
        // "op", "kernel", "op,kernel" (and upstream's 0 / 1)
        bool op = list_has(v, len, "op") || list_has(v, len, "0");
        bool kernel = list_has(v, len, "kernel") || list_has(v, len, "1");
        if (op || kernel) {
            o.op_level = op;
            o.kernel_level = kernel;
        }
    }
    if (const char* v = find_value("op_access", len)) o.op_access = !(len >= 1 && (v[0] == '0' || v[0] == 'f'));
    if (const char* v = find_value("collect_mode", len)) o.deferred = len == 8 && strncmp(v, "deferred", 8) == 0;
    if (const char* v = find_value("follow_fork", len)) o.follow_fork = !(len >= 1 && (v[0] == '0' || v[0] == 'f'));
    if (const char* v = find_value("capture_budget", len)) {
        uint64_t n = 0;
        for (size_t i = 0; i < len && v[i] >= '0' && v[i] <= '9' && n < (1u << 30); ++i) n = n * 10 + (v[i] - '0');
        o.capture_budget = static_cast<uint32_t>(n);
    }
    if (const char* v = find_value("host_pid", len)) {
        uint64_t n = 0;
        for (size_t i = 0; i < len && v[i] >= '0' && v[i] <= '9' && n < (1u << 30); ++i) n = n * 10 + (v[i] - '0');
        o.host_pid = static_cast<uint32_t>(n);
    }
    if (const char* v = find_value("host_pidns", len)) {
        uint64_t n = 0;
        for (size_t i = 0; i < len && i < 20 && v[i] >= '0' && v[i] <= '9'; ++i) n = n * 10 + static_cast<uint64_t>(v[i] - '0');
        o.host_pidns = n;
    }
    if (const char* v = find_value("call_stack", len)) {
        o.c_depth = stack_depth(v, len, "c");
        o.py_depth = stack_depth(v, len, "python");
    }
    g_options = o;
}

void reparse_options(const char* text) {
    const Options old = g_options;
    parse_options(text ? text : "");
    // What the process was told about its host and its capture stays.
    g_options.deferred = old.deferred;
    g_options.follow_fork = old.follow_fork;
    g_options.capture_budget = old.capture_budget;
    g_options.host_pid = old.host_pid;
    g_options.host_pidns = old.host_pidns;
}

bool wants(const char* cls) {
    if (!cls) return false;
    if (!strcmp(cls, "alloc")) return g_options.alloc;
    if (!strcmp(cls, "free")) return g_options.free;
    if (!strcmp(cls, "launch")) return g_options.launch;
    if (!strcmp(cls, "access")) return g_options.access;
    if (!strcmp(cls, "traceback")) return g_options.traceback;
    if (!strcmp(cls, "op")) return g_options.op_level;
    if (!strcmp(cls, "kernel")) return g_options.kernel_level;
    if (!strcmp(cls, "op_launch")) return g_options.launch && g_options.op_level;
    if (!strcmp(cls, "kernel_launch")) return g_options.launch && g_options.kernel_level;
    if (!strcmp(cls, "op_access")) return g_options.access && g_options.op_level && g_options.op_access;
    return false;
}

size_t option_text(const char* key, char* buf, size_t n) {
    size_t len = 0;
    const char* v = key ? find_value(key, len) : nullptr;
    if (!buf || n == 0) return len;
    if (!v) len = 0;
    if (len >= n) len = n - 1;
    if (len) memcpy(buf, v, len);
    buf[len] = 0;
    return len;
}

}  // namespace msms::agent
