// The effective Config's own views: the agent's option string, config.json,
// the backend name.
#include "config.h"
#include "capture_disk.h"

#include "util/json.h"
#include "util/text.h"

namespace msms {

bool Config::wants_device_kind(const std::string& kind) const {
    for (auto& d : devices)
        if (d == kind || d.rfind(kind + ":", 0) == 0) return true;
    return false;
}

std::string Config::backend() const {
    // msMemScope names the run folder "_ascend"; we keep _cuda/_cpu for the others.
    for (auto& d : devices)
        if (d.rfind("npu", 0) == 0) return "ascend";
    for (auto& d : devices)
        if (d.rfind("cuda", 0) == 0) return "cuda";
    return "cpu";
}

int Config::log_file_threshold() const {
    if (log_level == "debug") return 0;
    if (log_level == "info") return 1;
    if (log_level == "warn") return 2;
    return 3;
}

int Config::stderr_threshold() const { return log_level == "debug" ? 0 : log_level == "error" ? 3 : 2; }

std::string Config::agent_options() const {
    std::string s = "events=" + join(std::vector<std::string>(events.begin(), events.end()), ",");
    std::vector<std::string> cs;
    if (c_stack) cs.push_back("c:" + std::to_string(c_depth));
    if (py_stack) cs.push_back("python:" + std::to_string(py_depth));
    s += ";call_stack=" + join(cs, ",");
    if (events.count("access") && !op_access) s += ";op_access=0";
    s += ";collect_mode=" + collect_mode;
    s += ";follow_fork=" + std::string(follow_fork ? "1" : "0");
    s += ";device=" + join(devices, ",");
    std::vector<std::string> lv;
    if (levels & 1u) lv.push_back("op");
    if (levels & 2u) lv.push_back("kernel");
    s += ";level=" + join(lv, ",");
    std::vector<std::string> st;
    for (auto n : steps) st.push_back(std::to_string(n));
    s += ";steps=" + join(st, ",");
    if (watch) s += ";watch=" + watch->text;
    if (!step_on.empty()) s += ";step_on=" + join(step_on, ",");
    s += ";collectors=" + join(collectors, ",");
    // A capture the host releases as it reads (not --save-capture): at most
    // this many chunks unreleased before the program waits for the host
    // (capture_format.h, chunks_released; capture_disk.h for the sizes).
    if (!save_capture) {
        if (uint32_t budget = capture_budget_chunks(aggregate)) s += ";capture_budget=" + std::to_string(budget);
    }
    for (auto& name : collectors) {
        auto it = plugin_options.find(name);
        if (it == plugin_options.end()) continue;
        for (auto& [k, v] : it->second) s += ";" + name + "." + k + "=" + v;
    }
    return s;
}

std::string Config::to_json() const {
    Json j = Json::object();
    Json st = Json::array();
    for (auto n : steps) st.push(Json(static_cast<int64_t>(n)));
    j.set("steps", st);
    if (!step_on.empty()) j.set("step_on", Json::from_list(step_on));
    j.set("device", Json::from_list(devices));
    std::vector<std::string> lv;
    if (levels & 1u) lv.push_back("op");
    if (levels & 2u) lv.push_back("kernel");
    j.set("level", Json(join(lv, ",")));
    j.set("events", Json::from_list(std::vector<std::string>(events.begin(), events.end())));
    j.set("written_events", Json::from_list(std::vector<std::string>(written_events.begin(), written_events.end())));
    Json cs = Json::object();
    if (c_stack) cs.set("c", Json(static_cast<int64_t>(c_depth)));
    if (py_stack) cs.set("python", Json(static_cast<int64_t>(py_depth)));
    j.set("call_stack", cs);
    j.set("collect_mode", Json(collect_mode));
    j.set("analysis", Json::from_list(analyzers));
    j.set("data_format", Json(data_format));
    j.set("sinks", Json::from_list(sinks));
    j.set("watch", watch ? Json(watch->text) : Json());
    j.set("output", Json(output));
    j.set("log_level", Json(log_level));
    j.set("follow_fork", Json(follow_fork));
    if (attach_pid > 0) j.set("attach", Json(static_cast<int64_t>(attach_pid)));
    if (aggregate) j.set("aggregate", Json(true));
    // A Python API session (a plain `python3 script.py`, no command line):
    // what the outputs say to its user names config()'s keys (api_words.h),
    // not command-line options; the sinks read it here.
    if (!serve_session.empty()) j.set("python_api", Json(true));
    j.set("collectors", Json::from_list(collectors));
    Json po = Json::object();
    for (auto& [name, opts] : plugin_options) {
        if (opts.empty()) continue;
        Json o = Json::object();
        for (auto& [k, v] : opts) o.set(k, Json(v));
        po.set(name, o);
    }
    j.set("plugin_options", po);
    j.set("program", Json::from_list(program));
    return j.dump(2);
}

}  // namespace msms
