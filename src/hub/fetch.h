// Internal to hub/: one resumable HTTP download into an already opened and locked `.partial`
// file. hub.cpp owns naming, locking and the final rename; this file owns the HTTP protocol.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "base/status.h"

namespace sluice::hub_detail {

struct FetchParams {
  std::string url;
  std::string token;         // empty: no Authorization header
  int fd = -1;               // the `.partial`, read-write, locked by the caller
  std::string partial_path;  // for messages only
  const std::function<void(uint64_t done, uint64_t total)>* progress = nullptr;  // may be null
};

// Brings the partial file to the server's full size: resumes at its current size with
// `Range: bytes=N-`, restarts from zero when the server ignores the range (200) or reports a
// different total (416), and treats a 416 whose total equals N as already complete.
// Ok only when the file holds exactly the size the server announced (or, when no response
// announced one, the transfer itself ended cleanly). On error the bytes received so far stay
// in the file (never more than the announced size), so a later call can resume.
Status fetch_to_partial(const FetchParams& params);

// curl_global_init, once per process, thread-safe.
void init_curl_once();

}  // namespace sluice::hub_detail
