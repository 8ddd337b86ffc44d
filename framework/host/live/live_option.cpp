// --live and --live-http: validated before anything starts (config.h).
#include <arpa/inet.h>

#include <string>
#include <vector>

#include "config.h"
#include "config/options.h"
#include "util/text.h"

namespace msms {

namespace {

const char* const kHttpAllowed =
    "PORT or ADDRESS:PORT; ADDRESS an IPv4 address, an [IPv6] address in brackets or localhost; PORT 0..65535 "
    "(0: any free port); e.g. --live-http=127.0.0.1:8765";

bool parse_port(const std::string& s, unsigned& port) {
    if (s.empty() || s.size() > 5) return false;
    unsigned v = 0;
    for (char c : s) {
        if (c < '0' || c > '9') return false;
        v = v * 10 + static_cast<unsigned>(c - '0');
    }
    if (v > 65535) return false;
    port = v;
    return true;
}

}  // namespace

void validate_live_options(const RawValue* live, const RawValue* http, Config& cfg, std::vector<std::string>& errors) {
    if (live) {
        bool b = false;
        if (!cfgopt::parse_bool(live->value, b)) errors.push_back(cfgopt::bad_value(live->origin, live->value, "true, false"));
        else cfg.live = b;
    }
    if (http) {
        std::string v = http->value;
        std::string addr = "127.0.0.1", port_text = v;
        bool ok = true;
        if (!v.empty() && v[0] == '[') {
            size_t close = v.find("]:");
            if (close == std::string::npos) ok = false;
            else {
                addr = v.substr(1, close - 1);
                port_text = v.substr(close + 2);
                in6_addr a6;
                ok = inet_pton(AF_INET6, addr.c_str(), &a6) == 1;
            }
        } else if (size_t colon = v.rfind(':'); colon != std::string::npos) {
            addr = v.substr(0, colon);
            port_text = v.substr(colon + 1);
            if (addr == "localhost") addr = "127.0.0.1";
            in_addr a4;
            ok = addr.find(':') == std::string::npos && inet_pton(AF_INET, addr.c_str(), &a4) == 1;
        }
        unsigned port = 0;
        if (!ok || !parse_port(port_text, port)) {
            errors.push_back(cfgopt::bad_value(http->origin, v, kHttpAllowed));
        } else {
            cfg.live_http = true;
            cfg.live_http_address = addr;
            cfg.live_http_port = port;
            bool loopback = addr == "::1" || addr.rfind("127.", 0) == 0;
            // Only what the user typed opens the view to the network.
            if (!loopback)
                cfg.warnings.push_back(http->origin + "=" + cfgopt::shown(v) + ": the live view is served on " +
                                       addr + ", not only on this machine: anyone who can reach that address can "
                                       "read it (there is no password)");
        }
    }
    if ((cfg.live || cfg.live_http) && (cfg.compare || cfg.analyze || !cfg.merge.empty() || !cfg.serve_session.empty())) {
        const RawValue* v = live ? live : http;
        errors.push_back(v->origin + ": the live view shows a run while it goes on: use it with a program "
                                     "(msmemscope --live -- <prog>) or --replay, not with --compare, --analyze or --merge");
    }
}

}  // namespace msms
