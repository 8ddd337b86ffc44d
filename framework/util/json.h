// A small JSON value for writing (config.json, Attr as JSON, trace files) —
// enough for our own output; not a general parser.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace msms {

class Json {
public:
    enum class Type { Null, Bool, Int, Double, String, Array, Object };
    Json() = default;
    Json(bool b) : type_(Type::Bool), b_(b) {}
    Json(int v) : type_(Type::Int), i_(v) {}
    Json(int64_t v) : type_(Type::Int), i_(v) {}
    Json(uint64_t v) : type_(Type::Int), i_(static_cast<int64_t>(v)) {}
    Json(double v) : type_(Type::Double), d_(v) {}
    Json(const char* s) : type_(Type::String), s_(s) {}
    Json(std::string s) : type_(Type::String), s_(std::move(s)) {}
    static Json array() { Json j; j.type_ = Type::Array; return j; }
    static Json object() { Json j; j.type_ = Type::Object; return j; }
    static Json from_list(const std::vector<std::string>& v) {
        Json j = array();
        for (auto& s : v) j.push(Json(s));
        return j;
    }
    Json& push(Json v) { items_.emplace_back(std::string(), std::move(v)); return *this; }
    Json& set(std::string key, Json v) { items_.emplace_back(std::move(key), std::move(v)); return *this; }
    std::string dump(int indent = -1) const;
    void dump_to(std::string& out, int indent, int level) const;
    Type type() const { return type_; }

private:
    Type type_ = Type::Null;
    bool b_ = false;
    int64_t i_ = 0;
    double d_ = 0;
    std::string s_;
    std::vector<std::pair<std::string, Json>> items_;
};

// Appends s as a JSON string literal (with quotes). The result is always
// valid UTF-8: a byte of s that is not part of a well-formed UTF-8 sequence
// is written as \u00XX (the Latin-1 character of that byte).
void json_quote(std::string& out, std::string_view s);
// A value from an Attr entry as JSON: numbers stay numbers, "[1, 2]" lists
// become arrays when they parse as numbers, everything else a string.
void json_attr_value(std::string& out, std::string_view v);

}  // namespace msms
