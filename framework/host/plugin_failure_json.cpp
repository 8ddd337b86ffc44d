#include "plugin_failure_json.h"

namespace msms {

Json plugin_failure_json(const std::string& plugin, const std::string& kind, const std::string& what) {
    Json entry = Json::object();
    entry.set("plugin", Json(plugin));
    entry.set("kind", Json(kind));
    entry.set("what", Json(what));
    return entry;
}

}  // namespace msms
