// resolve_model against a local fake hub (tests/hub/fake_hub.h): redirects, resume, size
// checks, HTTP errors, cache reuse, offline mode, environment defaults. Never the internet.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/file.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "base/log.h"
#include "fake_hub.h"
#include "hub/hub.h"
#include "test_util.h"

namespace sluice {
namespace {

namespace fs = std::filesystem;

// Proxies or a real token in the developer's environment must not leak into these tests.
class HubTestEnvironment : public ::testing::Environment {
 public:
  void SetUp() override {
    for (const char* v :
         {"http_proxy", "HTTP_PROXY", "https_proxy", "HTTPS_PROXY", "all_proxy", "ALL_PROXY",
          "HF_TOKEN", "HF_ENDPOINT", "SLUICE_HF_ENDPOINT", "SLUICE_CACHE"}) {
      ::unsetenv(v);
    }
    set_log_level(LogLevel::kError);
  }
};
const auto* const g_env = ::testing::AddGlobalTestEnvironment(new HubTestEnvironment);

constexpr size_t kFileSize = 300 * 1000 + 7;  // several receive buffers; odd on purpose

std::string random_bytes(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::string s(n, '\0');
  for (char& c : s) c = char(rng() & 0xff);
  return s;
}

void write_file(const std::string& path, const std::string& bytes) {
  fs::create_directories(fs::path(path).parent_path());
  std::ofstream(path, std::ios::binary) << bytes;
}

bool contains(const std::string& haystack, const std::string& needle) {
  return haystack.find(needle) != std::string::npos;
}

class HubDownload : public ::testing::Test {
 protected:
  HubDownload() {
    opts_.endpoint = hub_.endpoint();
    opts_.cache_dir = tmp_.path("cache");
    opts_.progress = [this](uint64_t done, uint64_t total) { progress_.push_back({done, total}); };
  }

  // The cache path of hf://o/r/{file}@{rev}.
  std::string cached(const std::string& file, const std::string& rev = "main") const {
    return opts_.cache_dir + "/hub/o/r/" + rev + "/" + file;
  }

  // In-flight calls never report done == total; the one completion call does, last.
  void expect_progress_done(uint64_t size) const {
    ASSERT_FALSE(progress_.empty());
    EXPECT_EQ(progress_.back(), std::make_pair(size, size));
    for (size_t i = 0; i + 1 < progress_.size(); ++i) {
      EXPECT_LT(progress_[i].first, size);
      EXPECT_LE(progress_[i].first, progress_[i + 1].first);
    }
  }

