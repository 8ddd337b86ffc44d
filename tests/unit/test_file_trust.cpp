// untrusted_reason (#16 §4): what a root host refuses to load.
#include <doctest/doctest.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "util/file_trust.h"

using msms::untrusted_reason_for;

namespace {
struct Scratch {
    std::string dir;
    Scratch() {
        std::string t = (std::filesystem::temp_directory_path() / "msms_trust_XXXXXX").string();
        REQUIRE(mkdtemp(t.data()));
        dir = std::filesystem::canonical(t).string();
        chmod(dir.c_str(), 0755);
    }
    ~Scratch() { std::filesystem::remove_all(dir); }
};
}  // namespace

TEST_CASE("file trust: an ordinary user's host checks nothing") {
    CHECK(untrusted_reason_for("/nonexistent/lib.so", 1000) == "");
}

TEST_CASE("file trust: a file the (non-root) tester owns is refused for a root host") {
    // Runs for every user: the check is asked as uid 0 about a file that belongs to
    // the tester. As root (CI) the file is given to user 65534 first.
    Scratch s;
    std::string f = s.dir + "/liby.so";
    std::ofstream(f) << "y";
    chmod(f.c_str(), 0644);
    unsigned owner = geteuid();
    if (owner == 0) {
        REQUIRE(chown(f.c_str(), 65534, 65534) == 0);
        owner = 65534;
    }
    CHECK(untrusted_reason_for(f, 0) == "not loaded as root: " + f + " belongs to user id " + std::to_string(owner) +
                                            ", not root");
    CHECK(untrusted_reason_for(f, 1000) == "");  // asked for an ordinary user: nothing checked
}

TEST_CASE("file trust: root refuses what others could write or own") {
    if (geteuid() != 0) {
        MESSAGE("not root: the ownership changes below need root (CI runs them as root)");
        return;
    }
    Scratch s;
    std::string f = s.dir + "/libx.so";
    std::ofstream(f) << "x";
    chmod(f.c_str(), 0644);
    std::string parent = std::filesystem::path(s.dir).parent_path().string();
    struct stat pst;
    REQUIRE(stat(parent.c_str(), &pst) == 0);
    bool parent_ok = pst.st_uid == 0 && (!(pst.st_mode & S_IWOTH) || (pst.st_mode & S_ISVTX));
    if (!parent_ok) FAIL("the temp folder " << parent << " is not root-owned and sticky or closed like /tmp: "
                                                 "set TMPDIR to one that is");
    CHECK(untrusted_reason_for(f, 0) == "");
    chmod(f.c_str(), 0666);
    CHECK(untrusted_reason_for(f, 0) == "not loaded as root: " + f + " is writable by all users");
    chmod(f.c_str(), 0664);
    REQUIRE(chown(f.c_str(), 0, 100) == 0);
    CHECK(untrusted_reason_for(f, 0) == "not loaded as root: " + f + " is writable by group id 100");
    REQUIRE(chown(f.c_str(), 0, 0) == 0);
    CHECK(untrusted_reason_for(f, 0) == "");  // group root may write
    chmod(f.c_str(), 0644);
    REQUIRE(chown(f.c_str(), 65534, 0) == 0);
    CHECK(untrusted_reason_for(f, 0) == "not loaded as root: " + f + " belongs to user id 65534, not root");
    REQUIRE(chown(f.c_str(), 0, 0) == 0);
    chmod(s.dir.c_str(), 0777);
    CHECK(untrusted_reason_for(f, 0) == "not loaded as root: its folder " + s.dir + " is writable by all users");
    chmod(s.dir.c_str(), 01777);  // sticky: still refused for the file's own folder
    CHECK(untrusted_reason_for(f, 0) == "not loaded as root: its folder " + s.dir + " is writable by all users");
    chmod(s.dir.c_str(), 0755);
    // A link is judged by what it points at.
    std::string link = s.dir + "/link.so";
    REQUIRE(symlink(f.c_str(), link.c_str()) == 0);
    CHECK(untrusted_reason_for(link, 0) == "");
}
