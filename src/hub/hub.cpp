// resolve_model: defaults from the environment, the cache lookup, the `.partial` lock and the
// final rename. The HTTP side is fetch.cpp, spec parsing spec.cpp.
#include "hub/hub.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>

#include "base/log.h"
#include "hub/fetch.h"

namespace sluice {
namespace {

namespace fs = std::filesystem;

constexpr const char* kDefaultEndpoint = "https://huggingface.co";

std::string env(const char* name) {
  const char* v = std::getenv(name);
  return v != nullptr ? std::string(v) : std::string();
}

Result<std::string> endpoint_or_default(const HubOptions& o) {
  std::string e = o.endpoint;
  if (e.empty()) e = env("SLUICE_HF_ENDPOINT");
  if (e.empty()) e = env("HF_ENDPOINT");
  if (e.empty()) e = kDefaultEndpoint;
  if (!e.starts_with("http://") && !e.starts_with("https://")) {
    return make_error("invalid hub endpoint '", e, "': it must start with http:// or https://");
  }
  return e;
}

Result<std::string> cache_dir_or_default(const HubOptions& o) {
  if (!o.cache_dir.empty()) return o.cache_dir;
  if (std::string v = env("SLUICE_CACHE"); !v.empty()) return v;
  // The XDG spec says to ignore relative values.
  if (std::string v = env("XDG_CACHE_HOME"); !v.empty() && v.front() == '/') return v + "/sluice";
  if (std::string v = env("HOME"); !v.empty()) return v + "/.cache/sluice";
  return make_error("no cache directory for downloads: set SLUICE_CACHE (or HOME)");
}

// Tokens pasted from a file often carry a trailing newline, which would break the header.
std::string token_or_default(const HubOptions& o) {
  std::string t = o.token.empty() ? env("HF_TOKEN") : o.token;
  while (!t.empty() && (t.back() == '\n' || t.back() == '\r' || t.back() == ' ')) t.pop_back();
  while (!t.empty() && t.front() == ' ') t.erase(0, 1);
  return t;
}

// An owned file descriptor (closing it also releases its flock).
class UniqueFd {
 public:
  UniqueFd() = default;
  explicit UniqueFd(int fd) : fd_(fd) {}
  UniqueFd(UniqueFd&& o) noexcept : fd_(o.fd_) { o.fd_ = -1; }
  UniqueFd& operator=(UniqueFd&& o) noexcept {
    if (this != &o) {
      reset();
      fd_ = o.fd_;
      o.fd_ = -1;
    }
    return *this;
  }
  UniqueFd(const UniqueFd&) = delete;
  UniqueFd& operator=(const UniqueFd&) = delete;
  ~UniqueFd() { reset(); }

  int get() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  void reset() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }

