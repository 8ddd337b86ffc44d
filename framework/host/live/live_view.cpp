#include "live/live_view.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <random>
#include <vector>

#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/strand.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

#include "live/live_page.h"
#include "live/live_state.h"

namespace msms {
namespace live {

namespace beast = boost::beast;
namespace http = beast::http;
namespace net = boost::asio;
using tcp = net::ip::tcp;

namespace {

std::string endpoint_text(const std::string& addr, unsigned port) {
    return (addr.find(':') != std::string::npos ? "[" + addr + "]" : addr) + ":" + std::to_string(port);
}

// Each process block without its first line (the clock): what changed.
std::string without_clock(const std::string& text) {
    std::string out;
    size_t at = 0;
    while (at < text.size()) {
        size_t nl = text.find('\n', at);
        std::string line = text.substr(at, nl == std::string::npos ? std::string::npos : nl - at + 1);
        if (line.rfind("msmemscope live: pid ", 0) == 0) {
            size_t clock = line.find(")  ");
            if (clock != std::string::npos) line = line.substr(0, clock) + line.substr(std::min(line.size(), clock + 13));
        }
        out += line;
        if (nl == std::string::npos) break;
        at = nl + 1;
    }
    return out;
}

}  // namespace

int http_answer(const std::string& method, const std::string& target, const std::string& json, std::string& type,
                std::string& body) {
    std::string path = target.substr(0, target.find('?'));
    if (path != "/" && path != "/live.json") {
        type = "text/plain; charset=utf-8";
        body = "not found: the live view serves / and /live.json only\n";
        return 404;
    }
    if (method != "GET" && method != "HEAD") {
        type = "text/plain; charset=utf-8";
        body = "method not allowed\n";
        return 405;
    }
    if (path == "/") {
        type = "text/html; charset=utf-8";
        body = LiveView::page();
    } else {
        type = "application/json";
        body = json;
    }
    return 200;
}

// ------------------------------------------------------------- the server

struct LiveView::Server {
    net::io_context ioc{1};
    tcp::acceptor acceptor{ioc};
    std::thread thread;
    LiveView* view = nullptr;
    std::vector<std::string> hosts;  // Host headers answered (no other site's name: DNS rebinding)

    void accept();
};

namespace {

class Conn : public std::enable_shared_from_this<Conn> {
public:
    Conn(tcp::socket s, LiveView* view, const std::vector<std::string>* hosts)
        : stream_(std::move(s)), view_(view), hosts_(hosts) {
        parser_.header_limit(16 * 1024);
        parser_.body_limit(16 * 1024);
    }
    void run() {
        stream_.expires_after(std::chrono::seconds(10));
        auto self = shared_from_this();
        http::async_read(stream_, buf_, parser_, [self](beast::error_code ec, size_t) { self->on_read(ec); });
    }

private:
    void on_read(beast::error_code ec) {
        if (ec) return;
        const auto& req = parser_.get();
        std::string type, body;
        int status;
        std::string host(req[http::field::host]);
        bool host_ok = false;
        for (auto& h : *hosts_) host_ok = host_ok || host == h;
        if (!host_ok) {
            status = 403;
            type = "text/plain; charset=utf-8";
            body = "forbidden: unexpected Host header\n";
        } else {
            status = http_answer(std::string(req.method_string()), std::string(req.target()), view_->combined_json(), type, body);
        }
        res_.version(req.version());
        res_.result(static_cast<http::status>(status));
        res_.set(http::field::server, "msmemscope");
        res_.set(http::field::content_type, type);
        res_.set(http::field::cache_control, "no-store");
        res_.set("X-Content-Type-Options", "nosniff");
        res_.set("Content-Security-Policy",
                 "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; connect-src 'self'");
        res_.keep_alive(false);
        if (req.method() != http::verb::head) res_.body() = std::move(body);
        res_.prepare_payload();
        auto self = shared_from_this();
        http::async_write(stream_, res_, [self](beast::error_code, size_t) {
            beast::error_code ignored;
            self->stream_.socket().shutdown(tcp::socket::shutdown_send, ignored);
        });
    }

