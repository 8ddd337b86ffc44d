// A streaming writer of Python pickles (protocol 2) for the few types the
// memory_viz snapshot needs: dicts, lists, str, int, bool, None. No Python
// is involved: the opcodes are written directly (see CPython's
// Lib/pickletools.py for their definitions).
//
//   PickleWriter w(sink);          // sink(const char*, size_t) takes the bytes
//   w.dict_begin(); w.key("segments"); w.list_begin(); ... w.list_end(); w.dict_end();
//   w.finish();
//
// Containers are written as EMPTY_DICT/EMPTY_LIST followed by batches of
// items between MARK and SETITEMS/APPENDS (1000 per batch, as CPython's
// pickler does). Keys and repeated values can be memoized: memo_begin()
// returns an index for the next value; later `get(index)` refers to it.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace msms_viz {

class PickleWriter {
public:
    using Sink = std::function<void(const char*, size_t)>;
    explicit PickleWriter(Sink sink) : sink_(std::move(sink)) {
        buf_ += '\x80';  // PROTO 2
        buf_ += '\x02';
    }

    void dict_begin() { open('}'); }
    void dict_end() { close('u'); }
    void list_begin() { open(']'); }
    void list_end() { close('e'); }

    // A dict key (memoized: each distinct key is written once).
    void key(std::string_view k) {
        auto it = keys_.find(std::string(k));
        if (it != keys_.end()) {
            memo_get(it->second);
        } else {
            raw_str(k);
            keys_.emplace(std::string(k), put());
        }
        item_written();
    }

    void str(std::string_view s) {
        raw_str(s);
        value_written();
    }
    void integer(int64_t v) {
        if (v >= 0 && v < 256) {
            buf_ += 'K';  // BININT1
            buf_ += static_cast<char>(v);
        } else if (v >= 0 && v < 65536) {
            buf_ += 'M';  // BININT2
            buf_ += static_cast<char>(v & 0xff);
            buf_ += static_cast<char>((v >> 8) & 0xff);
        } else if (v >= INT32_MIN && v <= INT32_MAX) {
            buf_ += 'J';  // BININT: signed 4-byte little-endian
            u32(static_cast<uint32_t>(static_cast<int32_t>(v)));
        } else {
            buf_ += '\x8a';  // LONG1: n bytes, two's complement little-endian
            buf_ += '\x08';
            uint64_t u = static_cast<uint64_t>(v);
            for (int i = 0; i < 8; ++i) buf_ += static_cast<char>((u >> (8 * i)) & 0xff);
        }
        value_written();
    }
    // Unsigned values above INT64_MAX (addresses) need nine bytes.
    void unsigned_integer(uint64_t v) {
        if (v <= static_cast<uint64_t>(INT64_MAX)) return integer(static_cast<int64_t>(v));
        buf_ += '\x8a';
        buf_ += '\x09';
        for (int i = 0; i < 8; ++i) buf_ += static_cast<char>((v >> (8 * i)) & 0xff);
        buf_ += '\0';  // the sign byte keeps it positive
        value_written();
    }
    void boolean(bool b) {
        buf_ += b ? '\x88' : '\x89';  // NEWTRUE / NEWFALSE
        value_written();
    }
    void none() {
        buf_ += 'N';
        value_written();
    }

    // Pushes a memoized value again (counts as one value of the container).
    void get(uint32_t i) {
        memo_get(i);
        value_written();
    }
    // Opens a list and memoizes it, for values shared by many entries
    // (frames): returns the memo index; close it with list_end().
    uint32_t list_begin_memo() {
        buf_ += ']';
        uint32_t i = put();
        buf_ += '(';
        stack_.push_back(Level{'e', 0});
        return i;
    }

    // STOP and the last bytes. Throws std::logic_error if a container is open.
    void finish();

    size_t bytes_written() const { return written_ + buf_.size(); }

    // s with every byte sequence that is not UTF-8 replaced by '?'.
    static std::string valid_utf8(std::string_view s);

private:
    // Stores the top of the unpickler's stack (a key just written, a list
    // just opened) in the memo and returns its index.
    uint32_t put() {
        uint32_t i = next_memo_++;
        if (i < 256) {
            buf_ += 'q';  // BINPUT
            buf_ += static_cast<char>(i);
        } else {
            buf_ += 'r';  // LONG_BINPUT
            u32(i);
        }
        return i;
    }
    struct Level {
        char closer;
        uint32_t items;  // values in the current batch (dict: keys + values)
    };
    void raw_str(std::string_view s) {
        std::string clean = valid_utf8(s);
        buf_ += 'X';  // BINUNICODE: 4-byte little-endian length, UTF-8
        u32(static_cast<uint32_t>(clean.size()));
        buf_ += clean;
    }
    void memo_get(uint32_t i) {
        if (i < 256) {
            buf_ += 'h';  // BINGET
            buf_ += static_cast<char>(i);
        } else {
            buf_ += 'j';  // LONG_BINGET
            u32(i);
        }
    }
    void open(char op) {
        buf_ += op;
        buf_ += '(';  // MARK
        stack_.push_back(Level{op == '}' ? 'u' : 'e', 0});
    }
    void close(char op);
    void item_written() {
        if (!stack_.empty()) ++stack_.back().items;
    }
    // A value completes an item of the enclosing container: batches of 1000
    // list items or 1000 dict pairs.
    void value_written();
    void u32(uint32_t v) {
        for (int i = 0; i < 4; ++i) buf_ += static_cast<char>((v >> (8 * i)) & 0xff);
    }
    void flush_if_large() {
        if (buf_.size() >= (1u << 20)) {
            sink_(buf_.data(), buf_.size());
            written_ += buf_.size();
            buf_.clear();
        }
    }

    Sink sink_;
    std::string buf_;
    std::vector<Level> stack_;
    std::unordered_map<std::string, uint32_t> keys_;
    uint32_t next_memo_ = 0;
    size_t written_ = 0;
};

}  // namespace msms_viz
