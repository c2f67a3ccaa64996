// Resumable HTTP download with libcurl: redirects, Range resume, size checks, error messages.
#include "hub/fetch.h"

#include <curl/curl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <chrono>
#include <cstring>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>

#include "base/log.h"
#include "base/strings.h"

namespace sluice::hub_detail {
namespace {

constexpr long kConnectTimeoutS = 30;
constexpr long kLowSpeedLimit = 1024;  // bytes/s; slower than this for kLowSpeedTimeS aborts
constexpr long kLowSpeedTimeS = 60;
constexpr long kMaxRedirects = 10;
constexpr long kReceiveBufferBytes = 256L * 1024;  // fewer, larger write callbacks
constexpr auto kProgressInterval = std::chrono::milliseconds(100);

using ProgressFn = std::function<void(uint64_t, uint64_t)>;

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() &&
         (s.back() == ' ' || s.back() == '\t' || s.back() == '\r' || s.back() == '\n'))
    s.remove_suffix(1);
  return s;
}

std::optional<uint64_t> parse_u64(std::string_view s) {
  s = trim(s);
  uint64_t v = 0;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (s.empty() || ec != std::errc() || end != s.data() + s.size()) return std::nullopt;
  return v;
}

// Response headers of one HTTP hop. curl reports the headers of every hop of a redirect chain;
// a status line starts a new hop, so after the transfer this holds the final response's.
struct Hop {
  long status = 0;
  std::optional<uint64_t> content_length;
  std::optional<uint64_t> range_first;  // Content-Range: bytes FIRST-LAST/TOTAL
  std::optional<uint64_t> range_total;  //            or: bytes */TOTAL (with 416)
  std::string hub_error;                // X-Error-Message: the hub's reason for a 4xx
};

// `bytes 100-199/1000` or `bytes */1000`; a total of `*` (unknown) leaves range_total empty.
void parse_content_range(std::string_view v, Hop& hop) {
  v = trim(v);
  if (!v.starts_with("bytes")) return;
  v = trim(v.substr(5));
  const size_t slash = v.find('/');
  if (slash == std::string_view::npos) return;
  hop.range_total = parse_u64(v.substr(slash + 1));
  std::string_view range = v.substr(0, slash);
  if (const size_t dash = range.find('-'); dash != std::string_view::npos) {
    hop.range_first = parse_u64(range.substr(0, dash));
  }
}

// State shared with curl's callbacks during one request.
struct Transfer {
  int fd = -1;
  const std::string* partial_path = nullptr;
  const ProgressFn* progress = nullptr;
  uint64_t size = 0;                    // bytes in the partial file
  Hop hop;                              // headers of the current (finally: last) hop
  std::optional<uint64_t> linked_size;  // X-Linked-Size from any hop (the hub's redirect)
  bool body_started = false;            // start_body() ran
  bool writing = false;                 // the final response's body goes into the file
  uint64_t expected = 0;                // announced full size of the file; 0 = unknown
  std::string error;                    // why a callback aborted the transfer
  std::chrono::steady_clock::time_point last_progress;
};

// In-flight progress, throttled. Never reports done == total: that call is made once, after
// the size check (a progress bar ends its line on it).
void report_progress(Transfer& t, bool force) {
  if (t.progress == nullptr || !*t.progress) return;
  if (t.expected != 0 && t.size >= t.expected) return;
  const auto now = std::chrono::steady_clock::now();
  if (!force && now - t.last_progress < kProgressInterval) return;
  t.last_progress = now;
  (*t.progress)(t.size, t.expected);
}

void report_done(const FetchParams& p, uint64_t size) {
  if (p.progress != nullptr && *p.progress) (*p.progress)(size, size);
}

size_t on_header(char* data, size_t size, size_t n, void* user) {
  auto& t = *static_cast<Transfer*>(user);
  const std::string_view line = trim(std::string_view(data, size * n));
  if (line.starts_with("HTTP/")) {  // "HTTP/1.1 206 Partial Content", "HTTP/2 200"
    t.hop = Hop{};
    if (const size_t sp = line.find(' '); sp != std::string_view::npos) {
      t.hop.status = long(parse_u64(line.substr(sp + 1, 3)).value_or(0));
    }
    return size * n;
  }
  const size_t colon = line.find(':');
  if (colon == std::string_view::npos) return size * n;
  const std::string_view name = trim(line.substr(0, colon));
  const std::string_view value = trim(line.substr(colon + 1));
  if (iequals_ascii(name, "content-length")) {
    t.hop.content_length = parse_u64(value);
  } else if (iequals_ascii(name, "content-range")) {
    parse_content_range(value, t.hop);
  } else if (iequals_ascii(name, "x-linked-size")) {
    t.linked_size = parse_u64(value);
  } else if (iequals_ascii(name, "x-error-message")) {
    t.hop.hub_error = std::string(value);
  }
  return size * n;
}

