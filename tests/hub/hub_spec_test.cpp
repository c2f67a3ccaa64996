// hf:// spec validation, URL and cache-path layout, plain paths. No network.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include "hub/hub.h"
#include "test_util.h"

namespace sluice {
namespace {

TEST(HubSpec, IsHubSpec) {
  EXPECT_TRUE(is_hub_spec("hf://a/b/c.gguf"));
  EXPECT_TRUE(is_hub_spec("hf://"));
  EXPECT_FALSE(is_hub_spec("model.gguf"));
  EXPECT_FALSE(is_hub_spec("/models/hf://x.gguf"));
  EXPECT_FALSE(is_hub_spec("hf:/a/b/c.gguf"));
  EXPECT_FALSE(is_hub_spec("HF://a/b/c.gguf"));
}

TEST(HubSpec, ParsesOwnerRepoFileAndRevision) {
  auto s = parse_hub_spec("hf://Qwen/Qwen2.5-0.5B-Instruct-GGUF/qwen2.5-0.5b-instruct-q8_0.gguf");
  ASSERT_TRUE(s.ok()) << s.message();
  EXPECT_EQ(s->owner, "Qwen");
  EXPECT_EQ(s->repo, "Qwen2.5-0.5B-Instruct-GGUF");
  EXPECT_EQ(s->file, "qwen2.5-0.5b-instruct-q8_0.gguf");
  EXPECT_EQ(s->revision, "main");

  s = parse_hub_spec("hf://o/r/sub/dir/Model-Q4_K_M.GGUF@v1.0");
  ASSERT_TRUE(s.ok()) << s.message();
  EXPECT_EQ(s->file, "sub/dir/Model-Q4_K_M.GGUF");
  EXPECT_EQ(s->revision, "v1.0");

  s = parse_hub_spec("hf://o/r/m.gguf@0123456789abcdef0123456789abcdef01234567");
  ASSERT_TRUE(s.ok()) << s.message();
  EXPECT_EQ(s->revision, "0123456789abcdef0123456789abcdef01234567");
}

TEST(HubSpec, RejectsBadSpecs) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"hf://", "needs an owner, a repo and a file"},
      {"hf://owner", "needs an owner, a repo and a file"},
      {"hf://owner/repo", "needs an owner, a repo and a file"},
      {"hf://owner/repo/", "needs an owner, a repo and a file"},
      {"hf://owner//m.gguf", "needs an owner, a repo and a file"},
      {"hf:///etc/passwd.gguf", "absolute paths are not allowed"},
      {"hf://o/r//etc/m.gguf", "absolute paths are not allowed"},
      {"hf://o/r/a//m.gguf", "empty path segment"},
      {"hf://../r/m.gguf", "owner may not be '..'"},
      {"hf://o/../m.gguf", "repo may not be '..'"},
      {"hf://o/r/../m.gguf", "'..' path segments are not allowed"},
      {"hf://o/r/a/../../../x.gguf", "'..' path segments are not allowed"},
      {"hf://o/r/./m.gguf", "'.' path segments are not allowed"},
      {"hf://o/r/m.gguf@", "empty revision"},
      {"hf://o/r/m.gguf@..", "revision may not be '..'"},
      {"hf://o/r/m.gguf@refs/pr/1", "revision 'refs/pr/1' may only contain"},
      {"hf://o/r/m.gguf@a@b", "revision 'a@b' may only contain"},
      {"hf://o w/r/m.gguf", "owner 'o w' may only contain"},
      {"hf://o/r:x/m.gguf", "repo 'r:x' may only contain"},
      {"hf://o/r/a\\..\\m.gguf", "control character or backslash"},
      {std::string("hf://o/r/m\n.gguf"), "control character or backslash"},
      {"hf://o/r/model.bin", "is not a .gguf file"},
      {"hf://o/r/gguf", "is not a .gguf file"},
      {"hf://o/" + std::string(100, 'r') + "/m.gguf", "longer than 96"},
  };
  for (const auto& [spec, why] : cases) {
    auto s = parse_hub_spec(spec);
    ASSERT_FALSE(s.ok()) << spec;
    EXPECT_NE(s.message().find(why), std::string::npos) << spec << " -> " << s.message();
    EXPECT_NE(s.message().find("invalid model spec"), std::string::npos) << s.message();
  }
}

TEST(HubSpec, UrlEncodesEachSegment) {
  auto s = parse_hub_spec("hf://o/r.x/dir/my model+1%.gguf@v2");
  ASSERT_TRUE(s.ok()) << s.message();
  EXPECT_EQ(hub_file_url("https://example.com/", *s),
            "https://example.com/o/r.x/resolve/v2/dir/my%20model%2B1%25.gguf");
  EXPECT_EQ(hub_file_url("http://127.0.0.1:8080", *s),
            "http://127.0.0.1:8080/o/r.x/resolve/v2/dir/my%20model%2B1%25.gguf");
}

TEST(HubSpec, CachePathLayout) {
  auto s = parse_hub_spec("hf://o/r/sub/m.gguf@v2");
  ASSERT_TRUE(s.ok()) << s.message();
  EXPECT_EQ(hub_cache_path("/c", *s), "/c/hub/o/r/v2/sub/m.gguf");
  EXPECT_EQ(hub_cache_path("/c/", *s), "/c/hub/o/r/v2/sub/m.gguf");
  EXPECT_EQ(hub_cache_path("rel", *s), "rel/hub/o/r/v2/sub/m.gguf");
}

TEST(HubResolve, PlainPathReturnedUnchanged) {
  test::TempDir tmp;
  const std::string path = tmp.path("m.gguf");
  std::ofstream(path) << "GGUF";
  HubOptions opts;
  opts.cache_dir = tmp.path("cache");
  opts.endpoint = "http://127.0.0.1:1";  // never contacted
  auto r = resolve_model(path, opts);
  ASSERT_TRUE(r.ok()) << r.message();
  EXPECT_EQ(*r, path);

  r = resolve_model(tmp.path("missing.gguf"), opts);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.message().find("missing.gguf' does not exist"), std::string::npos) << r.message();

  r = resolve_model(tmp.path("cache/.."), opts);
  EXPECT_FALSE(r.ok());

  r = resolve_model(tmp.path(""), opts);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.message().find("is a directory"), std::string::npos) << r.message();

  r = resolve_model("hf:/o/r/m.gguf", opts);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.message().find("hf://OWNER/REPO/FILE.gguf"), std::string::npos) << r.message();

  r = resolve_model("", opts);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.message().find("no model given"), std::string::npos) << r.message();
}

TEST(HubResolve, BadSpecCreatesNothing) {
  test::TempDir tmp;
  HubOptions opts;
  opts.cache_dir = tmp.path("cache");
  opts.endpoint = "http://127.0.0.1:1";
  for (const char* spec : {"hf://o/r/../../../../x.gguf", "hf://o/r", "hf:///abs.gguf"}) {
    auto r = resolve_model(spec, opts);
    ASSERT_FALSE(r.ok()) << spec;
    EXPECT_NE(r.message().find("invalid model spec"), std::string::npos) << r.message();
  }
  EXPECT_FALSE(std::filesystem::exists(tmp.path("cache")));
}

TEST(HubResolve, InvalidEndpoint) {
  test::TempDir tmp;
  HubOptions opts;
  opts.cache_dir = tmp.path("cache");
  opts.endpoint = "ftp://example.com";
  auto r = resolve_model("hf://o/r/m.gguf", opts);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.message().find("must start with http:// or https://"), std::string::npos)
      << r.message();
}

}  // namespace
}  // namespace sluice
