// Turns interned stacks into text, one frame per line, cached per stack id.
// C frames: "function+0xoff (module)" from the ELF symbol tables of the
// modules the target reported; Python frames are already text.
#pragma once

#include <cstdint>
#include <string>
#include <unordered_map>

#include "capture_reader.h"

namespace msms {

class Symbolizer {
public:
    explicit Symbolizer(const CaptureReader& reader) : reader_(reader) {}
    virtual ~Symbolizer() = default;
    // "" for id 0 or an unknown stack.
    const std::string& text(uint64_t stack_id);

protected:
    virtual std::string c_frame(uint64_t address);

private:
    const CaptureReader& reader_;
    std::unordered_map<uint64_t, std::string> cache_;
};

}  // namespace msms
