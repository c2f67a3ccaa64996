// The web app (webui/: chat and dashboard) that `sluice serve` and `sluice router` answer at /,
// from files compiled into the binary: no CDN, no network, no files next to the executable.
//
// URL layout:   GET /               -> webui/dist/index.html
//               GET /webui/<file>   -> webui/dist/<file>  (app.js, app.css, fonts/...)
// The files are webui/dist as committed (built from webui/src by `npm run build`); the build
// embeds them with a gzip copy of each text file (cmake/embed_webui.cmake), and a client that
// accepts gzip gets that copy.
#pragma once

#include <httplib.h>

#include <cstddef>
#include <span>
#include <string_view>

namespace sluice::http {

// One embedded file of webui/dist. Views into read-only data of the binary.
struct WebAsset {
  std::string_view path;          // relative to webui/dist: "index.html", "fonts/KaTeX_....woff2"
  std::string_view content_type;  // from the extension: "text/javascript; charset=utf-8", ...
  std::string_view body;          // the file's bytes
  std::string_view gzip;          // gzip of body (text files), or empty
};

// Every embedded file (generated at build time: webui_assets.cpp in the build folder).
std::span<const WebAsset> web_assets();

// The asset a URL path names ("/" is index.html, "/webui/X" is X), or null.
const WebAsset* find_web_asset(std::string_view url_path);

// True for the paths the app owns: "/" and "/webui/..." (a route table's entries for it).
bool is_web_app_path(std::string_view url_path);

// Answers a GET/HEAD of the app: the asset with its content type (gzip when the request accepted
// it), or a 404 in OpenAI's error shape. index.html is revalidated on every load (no-cache);
// fonts have content hashes in their names and are immutable.
void serve_web_asset(const httplib::Request& req, httplib::Response& res);

}  // namespace sluice::http
