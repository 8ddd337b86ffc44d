// UnnamedFile::publish_new: a file that gets its name only with its first
// bytes in it, never over anything already there.
#include <doctest/doctest.h>
#include <fcntl.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "util/unnamed_file.h"

namespace {
struct Folder {
    std::string dir;
    int fd = -1;
    Folder() {
        std::string t = (std::filesystem::temp_directory_path() / "msms_unnamed_XXXXXX").string();
        REQUIRE(mkdtemp(t.data()));
        dir = t;
        fd = open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        REQUIRE(fd >= 0);
    }
    ~Folder() {
        close(fd);
        std::filesystem::remove_all(dir);
    }
    size_t entries() const {
        size_t n = 0;
        for (auto& e : std::filesystem::directory_iterator(dir)) n += !e.path().empty();
        return n;
    }
    std::string read(const std::string& name) const {
        std::ifstream f(dir + "/" + name);
        std::stringstream s;
        s << f.rdbuf();
        return s.str();
    }
};
}  // namespace

TEST_CASE("unnamed file: no name until publish_new, then its bytes are there and it stays open") {
    Folder f;
    msms::UnnamedFile u;
    int fd = u.open(f.fd, "dump.csv", 0666);
    REQUIRE(fd >= 0);
    REQUIRE(write(fd, "a,b\n", 4) == 4);
    CHECK(f.entries() == 0);  // nothing to see while it is written (or a hidden temporary on a filesystem without O_TMPFILE)
    REQUIRE(u.publish_new("dump.csv"));
    int kept = u.release();
    CHECK(kept == fd);
    CHECK(f.entries() == 1);
    CHECK(f.read("dump.csv") == "a,b\n");
    REQUIRE(write(kept, "1,2\n", 4) == 4);  // written on through the same descriptor
    CHECK(f.read("dump.csv") == "a,b\n1,2\n");
    struct stat st;
    REQUIRE(fstat(kept, &st) == 0);
    mode_t mask = umask(0);
    umask(mask);
    CHECK((st.st_mode & 0777) == (0666 & ~mask));  // as O_CREAT with 0666 gives
    close(kept);
}

TEST_CASE("unnamed file: publish_new never replaces a file or a link, and leaves nothing behind") {
    Folder f;
    std::ofstream(f.dir + "/taken") << "theirs";
    REQUIRE(symlink((f.dir + "/taken").c_str(), (f.dir + "/link").c_str()) == 0);
    for (const char* name : {"taken", "link"}) {
        msms::UnnamedFile u;
        int fd = u.open(f.fd, name, 0666);
        REQUIRE(fd >= 0);
        REQUIRE(write(fd, "mine", 4) == 4);
        CHECK_FALSE(u.publish_new(name));
        CHECK(errno == EEXIST);
        CHECK(u.release() == -1);  // discarded
    }
    CHECK(f.read("taken") == "theirs");
    CHECK(f.entries() == 2);
}
