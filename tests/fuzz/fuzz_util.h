// Shared pieces of the fuzz tests: a seeded generator, a scratch folder and
// the time budget of one fuzz case.
#pragma once

#include <chrono>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

namespace fuzz {

// Seeds are fixed: a failure reproduces with the same build.
constexpr uint64_t kSeed = 0x5eed16;

// A scratch folder removed at exit.
class TempDir {
public:
    TempDir();
    ~TempDir();
    const std::string& path() const { return path_; }
    std::string file(const std::string& name) const { return path_ + "/" + name; }

private:
    std::string path_;
};

void write_file(const std::string& path, const std::string& bytes);

// Stops a fuzz loop after `seconds` even if cases remain (slow machines).
class Budget {
public:
    explicit Budget(double seconds)
        : end_(std::chrono::steady_clock::now() +
               std::chrono::milliseconds(static_cast<long long>(seconds * 1000))) {}
    bool left() const { return std::chrono::steady_clock::now() < end_; }

private:
    std::chrono::steady_clock::time_point end_;
};

// Mutations of a valid input: byte flips, inserted and deleted runs,
// truncation, duplicated spans, random bytes.
std::string mutate(const std::string& in, std::mt19937_64& rng);

}  // namespace fuzz
