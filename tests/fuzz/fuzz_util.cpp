#include "fuzz_util.h"

#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <stdexcept>

namespace fuzz {

TempDir::TempDir() {
    std::string tmpl = (std::filesystem::temp_directory_path() / "msmemscope_fuzz_XXXXXX").string();
    if (!mkdtemp(tmpl.data())) throw std::runtime_error("mkdtemp failed");
    path_ = tmpl;
}

TempDir::~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
}

void write_file(const std::string& path, const std::string& bytes) {
    std::ofstream f(path, std::ios::binary | std::ios::trunc);
    f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

std::string mutate(const std::string& in, std::mt19937_64& rng) {
    std::string s = in;
    int ops = 1 + static_cast<int>(rng() % 4);
    for (int k = 0; k < ops; ++k) {
        size_t pos = s.empty() ? 0 : rng() % s.size();
        switch (rng() % 7) {
        case 0:
        case 1:  // flip bits of one byte
            if (!s.empty()) s[pos] = static_cast<char>(s[pos] ^ static_cast<char>(1 + rng() % 255));
            break;
        case 2:  // an interesting byte
            if (!s.empty()) s[pos] = "\0\n\r,\"\xff:{}[]-#&*!|>'\t"[rng() % 20];
            break;
        case 3:  // insert a run
            s.insert(pos, std::string(1 + rng() % 64, static_cast<char>(rng())));
            break;
        case 4:  // delete a run
            if (!s.empty()) s.erase(pos, 1 + rng() % 64);
            break;
        case 5:  // truncate
            s.resize(pos);
            break;
        case 6:  // duplicate a span
            if (!s.empty()) {
                size_t len = 1 + rng() % std::min<size_t>(s.size() - pos, 256);
                s.insert(rng() % s.size(), s.substr(pos, len));
            }
            break;
        }
    }
    return s;
}

}  // namespace fuzz
