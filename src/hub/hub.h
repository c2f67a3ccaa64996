// Model files from the Hugging Face hub: `hf://OWNER/REPO/FILE.gguf[@REVISION]` is downloaded
// (resumably, size-checked) into a local cache and its path returned; a plain path is checked
// and returned unchanged.
//
// Cache layout (one directory per revision *name*, so `main` is a snapshot taken at first use):
//
//   {cache_dir}/hub/{owner}/{repo}/{revision}/{file}            complete file, never rewritten
//   {cache_dir}/hub/{owner}/{repo}/{revision}/{file}.partial    download in progress; locked
//                                                               (flock) while a process writes it
//
// Contracts:
//  * A complete cached file is returned without any network access, online or offline: no HEAD
//    check, so a moved `main` is not noticed. Pin a commit hash (`@<sha>`) for reproducibility,
//    or delete the file to refresh. Offline mode never touches the network.
//  * Only a file whose size matches the server's (Content-Length / Content-Range total / the
//    hub's X-Linked-Size) is renamed to its final name. On any failure the `.partial` is kept,
//    and the next call resumes it with `Range: bytes=N-`.
//  * No automatic retries: a dropped connection returns an error; call again to resume.
//  * Timeouts: 30 s to connect; abort when slower than 1 KiB/s for 60 s; no total limit.
//  * Thread-safe. A second concurrent download of the same file (thread or process) fails at
//    once ("being downloaded by another process") instead of waiting.
//  * No content hash check: a file whose size matches is accepted.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>

#include "base/status.h"

namespace sluice {

struct HubOptions {
  std::string endpoint;   // default: $SLUICE_HF_ENDPOINT or $HF_ENDPOINT or https://huggingface.co
  std::string cache_dir;  // default: $SLUICE_CACHE or $XDG_CACHE_HOME/sluice or ~/.cache/sluice
  std::string token;      // default: $HF_TOKEN; sent as `Authorization: Bearer` (curl drops it
                          // on a redirect to another host, e.g. the hub's CDN)
  bool offline = false;   // cache only; never touches the network
  // Called from the downloading thread as bytes arrive (at most ~10 times a second), then once
  // with done == total when the file is complete. total is 0 while the size is unknown. Not
  // called for a cache hit.
  std::function<void(uint64_t done, uint64_t total)> progress;
};

// A validated `hf://OWNER/REPO/FILE[@REVISION]`: no empty, "." or ".." segments, so the cache
// path cannot escape the cache directory. FILE may contain '/' (subdirectories of the repo).
struct HubSpec {
  std::string owner;
  std::string repo;
  std::string file;      // "sub/dir/model.gguf"
  std::string revision;  // "main" unless given
};

// True when `spec` starts with "hf://" (it may still be invalid; see parse_hub_spec).
bool is_hub_spec(std::string_view spec);

Result<HubSpec> parse_hub_spec(std::string_view spec);

// `{endpoint}/{owner}/{repo}/resolve/{revision}/{file}`, each segment percent-encoded.
std::string hub_file_url(std::string_view endpoint, const HubSpec& spec);

// `{cache_dir}/hub/{owner}/{repo}/{revision}/{file}`.
std::string hub_cache_path(std::string_view cache_dir, const HubSpec& spec);

// A local path for `spec`: hub specs are downloaded into the cache (or found there); anything
// else is a filesystem path, returned unchanged when it names an existing file.
Result<std::string> resolve_model(const std::string& spec, const HubOptions& opts);

}  // namespace sluice