  test::TempDir tmp_;
  test::FakeHub hub_;
  HubOptions opts_;
  std::vector<std::pair<uint64_t, uint64_t>> progress_;
  const std::string bytes_ = random_bytes(kFileSize, 1);
};

TEST_F(HubDownload, FollowsRedirectToCdn) {
  hub_.put("/o/r/resolve/main/m.gguf", {.bytes = bytes_});
  auto r = resolve_model("hf://o/r/m.gguf", opts_);
  ASSERT_TRUE(r.ok()) << r.message();
  EXPECT_EQ(*r, cached("m.gguf"));
  EXPECT_EQ(test::read_file(*r), bytes_);
  EXPECT_FALSE(fs::exists(*r + ".partial"));
  const auto seen = hub_.seen();
  ASSERT_EQ(seen.size(), 2u);
  EXPECT_EQ(seen[0].server, "hub");
  EXPECT_EQ(seen[1].server, "cdn");
  EXPECT_EQ(seen[1].path, "/cdn/o/r/resolve/main/m.gguf");
  EXPECT_EQ(seen[1].range, "");
  expect_progress_done(kFileSize);
}

TEST_F(HubDownload, DirectFileInSubdirectoryAtRevision) {
  hub_.put("/o/r/resolve/v1.0/sub/dir/m.gguf", {.bytes = bytes_, .via_cdn = false});
  auto r = resolve_model("hf://o/r/sub/dir/m.gguf@v1.0", opts_);
  ASSERT_TRUE(r.ok()) << r.message();
  EXPECT_EQ(*r, cached("sub/dir/m.gguf", "v1.0"));
  EXPECT_EQ(test::read_file(*r), bytes_);
  EXPECT_EQ(hub_.n_requests(), 1u);
}

TEST_F(HubDownload, CachedFileIsReusedWithoutRequests) {
  hub_.put("/o/r/resolve/main/m.gguf", {.bytes = bytes_});
  ASSERT_TRUE(resolve_model("hf://o/r/m.gguf", opts_).ok());
  const size_t n = hub_.n_requests();
  progress_.clear();
  auto r = resolve_model("hf://o/r/m.gguf", opts_);
  ASSERT_TRUE(r.ok()) << r.message();
  EXPECT_EQ(test::read_file(*r), bytes_);
  EXPECT_EQ(hub_.n_requests(), n);
  EXPECT_TRUE(progress_.empty());
}

TEST_F(HubDownload, OfflineUsesOnlyTheCache) {
  hub_.put("/o/r/resolve/main/m.gguf", {.bytes = bytes_});
  opts_.offline = true;
  auto r = resolve_model("hf://o/r/m.gguf", opts_);
  ASSERT_FALSE(r.ok());
  EXPECT_TRUE(contains(r.message(), "offline")) << r.message();
  EXPECT_TRUE(contains(r.message(), cached("m.gguf"))) << r.message();
  EXPECT_EQ(hub_.n_requests(), 0u);
  EXPECT_FALSE(fs::exists(opts_.cache_dir));

  opts_.offline = false;
  ASSERT_TRUE(resolve_model("hf://o/r/m.gguf", opts_).ok());
  const size_t n = hub_.n_requests();
  opts_.offline = true;
  r = resolve_model("hf://o/r/m.gguf", opts_);
  ASSERT_TRUE(r.ok()) << r.message();
  EXPECT_EQ(*r, cached("m.gguf"));
  EXPECT_EQ(hub_.n_requests(), n);
}

TEST_F(HubDownload, ResumesAfterDroppedConnection) {
  const size_t half = kFileSize / 2;
  hub_.put("/o/r/resolve/main/m.gguf", {.bytes = bytes_, .drops = 1, .drop_after = half});
  auto r = resolve_model("hf://o/r/m.gguf", opts_);
  ASSERT_FALSE(r.ok());
  const std::string partial = cached("m.gguf") + ".partial";
  EXPECT_TRUE(contains(r.message(), "cannot download 'hf://o/r/m.gguf'")) << r.message();
  EXPECT_TRUE(contains(r.message(), partial + "' and the next attempt resumes")) << r.message();
  EXPECT_FALSE(fs::exists(cached("m.gguf")));
  ASSERT_EQ(fs::file_size(partial), half);
  EXPECT_EQ(test::read_file(partial), bytes_.substr(0, half));

  progress_.clear();
  r = resolve_model("hf://o/r/m.gguf", opts_);
  ASSERT_TRUE(r.ok()) << r.message();
  EXPECT_EQ(test::read_file(*r), bytes_);
  EXPECT_FALSE(fs::exists(partial));
  const auto seen = hub_.seen();
  ASSERT_EQ(seen.size(), 4u);
  EXPECT_EQ(seen[3].server, "cdn");
  EXPECT_EQ(seen[3].range, "bytes=" + std::to_string(half) + "-");
  expect_progress_done(kFileSize);
  EXPECT_EQ(progress_.front().first, half);  // the bar starts where the partial ends
}

TEST_F(HubDownload, RestartsWhenServerIgnoresRange) {
  hub_.put("/o/r/resolve/main/m.gguf", {.bytes = bytes_, .ignore_range = true});
  write_file(cached("m.gguf") + ".partial", std::string(5000, 'x'));
  auto r = resolve_model("hf://o/r/m.gguf", opts_);
  ASSERT_TRUE(r.ok()) << r.message();
  EXPECT_EQ(test::read_file(*r), bytes_);
  EXPECT_EQ(hub_.seen().back().range, "bytes=5000-");
  expect_progress_done(kFileSize);
}

TEST_F(HubDownload, UnknownSizeChunkedDownload) {
  hub_.put("/o/r/resolve/main/m.gguf", {.bytes = bytes_, .via_cdn = false, .ignore_range = true});
  auto r = resolve_model("hf://o/r/m.gguf", opts_);
  ASSERT_TRUE(r.ok()) << r.message();
  EXPECT_EQ(test::read_file(*r), bytes_);
  EXPECT_EQ(progress_.back(), std::make_pair(uint64_t(kFileSize), uint64_t(kFileSize)));
  EXPECT_EQ(progress_.front().second, 0u);  // total unknown while downloading
}

TEST_F(HubDownload, CompletePartialIsFinishedBy416) {
  hub_.put("/o/r/resolve/main/m.gguf", {.bytes = bytes_});
  write_file(cached("m.gguf") + ".partial", bytes_);
  auto r = resolve_model("hf://o/r/m.gguf", opts_);
  ASSERT_TRUE(r.ok()) << r.message();
  EXPECT_EQ(test::read_file(*r), bytes_);
  EXPECT_FALSE(fs::exists(*r + ".partial"));
  EXPECT_EQ(hub_.seen().back().range, "bytes=" + std::to_string(kFileSize) + "-");
}

TEST_F(HubDownload, OverlongPartialRestartsFromZero) {
  hub_.put("/o/r/resolve/main/m.gguf", {.bytes = bytes_});
  write_file(cached("m.gguf") + ".partial", bytes_ + "trailing junk");
  auto r = resolve_model("hf://o/r/m.gguf", opts_);
  ASSERT_TRUE(r.ok()) << r.message();
  EXPECT_EQ(test::read_file(*r), bytes_);
  const auto seen = hub_.seen();
  ASSERT_EQ(seen.size(), 4u);  // hub, cdn 416, hub, cdn from zero
  EXPECT_EQ(seen[3].range, "");
}

TEST_F(HubDownload, NotFoundNamesUrlAndGating) {
  auto r = resolve_model("hf://o/r/missing.gguf", opts_);
  ASSERT_FALSE(r.ok());
  const std::string url = hub_.endpoint() + "/o/r/resolve/main/missing.gguf";
  EXPECT_TRUE(contains(r.message(), "HTTP 404 for " + url)) << r.message();
  EXPECT_TRUE(contains(r.message(), "may not exist")) << r.message();
  EXPECT_TRUE(contains(r.message(), "gated")) << r.message();
  EXPECT_TRUE(contains(r.message(), "(hub: Entry not found)")) << r.message();
  EXPECT_FALSE(fs::exists(cached("missing.gguf")));
  EXPECT_FALSE(fs::exists(cached("missing.gguf") + ".partial"));
}

TEST_F(HubDownload, UnauthorizedMentionsToken) {
  hub_.put("/o/r/resolve/main/m.gguf", {.bytes = bytes_, .token = "hf_secret"});
  auto r = resolve_model("hf://o/r/m.gguf", opts_);
  ASSERT_FALSE(r.ok());
  EXPECT_TRUE(contains(r.message(), "HTTP 401")) << r.message();
  EXPECT_TRUE(contains(r.message(), "HF_TOKEN")) << r.message();
  EXPECT_FALSE(fs::exists(cached("m.gguf") + ".partial"));

  opts_.token = "wrong";
  r = resolve_model("hf://o/r/m.gguf", opts_);
  ASSERT_FALSE(r.ok());
  EXPECT_TRUE(contains(r.message(), "token in HF_TOKEN was rejected")) << r.message();
}

TEST_F(HubDownload, TokenGoesToHubButNotToCdn) {
  hub_.put("/o/r/resolve/main/m.gguf", {.bytes = bytes_, .token = "hf_secret"});
  opts_.token = "hf_secret\n";  // pasted from a file
  auto r = resolve_model("hf://o/r/m.gguf", opts_);
  ASSERT_TRUE(r.ok()) << r.message();
  EXPECT_EQ(test::read_file(*r), bytes_);
  const auto seen = hub_.seen();
  ASSERT_EQ(seen.size(), 2u);
  EXPECT_EQ(seen[0].authorization, "Bearer hf_secret");
  EXPECT_EQ(seen[1].authorization, "");  // another host: curl drops the header
}

TEST_F(HubDownload, ForbiddenMentionsGatingAndToken) {
  hub_.put("/o/r/resolve/main/m.gguf", {.bytes = bytes_, .status = 403});
  auto r = resolve_model("hf://o/r/m.gguf", opts_);
  ASSERT_FALSE(r.ok());
  EXPECT_TRUE(contains(r.message(), "HTTP 403")) << r.message();
  EXPECT_TRUE(contains(r.message(), "gated")) << r.message();
  EXPECT_TRUE(contains(r.message(), "HF_TOKEN is not set")) << r.message();
}

TEST_F(HubDownload, ServerErrorNamesStatus) {
  hub_.put("/o/r/resolve/main/m.gguf", {.bytes = bytes_, .status = 503});
  auto r = resolve_model("hf://o/r/m.gguf", opts_);
  ASSERT_FALSE(r.ok());
  EXPECT_TRUE(contains(r.message(), "HTTP 503 for " + hub_.endpoint())) << r.message();
}

TEST_F(HubDownload, LinkedSizeDisagreesWithContentLength) {
  hub_.put("/o/r/resolve/main/m.gguf", {.bytes = bytes_, .linked_size = kFileSize + 10});
  auto r = resolve_model("hf://o/r/m.gguf", opts_);
  ASSERT_FALSE(r.ok());
  EXPECT_TRUE(contains(r.message(), "size mismatch")) << r.message();
  EXPECT_TRUE(contains(r.message(), std::to_string(kFileSize + 10))) << r.message();
  EXPECT_FALSE(fs::exists(cached("m.gguf")));
}

TEST_F(HubDownload, ContentLengthPromisesMoreThanSent) {
  // Served directly: no X-Linked-Size to contradict the Content-Length before the body starts.
  hub_.put("/o/r/resolve/main/m.gguf",
           {.bytes = bytes_, .via_cdn = false, .announced_extra = 1000});
  auto r = resolve_model("hf://o/r/m.gguf", opts_);
  ASSERT_FALSE(r.ok());
  EXPECT_TRUE(contains(r.message(), "failed: transfer closed with 1000 bytes remaining"))
      << r.message();
  EXPECT_FALSE(fs::exists(cached("m.gguf")));
  EXPECT_EQ(fs::file_size(cached("m.gguf") + ".partial"), kFileSize);  // kept for a resume
}

TEST_F(HubDownload, ShortBodyIsAnError) {
  hub_.put("/o/r/resolve/main/m.gguf",
           {.bytes = bytes_, .linked_size = kFileSize + 100, .ignore_range = true});
  auto r = resolve_model("hf://o/r/m.gguf", opts_);
  ASSERT_FALSE(r.ok());
  EXPECT_TRUE(contains(r.message(), "ended early: got " + std::to_string(kFileSize) + " of " +
                                        std::to_string(kFileSize + 100) + " bytes"))
      << r.message();
  EXPECT_FALSE(fs::exists(cached("m.gguf")));
  EXPECT_EQ(fs::file_size(cached("m.gguf") + ".partial"), kFileSize);
}

TEST_F(HubDownload, OverlongBodyIsAnError) {
  hub_.put("/o/r/resolve/main/m.gguf",
           {.bytes = bytes_, .linked_size = kFileSize - 100, .ignore_range = true});
  auto r = resolve_model("hf://o/r/m.gguf", opts_);
  ASSERT_FALSE(r.ok());
  EXPECT_TRUE(contains(r.message(), "more than the announced " + std::to_string(kFileSize - 100)))
      << r.message();
  EXPECT_FALSE(fs::exists(cached("m.gguf")));
  EXPECT_LE(fs::file_size(cached("m.gguf") + ".partial"), kFileSize - 100);
}

TEST_F(HubDownload, ConnectionRefusedGivesCurlMessage) {
  // A port that was just free: bound, never listened on, closed.
  const int s = ::socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(s, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof addr;
  ASSERT_EQ(::bind(s, reinterpret_cast<sockaddr*>(&addr), len), 0);
  ASSERT_EQ(::getsockname(s, reinterpret_cast<sockaddr*>(&addr), &len), 0);
  ::close(s);
  opts_.endpoint = "http://127.0.0.1:" + std::to_string(ntohs(addr.sin_port));
  auto r = resolve_model("hf://o/r/m.gguf", opts_);
  ASSERT_FALSE(r.ok());
  const std::string url = opts_.endpoint + "/o/r/resolve/main/m.gguf";
  EXPECT_TRUE(contains(r.message(), "download of " + url + " failed: ")) << r.message();
  EXPECT_TRUE(contains(r.message(), "onnect")) << r.message();  // Couldn't connect / Connection
  EXPECT_FALSE(fs::exists(cached("m.gguf") + ".partial"));
}

TEST_F(HubDownload, UnwritableCacheDirectory) {
  write_file(tmp_.path("not-a-dir"), "x");
  opts_.cache_dir = tmp_.path("not-a-dir");
  auto r = resolve_model("hf://o/r/m.gguf", opts_);
  ASSERT_FALSE(r.ok());
  EXPECT_TRUE(contains(r.message(), "cannot create cache directory")) << r.message();
  EXPECT_EQ(hub_.n_requests(), 0u);
}

TEST_F(HubDownload, RefusesWhileAnotherDownloadHoldsTheLock) {
  hub_.put("/o/r/resolve/main/m.gguf", {.bytes = bytes_});
  const std::string partial = cached("m.gguf") + ".partial";
  write_file(partial, "");
  const int fd = ::open(partial.c_str(), O_RDWR);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::flock(fd, LOCK_EX), 0);
  auto r = resolve_model("hf://o/r/m.gguf", opts_);
  ASSERT_FALSE(r.ok());
  EXPECT_TRUE(contains(r.message(), "is being downloaded by another process")) << r.message();
  EXPECT_EQ(hub_.n_requests(), 0u);
  ::close(fd);
  r = resolve_model("hf://o/r/m.gguf", opts_);
  ASSERT_TRUE(r.ok()) << r.message();
  EXPECT_EQ(test::read_file(*r), bytes_);
}

// RLIMIT_FSIZE makes pwrite() fail with EFBIG past the limit (SIGXFSZ ignored meanwhile).
TEST_F(HubDownload, DiskWriteFailureKeepsTheWrittenPrefix) {
  hub_.put("/o/r/resolve/main/m.gguf", {.bytes = bytes_});
  constexpr rlim_t kLimit = 100000;
  rlimit old{};
  ASSERT_EQ(::getrlimit(RLIMIT_FSIZE, &old), 0);
  if (old.rlim_max != RLIM_INFINITY && old.rlim_max < kLimit) GTEST_SKIP() << "hard limit";
  rlimit lim = old;
  lim.rlim_cur = kLimit;
  auto* const old_handler = std::signal(SIGXFSZ, SIG_IGN);
  ASSERT_EQ(::setrlimit(RLIMIT_FSIZE, &lim), 0);
  auto r = resolve_model("hf://o/r/m.gguf", opts_);
  ::setrlimit(RLIMIT_FSIZE, &old);
  std::signal(SIGXFSZ, old_handler);

  ASSERT_FALSE(r.ok());
  const std::string partial = cached("m.gguf") + ".partial";
  EXPECT_TRUE(contains(r.message(), "cannot write '" + partial + "': File too large"))
      << r.message();
  EXPECT_TRUE(contains(r.message(), std::to_string(kLimit) + " bytes are kept")) << r.message();
  EXPECT_EQ(test::read_file(partial), bytes_.substr(0, kLimit));
  r = resolve_model("hf://o/r/m.gguf", opts_);  // resumes once there is room
  ASSERT_TRUE(r.ok()) << r.message();
  EXPECT_EQ(test::read_file(*r), bytes_);
}

// Sets an environment variable (or unsets it, for nullptr) and restores it on destruction.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    set(value);
  }
  ~ScopedEnv() { set(old_ ? old_->c_str() : nullptr); }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  void set(const char* value) {
    if (value) {
      ::setenv(name_, value, 1);
    } else {
      ::unsetenv(name_);
    }
  }
  const char* name_;
  std::optional<std::string> old_;
};