// Decides, once the final response's headers are in, whether and where its body is written,
// and the full size to expect. False (with t.error) aborts the transfer.
bool start_body(Transfer& t) {
  t.body_started = true;
  const Hop& h = t.hop;
  if (h.status == 200) {
    if (t.size > 0) {  // the server ignored `Range` and sends the whole file: start over
      SLUICE_LOG(kInfo, "server ignored the range request; restarting the download from zero");
      if (::ftruncate(t.fd, 0) != 0) {
        t.error = "cannot truncate '" + *t.partial_path + "': " + std::strerror(errno);
        return false;
      }
      t.size = 0;
    }
    t.expected = h.content_length.value_or(0);
  } else if (h.status == 206) {
    if (!h.range_first || *h.range_first != t.size) {
      t.error = "the server answered a request for bytes " + std::to_string(t.size) +
                "- with a range starting at " +
                (h.range_first ? std::to_string(*h.range_first) : std::string("(none)"));
      return false;
    }
    if (h.range_total) {
      t.expected = *h.range_total;
    } else if (h.content_length) {
      t.expected = t.size + *h.content_length;
    }
  } else {
    return true;  // an error response: its body is dropped and the status decides
  }
  if (t.linked_size) {
    if (t.expected != 0 && t.expected != *t.linked_size) {
      t.error = "size mismatch: the hub announced " + std::to_string(*t.linked_size) +
                " bytes (X-Linked-Size) but the server sends a file of " +
                std::to_string(t.expected) + " bytes";
      return false;
    }
    t.expected = *t.linked_size;
  }
  t.writing = true;
  report_progress(t, /*force=*/true);
  return true;
}

// pwrite()s all of `data` at `size`, advancing `size` by what reached the file (also on error,
// so the resume offset matches the file).
bool write_all(int fd, const char* data, size_t len, uint64_t& size) {
  while (len > 0) {
    const ssize_t w = ::pwrite(fd, data, len, off_t(size));
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) {
      if (w == 0) errno = EIO;
      return false;
    }
    data += w;
    len -= size_t(w);
    size += uint64_t(w);
  }
  return true;
}

size_t on_body(char* data, size_t size, size_t n, void* user) {
  auto& t = *static_cast<Transfer*>(user);
  const size_t len = size * n;
  if (!t.body_started && !start_body(t)) return CURL_WRITEFUNC_ERROR;
  if (!t.writing) return len;
  if (t.expected != 0 && t.size + len > t.expected) {
    // Nothing of this chunk is written: the file stays a resumable prefix.
    t.error = "the server sent more than the announced " + std::to_string(t.expected) + " bytes";
    return CURL_WRITEFUNC_ERROR;
  }
  if (!write_all(t.fd, data, len, t.size)) {
    t.error = "cannot write '" + *t.partial_path + "': " + std::strerror(errno);
    return CURL_WRITEFUNC_ERROR;
  }
  report_progress(t, /*force=*/false);
  return len;
}

struct CurlDeleter {
  void operator()(CURL* h) const { curl_easy_cleanup(h); }
  void operator()(curl_slist* l) const { curl_slist_free_all(l); }
};

// One GET of p.url into t (resuming at t.size when > 0). Errors: the transport's (curl's
// message) or a callback's; HTTP statuses are left in t.hop for the caller.
Status perform(const FetchParams& p, Transfer& t) {
  std::unique_ptr<CURL, CurlDeleter> h(curl_easy_init());
  if (!h) return make_error("cannot initialise libcurl");
  std::unique_ptr<curl_slist, CurlDeleter> headers;
  if (!p.token.empty()) {
    const std::string auth = "Authorization: Bearer " + p.token;
    headers.reset(curl_slist_append(nullptr, auth.c_str()));
  }
  const std::string range = std::to_string(t.size) + "-";
  char errbuf[CURL_ERROR_SIZE] = {};
  CURL* c = h.get();
  curl_easy_setopt(c, CURLOPT_URL, p.url.c_str());
  curl_easy_setopt(c, CURLOPT_ERRORBUFFER, errbuf);
  curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);  // threads: no SIGALRM-based DNS timeouts
  curl_easy_setopt(c, CURLOPT_FOLLOWLOCATION, 1L);
  curl_easy_setopt(c, CURLOPT_MAXREDIRS, kMaxRedirects);
#if LIBCURL_VERSION_NUM >= 0x075500
  curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, "http,https");
  curl_easy_setopt(c, CURLOPT_REDIR_PROTOCOLS_STR, "http,https");
