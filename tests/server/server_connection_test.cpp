// Every response leaves its connection in a well-defined state: a refusal that did not read the
// request's body closes the connection ("Connection: close", then EOF), since the rest of the
// socket is that body; every other answer keeps it alive, and the next request on it (sent in
// the same write: pipelined) gets its own right answer. Before, a 404 for an unknown route with
// a body left the body on the socket, and the next request was answered 400 "malformed".
#include <string>
#include <vector>

#include "server_test_util.h"

namespace sluice::test {
namespace {

struct RawResponse {
  int status = 0;
  std::string headers;
  std::string body;
};

// Reads whole responses (Content-Length bodies) until `n` arrived, the peer closed, or 5 s.
std::vector<RawResponse> read_responses(int fd, size_t n, bool* closed) {
  std::vector<RawResponse> out;
  std::string buf;
  *closed = false;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (out.size() < n) {
    const size_t end = buf.find("\r\n\r\n");
    if (end != std::string::npos) {
      RawResponse r;
      r.headers = buf.substr(0, end);
      r.status = std::atoi(r.headers.c_str() + 9);
      size_t len = 0;
      const size_t cl = r.headers.find("Content-Length: ");
      if (cl != std::string::npos) len = std::strtoul(r.headers.c_str() + cl + 16, nullptr, 10);
      if (buf.size() >= end + 4 + len) {
        r.body = buf.substr(end + 4, len);
        buf.erase(0, end + 4 + len);
        out.push_back(std::move(r));
        continue;
      }
    }
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) break;
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, int(left.count())) <= 0) break;
    char tmp[4096];
    const ssize_t got = ::recv(fd, tmp, sizeof tmp, 0);
    if (got <= 0) {
      *closed = true;
      break;
    }
    buf.append(tmp, size_t(got));
  }
  if (!*closed && out.size() == n) {
    // A closing server has nothing more to say: EOF follows at once.
    pollfd p{fd, POLLIN, 0};
    char tmp[1];
    if (::poll(&p, 1, 200) > 0 && ::recv(fd, tmp, 1, MSG_PEEK) == 0) *closed = true;
  }
  return out;
}

struct Case {
  std::string name;
  std::string request;
  int status;
  bool closes;  // the server refused before reading a body
};

void check_cases(int port, const std::vector<Case>& cases) {
  const std::string next = "GET /health HTTP/1.1\r\nHost: x\r\n\r\n";
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    const int fd = connect_local(port);
    ASSERT_GE(fd, 0);
    ASSERT_TRUE(send_all(fd, c.request + next));  // pipelined: both in one write
    bool closed = false;
    std::vector<RawResponse> got = read_responses(fd, 2, &closed);
    ::close(fd);
    ASSERT_GE(got.size(), 1u);
    EXPECT_EQ(got[0].status, c.status) << got[0].headers << "\n" << got[0].body;
    const bool says_close = got[0].headers.find("Connection: close") != std::string::npos;
    if (c.closes) {
      EXPECT_TRUE(says_close) << got[0].headers;
      EXPECT_EQ(got.size(), 1u) << "a second answer after Connection: close";
      EXPECT_TRUE(closed);
    } else {
      EXPECT_FALSE(says_close) << got[0].headers;
      ASSERT_EQ(got.size(), 2u) << "no answer to the pipelined request";
      EXPECT_EQ(got[1].status, 200) << got[1].body;
      EXPECT_NE(got[1].body.find("ok"), std::string::npos) << got[1].body;
    }
  }
}

TEST(ServerConnections, EveryErrorLeavesTheConnectionWellDefined) {
  SLUICE_REQUIRE_SERVER(s, make_config([](auto& c) {
                          c.chat_template = kPlainTemplate;
                          c.api_key = "k";
                        }));
  const std::string key = "Authorization: Bearer k\r\n";
  const std::string body = R"({"prompt": "Once", "max_tokens": 1})";
  check_cases(
      s->port,
      {
          {"404 unknown route with a body", http_request("POST", "/nope", body), 404, true},
          {"404 unknown route without one", "GET /nope HTTP/1.1\r\nHost: x\r\n\r\n", 404, false},
          {"405 with a body", http_request("PUT", "/v1/completions", body, key), 405, true},
          {"405 without one", "DELETE /v1/models HTTP/1.1\r\nHost: x\r\n" + key + "\r\n", 405,
           false},
          {"401 with a body", http_request("POST", "/v1/completions", body), 401, true},
          {"401 Anthropic route", http_request("POST", "/v1/messages", body), 401, true},
          {"401 without one", "GET /v1/models HTTP/1.1\r\nHost: x\r\n\r\n", 401, false},
          {"413",
           "POST /v1/completions HTTP/1.1\r\nHost: x\r\n" + key +
               "Content-Length: 99999999\r\n\r\n{\"prompt\": ",
           413, true},
          {"400 bad JSON", http_request("POST", "/v1/completions", "{nope", key), 400, false},
          {"400 bad field",
           http_request("POST", "/v1/completions", R"({"prompt": "x", "n": 0})", key), 400, false},
          {"404 unknown model",
           http_request("POST", "/v1/completions", R"({"prompt": "x", "model": "m"})", key), 404,
           false},
          {"400 Messages without max_tokens",
           http_request("POST", "/v1/messages",
                        R"({"messages": [{"role": "user", "content": "x"}]})", key),
           400, false},
          {"404 stored response", "GET /v1/responses/resp_x HTTP/1.1\r\nHost: x\r\n" + key + "\r\n",
           404, false},
          {"200", http_request("POST", "/v1/completions", body, key), 200, false},
      });
}

TEST(ServerConnections, ChunkedBodiesOfRefusedRequestsCloseToo) {
  SLUICE_REQUIRE_SERVER(s);
  check_cases(s->port, {{"404 chunked",
                         "POST /nope HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
                         "5\r\nhello\r\n0\r\n\r\n",
                         404, true}});
}

}  // namespace
}  // namespace sluice::test
