#include "http/webui.h"

#include <string>

#include "http/api_error.h"
#include "http/http_transport.h"

namespace sluice::http {

namespace {
constexpr std::string_view kPrefix = "/webui/";
}  // namespace

bool is_web_app_path(std::string_view url_path) {
  return url_path == "/" || url_path.starts_with(kPrefix);
}

const WebAsset* find_web_asset(std::string_view url_path) {
  std::string_view rel;
  if (url_path == "/") {
    rel = "index.html";
  } else if (url_path.starts_with(kPrefix)) {
    rel = url_path.substr(kPrefix.size());
  } else {
    return nullptr;
  }
  for (const WebAsset& a : web_assets()) {
    if (a.path == rel) return &a;
  }
  return nullptr;
}

void serve_web_asset(const httplib::Request& req, httplib::Response& res) {
  const WebAsset* a = find_web_asset(req.path);
  if (!a) {
    send_error(res,
               status_error(404, "no web app file at " + req.path, "not_found_error", "not_found"));
    return;
  }
  const bool immutable = a->path.starts_with("fonts/");
  res.set_header("Cache-Control", immutable ? "public, max-age=31536000, immutable" : "no-cache");
  res.set_header("X-Content-Type-Options", "nosniff");
  const std::string type(a->content_type);
  if (!a->gzip.empty()) {
    res.set_header("Vary", "Accept-Encoding");
    if (current_request_accepts_gzip()) {
      res.set_header("Content-Encoding", "gzip");
      res.set_content(a->gzip.data(), a->gzip.size(), type);
      return;
    }
  }
  res.set_content(a->body.data(), a->body.size(), type);
}

}  // namespace sluice::http