    beast::tcp_stream stream_;
    beast::flat_buffer buf_;
    http::request_parser<http::string_body> parser_;
    http::response<http::string_body> res_;
    LiveView* view_;
    const std::vector<std::string>* hosts_;
};

}  // namespace

void LiveView::Server::accept() {
    acceptor.async_accept(net::make_strand(ioc), [this](beast::error_code ec, tcp::socket s) {
        if (!acceptor.is_open()) return;
        if (!ec) std::make_shared<Conn>(std::move(s), view, &hosts)->run();
        accept();
    });
}

// ------------------------------------------------------------- the view

LiveView::LiveView(const Config& cfg, bool terminal) : cfg_(cfg), terminal_(terminal), session_(cfg.live_session) {
    start_s_ = static_cast<uint64_t>(time(nullptr));
}

LiveView::~LiveView() { stop(); }

std::string LiveView::new_session_token() {
    std::random_device rd;
    char buf[40];
    std::snprintf(buf, sizeof buf, "%08x%08x%08x%08x", rd(), rd(), rd(), rd());
    return buf;
}

const std::string& LiveView::page() {
    static const std::string p(kLivePage);
    return p;
}

std::string LiveView::start(std::ostream& say) {
    if (cfg_.live_http) {
        auto s = std::make_unique<Server>();
        s->view = this;
        std::string where = "--live-http=" + endpoint_text(cfg_.live_http_address, cfg_.live_http_port);
        beast::error_code ec;
        auto addr = net::ip::make_address(cfg_.live_http_address, ec);
        if (ec) return where + ": not an IP address";
        tcp::endpoint ep(addr, static_cast<unsigned short>(cfg_.live_http_port));
        s->acceptor.open(ep.protocol(), ec);
        if (!ec) s->acceptor.set_option(net::socket_base::reuse_address(true), ec);
        if (!ec) s->acceptor.bind(ep, ec);
        if (!ec) s->acceptor.listen(net::socket_base::max_listen_connections, ec);
        if (ec) return where + ": cannot listen there: " + ec.message();
        port_ = s->acceptor.local_endpoint().port();
        for (std::string h : {cfg_.live_http_address, std::string("127.0.0.1"), std::string("localhost"), std::string("::1")})
            s->hosts.push_back(endpoint_text(h, port_));
        s->hosts.push_back("[::1]:" + std::to_string(port_));
        s->accept();
        Server* raw = s.get();
        s->thread = std::thread([raw] { raw->ioc.run(); });
        server_ = std::move(s);
        say << "msmemscope: live view on http://" << endpoint_text(cfg_.live_http_address, port_) << "/" << std::endl;
    }
    reader_ = std::thread([this] { loop(); });
    return "";
}

void LiveView::stop() {
    if (!reader_.joinable() && !server_) return;
    {
        std::lock_guard<std::mutex> l(mu_);
        stopping_ = true;
    }
    cv_.notify_all();
    if (reader_.joinable()) reader_.join();
    collect();
    {
        std::lock_guard<std::mutex> l(mu_);
        running_ = false;
    }
    draw(true);
    if (server_) {
        net::post(server_->ioc, [s = server_.get()] {
            beast::error_code ec;
            s->acceptor.close(ec);
        });
        server_->ioc.stop();
        if (server_->thread.joinable()) server_->thread.join();
        server_.reset();
    }
}

void LiveView::loop() {
    std::unique_lock<std::mutex> l(mu_);
    while (!stopping_) {
        l.unlock();
        collect();
        draw(false);
        l.lock();
        cv_.wait_for(l, std::chrono::seconds(1), [this] { return stopping_; });
    }
}

void LiveView::collect() {
    int out = open(cfg_.output.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (out < 0) return;
    int list_fd = dup(out);
    DIR* d = list_fd >= 0 ? fdopendir(list_fd) : nullptr;
    if (!d) {
        if (list_fd >= 0) close(list_fd);
        close(out);
        return;
    }
    std::map<std::pair<uint64_t, uint64_t>, Proc> found;
    std::string token = "\"" + session_ + "\"";
    while (dirent* e = readdir(d)) {
        std::string name = e->d_name;
        if (name.rfind("msmemscope_", 0) != 0) continue;
        struct stat st;
        if (fstatat(out, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISDIR(st.st_mode)) continue;
        if (static_cast<uint64_t>(st.st_mtime) + 1 < start_s_) continue;  // a folder of an earlier run
        int dfd = openat(out, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (dfd < 0) continue;
        std::string json, text;
        if (read_file_in(dfd, "live.json", json) && json.find(token) != std::string::npos && json.size() > 2 &&
            json.front() == '{') {
            read_file_in(dfd, "live.txt", text);
            while (!json.empty() && (json.back() == '\n' || json.back() == ' ')) json.pop_back();
            found[{static_cast<uint64_t>(st.st_dev), static_cast<uint64_t>(st.st_ino)}] = {name, std::move(json),
                                                                                         std::move(text)};
        }
        close(dfd);
    }
    closedir(d);
    close(out);
    std::lock_guard<std::mutex> l(mu_);
    // A folder read once stays shown with its last snapshot, once: renamed
    // at its end, it is the same folder under its new name.
    for (auto& [k, v] : found) procs_[k] = std::move(v);
}

std::vector<const LiveView::Proc*> LiveView::by_name() const {
    std::vector<const Proc*> v;
    for (auto& [k, p] : procs_) v.push_back(&p);
    std::sort(v.begin(), v.end(), [](const Proc* a, const Proc* b) { return a->folder < b->folder; });
    return v;
}

std::string LiveView::combined_json() const {
    std::lock_guard<std::mutex> l(mu_);
    std::string o = "{\"session\": \"" + session_ + "\", \"running\": ";
    o += running_ ? "true" : "false";
    o += ", \"processes\": [";
    bool first = true;
    for (const Proc* p : by_name()) {
        if (!first) o += ", ";
        first = false;
        o += p->json;
    }
    o += "]}\n";
    return o;
}

void LiveView::draw(bool last) {
    if (!cfg_.live) return;
    std::string text;
    {
        std::lock_guard<std::mutex> l(mu_);
        for (const Proc* p : by_name()) {
            if (!text.empty()) text += "\n";
            text += p->text;
        }
    }
    if (text.empty()) {
        if (drew_waiting_ || last) return;
        drew_waiting_ = true;
        text = "msmemscope live: waiting for the program's first events...\n";
    }
    std::string out;
    if (terminal_) {
        out = "\033[H\033[2J" + text;  // home, clear: one screen, like top
    } else {
        std::string key = without_clock(text);
        if (key == last_drawn_) return;
        last_drawn_ = key;
        out = text + "\n";
    }
    std::fwrite(out.data(), 1, out.size(), stdout);
    std::fflush(stdout);
}

}  // namespace live
}  // namespace msms
