// libFuzzer target: the router's HTTP/1.1 response framing (router::ResponseParser, the bytes-only
// half of router::Connection) over arbitrary backend bytes. The first byte picks the size of the
// pieces the bytes arrive in; the rest is fed as Connection feeds recv() results: heads (interim
// 1xx ones skipped, as read_head does), then body pieces until the end, an error or the close.
// Up to four responses are read in a row (a kept-alive connection). Checks: no crash, hang or
// exception; errors are values; the body bytes reported never exceed the input; and the pieces'
// size does not change what is read (the same heads, bodies and outcomes as one whole feed).
//
//   scripts/fuzz 60 http_response_fuzz
// Seeds: fuzz/seeds/http_response_fuzz (Content-Length, chunked with trailers, SSE until close).
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "router/upstream.h"

namespace {

using sluice::router::ResponseParser;
using Step = ResponseParser::Step;

struct Response {
  std::string head;  // "error: ..." or the status and headers, flattened
  std::string body;
  int outcome = 0;  // 0: end, 1: body error, 2: cut short at the close, 3: head error
  bool operator==(const Response&) const = default;
};

std::vector<Response> read(std::string_view bytes, size_t piece) {
  ResponseParser parser;
  size_t fed = 0;
  // Feeds the next piece; false at the close.
  auto more = [&]() {
    if (fed >= bytes.size()) return false;
    const size_t n = std::min(piece, bytes.size() - fed);
    parser.feed(bytes.substr(fed, n));
    fed += n;
    return true;
  };
  std::vector<Response> out;
  for (int i = 0; i < 4; ++i) {
    parser.expect_head();
    Response r;
    // Connection::read_head: interim heads are skipped.
    bool have_head = false;
    while (!have_head) {
      auto head = parser.take_head();
      if (!head) {
        if (parser.head_too_large() || !more()) return out;  // both: not compared (see below)
        continue;
      }
      if (!head->ok()) {
        r.head = "error: " + head->message();
        r.outcome = 3;
        out.push_back(std::move(r));
        return out;
      }
      if ((*head)->status < 100 || (*head)->status > 599) std::abort();
      if ((*head)->status < 200) continue;
      r.head = std::to_string((*head)->status);
      for (const auto& [k, v] : (*head)->headers) r.head += "\n" + k + ": " + v;
      have_head = true;
    }
    while (true) {
      const size_t before = r.body.size();
      const Step s = parser.take_body(r.body);
      if ((s == Step::kData) != (r.body.size() > before)) std::abort();
      if (s == Step::kData) continue;
      if (s == Step::kEnd) {
        if (!parser.done()) std::abort();
        break;
      }
      if (s == Step::kError) {
        r.outcome = 1;
        break;
      }
      if (!more()) {
        const Step c = parser.at_close();
        if (c != Step::kEnd && c != Step::kError) std::abort();
        r.outcome = c == Step::kEnd ? 0 : 2;
        out.push_back(std::move(r));
        return out;
      }
    }
    const bool ok = r.outcome == 0;
    out.push_back(std::move(r));
    if (!ok || !parser.keep_alive()) break;
  }
  return out;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // Bounded memory: the parser buffers at most the input (plus a head of 64 KiB).
  if (size == 0 || size > (size_t(256) << 10)) return 0;
  const size_t piece = 1 + data[0] % 17;
  const std::string_view bytes(reinterpret_cast<const char*>(data + 1), size - 1);
  const std::vector<Response> whole = read(bytes, bytes.size() + 1);
  size_t body_bytes = 0;
  for (const Response& r : whole) body_bytes += r.body.size();
  if (body_bytes > bytes.size()) std::abort();
  // A head larger than kMaxHeadBytes is refused only when it arrives in pieces (a whole feed has
  // its end buffered at once), so only inputs shorter than that are compared.
  if (bytes.size() <= ResponseParser::kMaxHeadBytes && read(bytes, piece) != whole) std::abort();
  return 0;
}