#endif
  curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT, kConnectTimeoutS);
  curl_easy_setopt(c, CURLOPT_LOW_SPEED_LIMIT, kLowSpeedLimit);
  curl_easy_setopt(c, CURLOPT_LOW_SPEED_TIME, kLowSpeedTimeS);
  curl_easy_setopt(c, CURLOPT_BUFFERSIZE, kReceiveBufferBytes);
  curl_easy_setopt(c, CURLOPT_USERAGENT, "sluice/0.1");
  if (headers) curl_easy_setopt(c, CURLOPT_HTTPHEADER, headers.get());
  if (t.size > 0) curl_easy_setopt(c, CURLOPT_RANGE, range.c_str());
  curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, on_header);
  curl_easy_setopt(c, CURLOPT_HEADERDATA, &t);
  curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_body);
  curl_easy_setopt(c, CURLOPT_WRITEDATA, &t);

  const CURLcode rc = curl_easy_perform(c);
  if (!t.error.empty()) return make_error("download of ", p.url, " failed: ", t.error);
  if (rc != CURLE_OK) {
    return make_error("download of ", p.url,
                      " failed: ", errbuf[0] != '\0' ? errbuf : curl_easy_strerror(rc));
  }
  if (!t.body_started && !start_body(t)) {  // a response without a body
    return make_error("download of ", p.url, " failed: ", t.error);
  }
  return {};
}

Status http_error(const FetchParams& p, const Hop& hop) {
  const std::string hub = hop.hub_error.empty() ? "" : " (hub: " + hop.hub_error + ")";
  const std::string head = "HTTP " + std::to_string(hop.status) + " for " + p.url + hub;
  const char* no_token = p.token.empty() ? " (no token was sent: HF_TOKEN is not set)" : "";
  switch (hop.status) {
    case 404:
      return make_error(head,
                        ": the repository, revision or file may not exist (check the spelling), "
                        "or the repository may be gated or private (then set HF_TOKEN)");
    case 401:
      if (!p.token.empty()) return make_error(head, ": the token in HF_TOKEN was rejected");
      return make_error(head,
                        ": the repository is gated or private (or does not exist); set HF_TOKEN "
                        "to an access token of an account that can read it");
    case 403:
      return make_error(head,
                        ": access denied; for a gated repository accept its terms on the hub "
                        "page, and set HF_TOKEN to a token of an account with access",
                        no_token);
    default:
      return make_error(head);
  }
}

std::string resume_hint(const FetchParams& p, uint64_t size) {
  if (size == 0) return "";
  return "; " + std::to_string(size) + " bytes are kept in '" + p.partial_path +
         "' and the next attempt resumes from there";
}

}  // namespace

void init_curl_once() {
  static std::once_flag once;
  std::call_once(once, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
}

Status fetch_to_partial(const FetchParams& p) {
  init_curl_once();
  struct stat st = {};
  if (::fstat(p.fd, &st) != 0) {
    return make_error("cannot stat '", p.partial_path, "': ", std::strerror(errno));
  }
  uint64_t size = uint64_t(st.st_size);
  // A second round only after a 416 that shows the partial file is not a prefix of this file.
  for (int round = 0; round < 2; ++round) {
    if (size > 0) {
      SLUICE_LOG(kInfo, "resuming " + p.url + " at byte " + std::to_string(size));
    }
    Transfer t;
    t.fd = p.fd;
    t.partial_path = &p.partial_path;
    t.progress = p.progress;
    t.size = size;
    const Status s = perform(p, t);
    if (!s.ok()) return make_error(s.message(), resume_hint(p, t.size));

    const long status = t.hop.status;
    if (status == 200 || status == 206) {
      if (t.expected != 0 && t.size != t.expected) {
        return make_error("download of ", p.url, " ended early: got ", t.size, " of ", t.expected,
                          " bytes", resume_hint(p, t.size));
      }
      report_done(p, t.size);
      return {};
    }
    if (status == 416 && size > 0) {  // nothing left after byte `size`: complete, or a mismatch
      const std::optional<uint64_t> total = t.hop.range_total ? t.hop.range_total : t.linked_size;
      if (!total || *total == size) {
        report_done(p, size);
        return {};
      }
      SLUICE_LOG(kWarn, "'" + p.partial_path + "' has " + std::to_string(size) +
                            " bytes but the file on the server has " + std::to_string(*total) +
                            "; restarting the download from zero");
      if (::ftruncate(p.fd, 0) != 0) {
        return make_error("cannot truncate '", p.partial_path, "': ", std::strerror(errno));
      }
      size = 0;
      continue;
    }
    return http_error(p, t.hop);
  }
  return make_error("download of ", p.url, " failed: the server rejected the resume request twice");
}

}  // namespace sluice::hub_detail