 private:
  int fd_ = -1;
};

bool is_regular_file(const std::string& path) {
  struct stat st = {};
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

bool same_file(const struct stat& a, const struct stat& b) {
  return a.st_dev == b.st_dev && a.st_ino == b.st_ino;
}

// Opens `partial` and takes its exclusive lock (flock; released when the fd closes). Fails
// at once, rather than waiting, when another process or thread holds it. An invalid fd
// means another downloader completed the file meanwhile (it is at `final_path`).
Result<UniqueFd> lock_partial(const std::string& final_path, const std::string& partial) {
  for (int attempt = 0; attempt < 3; ++attempt) {
    UniqueFd fd(::open(partial.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644));
    if (!fd.valid()) return make_error("cannot create '", partial, "': ", std::strerror(errno));
    if (::flock(fd.get(), LOCK_EX | LOCK_NB) != 0) {
      if (errno == EWOULDBLOCK) {
        return make_error("'", final_path, "' is being downloaded by another process (it holds ",
                          "the lock on '", partial, "'); wait for it to finish and try again");
      }
      return make_error("cannot lock '", partial, "': ", std::strerror(errno));
    }
    // A downloader that held the lock until just now may have renamed the file we opened to
    // its final name.
    struct stat mine = {};
    struct stat now = {};
    if (::fstat(fd.get(), &mine) != 0) {
      return make_error("cannot stat '", partial, "': ", std::strerror(errno));
    }
    if (::stat(partial.c_str(), &now) == 0 && same_file(mine, now)) {
      if (is_regular_file(final_path)) {  // completed just before we created a fresh partial
        if (mine.st_size == 0) ::unlink(partial.c_str());
        return UniqueFd();
      }
      return fd;
    }
    if (is_regular_file(final_path)) return UniqueFd();
  }
  return make_error("cannot lock '", partial, "': another process keeps replacing it");
}

Result<std::string> resolve_local(const std::string& path) {
  if (path.empty()) {
    return make_error("no model given: expected a .gguf path or hf://OWNER/REPO/FILE.gguf");
  }
  std::error_code ec;
  const fs::file_status st = fs::status(path, ec);
  if (!fs::exists(st)) {
    const char* hint = path.starts_with("hf:") || path.starts_with("huggingface.co/")
                           ? " (models on the hub are written hf://OWNER/REPO/FILE.gguf)"
                           : "";
    return make_error("model file '", path, "' does not exist", hint);
  }
  if (fs::is_directory(st)) {
    return make_error("model path '", path, "' is a directory, not a .gguf file");
  }
  return path;
}

}  // namespace

Result<std::string> resolve_model(const std::string& spec, const HubOptions& opts) {
  if (!is_hub_spec(spec)) return resolve_local(spec);
  SLUICE_ASSIGN_OR_RETURN(HubSpec hub, parse_hub_spec(spec));
  SLUICE_ASSIGN_OR_RETURN(std::string cache_dir, cache_dir_or_default(opts));
  const std::string path = hub_cache_path(cache_dir, hub);
  const std::string partial = path + ".partial";

  // A complete file is trusted as is: only complete files ever get this name.
  struct stat st = {};
  if (::stat(path.c_str(), &st) == 0) {
    if (S_ISREG(st.st_mode)) return path;
    return make_error("cache entry '", path, "' for '", spec, "' is not a regular file");
  }
  if (opts.offline) {
    std::string partial_note;
    if (::stat(partial.c_str(), &st) == 0) {
      partial_note = " (a partial download of " + std::to_string(st.st_size) + " bytes exists)";
    }
    return make_error("'", spec, "' is not in the cache at '", path, "'", partial_note,
                      " and offline mode is on; run once online to download it");
  }

  SLUICE_ASSIGN_OR_RETURN(std::string endpoint, endpoint_or_default(opts));
  const std::string url = hub_file_url(endpoint, hub);
  std::error_code ec;
  fs::create_directories(fs::path(path).parent_path(), ec);
  if (ec) {
    return make_error("cannot download '", spec, "': cannot create cache directory '",
                      fs::path(path).parent_path().string(), "': ", ec.message());
  }
  SLUICE_ASSIGN_OR_RETURN(UniqueFd fd, lock_partial(path, partial));
  if (!fd.valid()) return path;

  SLUICE_LOG(kInfo, "downloading " + url + " to " + path);
  hub_detail::FetchParams fetch;
  fetch.url = url;
  fetch.token = token_or_default(opts);
  fetch.fd = fd.get();
  fetch.partial_path = partial;
  fetch.progress = &opts.progress;
  if (Status s = hub_detail::fetch_to_partial(fetch); !s.ok()) {
    // Keep what arrived for the next attempt, but leave no empty files behind (404, 401...).
    if (::fstat(fd.get(), &st) == 0 && st.st_size == 0) ::unlink(partial.c_str());
    return make_error("cannot download '", spec, "': ", s.message());
  }
  // Durable before visible: a crash must not leave a final name on unwritten blocks.
  if (::fsync(fd.get()) != 0) {
    return make_error("cannot download '", spec, "': cannot write '", partial,
                      "': ", std::strerror(errno));
  }
  if (::rename(partial.c_str(), path.c_str()) != 0) {
    return make_error("cannot download '", spec, "': cannot rename '", partial, "' to '", path,
                      "': ", std::strerror(errno));
  }
  return path;
}

}  // namespace sluice
