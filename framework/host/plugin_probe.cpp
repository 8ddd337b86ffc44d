// msmemscope-plugin-probe: loads plugin files one by one, as the host would,
// for Registry::discover(). On fd 3 it writes "begin N" before and "end N"
// after the N-th file: when a library crashes or ends this process while
// being loaded (a constructor that aborts, a sanitizer runtime that refuses
// to start), the host knows which one from the last "begin" without an "end",
// refuses it with the loader's last words (our stderr), and runs the helper
// again on the files after it. The host itself never loads such a file.
#include <unistd.h>

#include <cstdio>
#include <string>

#include "registry.h"

int main(int argc, char** argv) {
    msms::Registry registry;
    registry.set_probe_helper("");
    for (int i = 1; i < argc; ++i) {
        std::string begin = "begin " + std::to_string(i - 1) + "\n";
        if (write(3, begin.data(), begin.size()) < 0) return 2;
        registry.load(argv[i]);
        std::string end = "end " + std::to_string(i - 1) + "\n";
        if (write(3, end.data(), end.size()) < 0) return 2;
    }
    // Without running the plugins' static destructors: those are not loading.
    std::fflush(nullptr);
    _exit(0);
}
