// Sink `offline_writeback` (internal, used by `msmemscope --analyze`): keeps
// the Attr changes analyzers make (Host::annotate) in a side file, one
// "ID<TAB>key<TAB>value" line each, that the offline driver maps back onto the
// rows of the analysed dump file. It writes nothing else.
#include <msmemscope/plugin.hpp>

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <stdexcept>
#include <string>

namespace {

class WritebackSink : public msmemscope::ISink {
public:
    static constexpr const char* kTypeName = "offline_writeback";
    static constexpr const char* kVersion = "1.0.0";
    static constexpr const char* kDescription = "(internal) collects analyzers' row annotations for msmemscope --analyze";

    static const msms_option_spec* options(uint32_t& count) {
        static const msms_option_spec specs[] = {
            {"out", MSMS_OPT_STRING, "", nullptr, 0, 0, "file that receives the annotations"},
        };
        count = 1;
        return specs;
    }

    WritebackSink(msmemscope::Host, const msmemscope::Options& opts) : path_(opts.get("out")) {}
    ~WritebackSink() override {
        if (f_) std::fclose(f_);
    }

    void on_event(const msms_event&) override {}

    void on_annotation(uint64_t id, std::string_view key, std::string_view value) override {
        if (path_.empty()) return;
        if (!f_) {
            // Created O_EXCL|O_NOFOLLOW in its folder, itself opened without
            // following a link (issue #29 item 4).
            size_t slash = path_.rfind('/');
            std::string folder = slash == std::string::npos ? "." : slash == 0 ? "/" : path_.substr(0, slash);
            int dir = ::open(folder.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
            std::string why = dir < 0 ? folder + ": " + std::strerror(errno) : "";
            if (dir >= 0) {
                f_ = msmemscope::files::create_stream(dir, path_.substr(slash == std::string::npos ? 0 : slash + 1), why);
                ::close(dir);
            }
            if (!f_) throw std::runtime_error("cannot write " + path_ + ": " + why);
        }
        std::string line = std::to_string(id) + "\t" + clean(key) + "\t" + clean(value) + "\n";
        std::fwrite(line.data(), 1, line.size(), f_);
    }

    void finish() override {
        if (f_) {
            std::fclose(f_);
            f_ = nullptr;
        }
    }

private:
    static std::string clean(std::string_view s) {
        std::string out(s);
        for (auto& c : out)
            if (c == '\t' || c == '\n' || c == '\r') c = ' ';
        return out;
    }
    std::string path_;
    std::FILE* f_ = nullptr;
};

}  // namespace

MSMEMSCOPE_PLUGIN(WritebackSink)
