// A third-party sink as a user would write it (only the SDK): counts the
// rows per event kind and writes rowcount.txt in the process folder.
#include <msmemscope/plugin.hpp>

#include <fstream>
#include <map>
#include <string>

class RowCountSink : public msmemscope::ISink {
public:
    static constexpr const char* kTypeName = "rowcount";
    static constexpr const char* kVersion = "0.1.0";
    static constexpr const char* kDescription = "test sink: rows per event kind in rowcount.txt";

    RowCountSink(msmemscope::Host, const msmemscope::Options&) {}
    void begin(const msmemscope::RunInfo& run) override { dir_ = run.output_dir; }
    void on_event(const msms_event& ev) override {
        const char* k = msms_event_kind_name(ev.kind);
        ++counts_[k ? k : "?"];
    }
    void finish() override {
        std::ofstream out(dir_ + "/rowcount.txt");
        for (auto& [k, n] : counts_) out << k << " " << n << "\n";
    }

private:
    std::string dir_;
    std::map<std::string, long> counts_;
};

MSMEMSCOPE_PLUGIN(RowCountSink)