// Endpoint, cache directory and token default to the environment.
TEST_F(HubDownload, DefaultsFromEnvironment) {
  hub_.put("/o/r/resolve/main/m.gguf", {.bytes = bytes_, .token = "hf_env"});
  const std::string env_cache = tmp_.path("env-cache"), xdg = tmp_.path("xdg");
  {
    ScopedEnv endpoint("SLUICE_HF_ENDPOINT", hub_.endpoint().c_str());
    ScopedEnv hf_endpoint("HF_ENDPOINT", "http://127.0.0.1:1");  // SLUICE_HF_ENDPOINT wins
    ScopedEnv cache("SLUICE_CACHE", env_cache.c_str());
    ScopedEnv token("HF_TOKEN", "hf_env");
    auto r = resolve_model("hf://o/r/m.gguf", HubOptions{});
    ASSERT_TRUE(r.ok()) << r.message();
    EXPECT_EQ(*r, env_cache + "/hub/o/r/main/m.gguf");
  }
  {
    ScopedEnv hf_endpoint("HF_ENDPOINT", hub_.endpoint().c_str());
    ScopedEnv xdg_cache("XDG_CACHE_HOME", xdg.c_str());
    ScopedEnv token("HF_TOKEN", "hf_env");
    auto r = resolve_model("hf://o/r/m.gguf", HubOptions{});
    ASSERT_TRUE(r.ok()) << r.message();
    EXPECT_EQ(*r, xdg + "/sluice/hub/o/r/main/m.gguf");
  }
}

}  // namespace
}  // namespace sluice
