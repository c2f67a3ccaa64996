// The web app at / (http/webui.h) over real HTTP: every embedded file with its content type,
// gzip when asked, open without the API key while the API stays closed, and --no-webui.
#include "http/webui.h"
#include "server_test_util.h"

namespace sluice::test {
namespace {

std::string header(const HttpResult& r, const char* name) {
  return httplib::detail::get_header_value(r.headers, name, 0, "");
}

TEST(ServerWebui, EveryEmbeddedFileIsServedWithItsContentType) {
  const auto assets = http::web_assets();
  ASSERT_FALSE(assets.empty());
  SLUICE_REQUIRE_SERVER(s);
  const HttpResult index = http_call(s->port, "GET", "/");
  EXPECT_EQ(index.status, 200);
  EXPECT_EQ(header(index, "Content-Type"), "text/html; charset=utf-8");
  EXPECT_EQ(header(index, "Cache-Control"), "no-cache");
  EXPECT_NE(index.body.find("webui/app.js"), std::string::npos) << index.body;
  bool saw_js = false, saw_css = false, saw_font = false;
  for (const http::WebAsset& a : assets) {
    const HttpResult r = http_call(s->port, "GET", "/webui/" + std::string(a.path));
    EXPECT_EQ(r.status, 200) << a.path;
    EXPECT_EQ(r.body, a.body) << a.path;
    EXPECT_EQ(header(r, "Content-Type"), a.content_type) << a.path;
    saw_js |= a.content_type == "text/javascript; charset=utf-8";
    saw_css |= a.content_type == "text/css; charset=utf-8";
    if (a.content_type == "font/woff2") {
      saw_font = true;
      EXPECT_EQ(header(r, "Cache-Control"), "public, max-age=31536000, immutable");
    }
  }
  EXPECT_TRUE(saw_js && saw_css && saw_font);
  const HttpResult missing = http_call(s->port, "GET", "/webui/nothing.js");
  EXPECT_EQ(missing.status, 404);
  EXPECT_EQ(missing.j()["error"]["type"], "not_found_error");
  EXPECT_EQ(http_call(s->port, "POST", "/", "{}").status, 405);
}

TEST(ServerWebui, TextFilesGoOutGzippedWhenTheClientAcceptsIt) {
  SLUICE_REQUIRE_SERVER(s);
  const http::WebAsset* js = http::find_web_asset("/webui/app.js");
  ASSERT_TRUE(js);
  ASSERT_FALSE(js->gzip.empty());
  EXPECT_LT(js->gzip.size(), js->body.size() / 2);
  httplib::Client cli("127.0.0.1", s->port);
  cli.set_decompress(false);
  httplib::Result r = cli.Get("/webui/app.js", {{"Accept-Encoding", "gzip, deflate, br"}});
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(r->get_header_value("Content-Encoding"), "gzip");
  EXPECT_EQ(r->get_header_value("Vary"), "Accept-Encoding");
  EXPECT_EQ(r->body, js->gzip);
  // Without it: the plain bytes; and the API's JSON is never compressed.
  r = cli.Get("/webui/app.js");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->get_header_value("Content-Encoding"), "");
  EXPECT_EQ(r->body, js->body);
  r = cli.Get("/v1/models", {{"Accept-Encoding", "gzip"}});
  ASSERT_TRUE(r);
  EXPECT_EQ(r->get_header_value("Content-Encoding"), "");
  EXPECT_EQ(json::parse(r->body)["object"], "list");
}

TEST(ServerWebui, TheAppIsOpenWithAnApiKeyAndTheApiIsNot) {
  SLUICE_REQUIRE_SERVER(s, make_config([](auto& c) { c.api_key = "webui-key"; }));
  EXPECT_EQ(http_call(s->port, "GET", "/").status, 200);
  EXPECT_EQ(http_call(s->port, "GET", "/webui/app.js").status, 200);
  EXPECT_EQ(http_call(s->port, "GET", "/v1/models").status, 401);
  EXPECT_EQ(
      http_call(s->port, "GET", "/v1/models", "", {{"Authorization", "Bearer webui-key"}}).status,
      200);
}

TEST(ServerWebui, NoWebuiAnswers404) {
  SLUICE_REQUIRE_SERVER(s, make_config([](auto& c) { c.webui = false; }));
  for (const char* path : {"/", "/webui/app.js", "/webui/index.html"}) {
    const HttpResult r = http_call(s->port, "GET", path);
    EXPECT_EQ(r.status, 404) << path;
    EXPECT_EQ(r.j()["error"]["code"], "not_found") << path;
  }
  EXPECT_EQ(http_call(s->port, "GET", "/health").status, 200);
}

}  // namespace
}  // namespace sluice::test
