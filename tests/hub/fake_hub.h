// A local stand-in for the Hugging Face hub and its CDN, for hub/ tests: two cpp-httplib
// servers on 127.0.0.1 (free ports), each listening in its own thread.
//
//   hub:  GET /{owner}/{repo}/resolve/{revision}/{file}
//           -> 404 / 401 / forced status, or
//           -> 302 to cdn /cdn/{same path} with X-Linked-Size (like LFS files), or
//           -> the bytes directly (like small non-LFS files)
//   cdn:  GET /cdn/{same path} -> the bytes, honouring `Range: bytes=N-` (206, 416)
//
// Misbehaviours (dropped connections, lying sizes, ignored ranges) are per-file settings.
// Every request is recorded before it is routed, so a test can count them.
#pragma once

#include <httplib.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace sluice::test {

// How the fake hub serves one file.
struct FakeFile {
  std::string bytes{};
  bool via_cdn = true;                    // hub answers 302 to the CDN, with X-Linked-Size
  std::optional<uint64_t> linked_size{};  // X-Linked-Size to announce (default: the true size)
  bool ignore_range = false;              // 200 with the whole file, chunked (no Content-Length)
  uint64_t announced_extra = 0;           // Content-Length claims this many more bytes than sent
  int drops = 0;                          // the next `drops` body responses close the connection
  size_t drop_after = 0;                  //   once the file offset reaches this byte
  std::string token{};                    // hub requires `Authorization: Bearer <token>`
  int status = 0;                         // hub answers with this status instead (403, 500...)
};

struct SeenRequest {
  std::string server;  // "hub" or "cdn"
  std::string path;
  std::string range;          // the Range header, "" when absent
  std::string authorization;  // the Authorization header, "" when absent
};

class FakeHub {
 public:
  FakeHub() {
    for (auto [svr, name] : {std::pair{&hub_, "hub"}, std::pair{&cdn_, "cdn"}}) {
      svr->set_pre_routing_handler(
          [this, name = std::string(name)](const httplib::Request& req, httplib::Response&) {
            std::lock_guard<std::mutex> lock(mu_);
            seen_.push_back({name, req.path, req.get_header_value("Range"),
                             req.get_header_value("Authorization")});
            return httplib::Server::HandlerResponse::Unhandled;
          });
    }
    hub_.Get(".*",
             [this](const httplib::Request& req, httplib::Response& res) { serve_hub(req, res); });
    cdn_.Get("/cdn(/.*)", [this](const httplib::Request& req, httplib::Response& res) {
      serve_bytes(req.matches[1].str(), req, res);
    });
    // The CDN first: the hub's handlers read cdn_port_, written before the hub thread starts.
    cdn_port_ = start(cdn_, cdn_thread_);
    hub_port_ = start(hub_, hub_thread_);
  }
  ~FakeHub() {
    hub_.stop();
    cdn_.stop();
    hub_thread_.join();
    cdn_thread_.join();
  }
  FakeHub(const FakeHub&) = delete;
  FakeHub& operator=(const FakeHub&) = delete;

  std::string endpoint() const { return "http://127.0.0.1:" + std::to_string(hub_port_); }

  // `path` as requested from the hub: "/owner/repo/resolve/main/model.gguf".
  void put(const std::string& path, FakeFile file) {
    std::lock_guard<std::mutex> lock(mu_);
    files_[path] = std::move(file);
  }
  std::vector<SeenRequest> seen() const {
    std::lock_guard<std::mutex> lock(mu_);
    return seen_;
  }
  size_t n_requests() const {
    std::lock_guard<std::mutex> lock(mu_);
    return seen_.size();
  }

 private:
  static int start(httplib::Server& svr, std::thread& thread) {
    const int port = svr.bind_to_any_port("127.0.0.1");
    if (port <= 0) throw std::runtime_error("fake hub: cannot bind a port on 127.0.0.1");
    thread = std::thread([&svr] { svr.listen_after_bind(); });
    // stop() before the accept loop runs would be lost; the socket already queues connections.
    while (!svr.is_running()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    return port;
  }

  std::optional<FakeFile> find(const std::string& path) const {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = files_.find(path);
    if (it == files_.end()) return std::nullopt;
    return it->second;
  }

  void serve_hub(const httplib::Request& req, httplib::Response& res) {
    std::optional<FakeFile> f = find(req.path);
    if (!f) {
      res.status = 404;
      res.set_header("X-Error-Code", "EntryNotFound");
      res.set_header("X-Error-Message", "Entry not found");
      return;
    }
    if (!f->token.empty() && req.get_header_value("Authorization") != "Bearer " + f->token) {
      res.status = 401;
      return;
    }
    if (f->status != 0) {
      res.status = f->status;
      return;
    }
    if (f->via_cdn) {
      res.set_header("X-Linked-Size", std::to_string(f->linked_size.value_or(f->bytes.size())));
      res.set_redirect("http://127.0.0.1:" + std::to_string(cdn_port_) + "/cdn" + req.target);
      return;
    }
    serve_bytes(req.path, req, res);
  }

  // cpp-httplib slices content-provider responses to the request's Range itself (206 with
  // Content-Range); the provider writes from the absolute file offset it is given.
  void serve_bytes(const std::string& path, const httplib::Request& req, httplib::Response& res) {
    uint64_t stop = 0;
    std::optional<FakeFile> f;
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = files_.find(path);
      if (it == files_.end()) {
        res.status = 404;
        return;
      }
      f = it->second;
      stop = f->bytes.size();
      if (it->second.drops > 0) {
        --it->second.drops;
        stop = f->drop_after;
      }
    }
    auto data = std::make_shared<const std::string>(std::move(f->bytes));
    if (f->ignore_range) {
      res.status = 200;  // also keeps httplib from applying the Range
      res.set_chunked_content_provider(
          "application/octet-stream", [data](size_t offset, httplib::DataSink& sink) {
            if (offset >= data->size()) {
              sink.done();
              return true;
            }
            return sink.write(data->data() + offset, std::min(kChunk, data->size() - offset));
          });
      return;
    }
    const std::string range = req.get_header_value("Range");
    if (range.starts_with("bytes=") && std::stoull(range.substr(6)) >= data->size()) {
      res.status = 416;
      res.set_header("Content-Range", "bytes */" + std::to_string(data->size()));
      return;
    }
    res.set_content_provider(data->size() + f->announced_extra, "application/octet-stream",
                             [data, stop](size_t offset, size_t length, httplib::DataSink& sink) {
                               if (offset >= stop) return false;  // close the connection mid-body
                               const size_t n = std::min({length, kChunk, size_t(stop - offset)});
                               return sink.write(data->data() + offset, n);
                             });
  }

  static constexpr size_t kChunk = 64 * 1024;  // bytes per DataSink::write

  mutable std::mutex mu_;
  std::map<std::string, FakeFile> files_;  // guarded by mu_
  std::vector<SeenRequest> seen_;          // guarded by mu_
  httplib::Server hub_, cdn_;
  int hub_port_ = 0, cdn_port_ = 0;
  std::thread hub_thread_, cdn_thread_;
};

}  // namespace sluice::test
