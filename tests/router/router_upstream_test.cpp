// router::ResponseParser, the bytes-only half of the backend client (upstream.h): framing on
// whole and piecewise input. fuzz/http_response_fuzz.cpp checks the same on arbitrary bytes.
#include <gtest/gtest.h>

#include <string>
#include <string_view>

#include "router/upstream.h"

namespace sluice::router {
namespace {

using Step = ResponseParser::Step;

// Feeds `bytes` whole and reads the head and the whole body; the last step is returned.
Step read_body(ResponseParser& p, std::string_view bytes, std::string& body) {
  p.feed(bytes);
  auto head = p.take_head();
  EXPECT_TRUE(head && head->ok());
  Step s;
  while ((s = p.take_body(body)) == Step::kData) {
  }
  return s;
}

TEST(ResponseParserTest, ChunkedBodyWithTrailersThenKeptAlive) {
  ResponseParser p;
  std::string body;
  EXPECT_EQ(read_body(p,
                      "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
                      "5;ext=1\r\nhello\r\n6\r\n world\r\n0\r\nX-T: 1\r\n\r\n",
                      body),
            Step::kEnd);
  EXPECT_EQ(body, "hello world");
  EXPECT_TRUE(p.done());
  EXPECT_TRUE(p.keep_alive());
}

TEST(ResponseParserTest, BodyUntilCloseEndsAtTheClose) {
  ResponseParser p;
  std::string body;
  EXPECT_EQ(read_body(p, "HTTP/1.0 200 OK\r\n\r\ndata: x\n\n", body), Step::kNeedMore);
  EXPECT_EQ(body, "data: x\n\n");
  EXPECT_EQ(p.at_close(), Step::kEnd);
  EXPECT_FALSE(p.keep_alive());
}

TEST(ResponseParserTest, ContentLengthCutShortIsAnError) {
  ResponseParser p;
  std::string body;
  EXPECT_EQ(read_body(p, "HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc", body),
            Step::kNeedMore);
  EXPECT_EQ(body, "abc");
  EXPECT_EQ(p.at_close(), Step::kError);
}

TEST(ResponseParserTest, BadStatusLineIsAnErrorValue) {
  ResponseParser p;
  p.feed("HTTP/1.1 9xx Nope\r\n\r\n");
  auto head = p.take_head();
  ASSERT_TRUE(head);
  EXPECT_FALSE(head->ok());
}

// Found by fuzz/http_response_fuzz: the chunk before a malformed chunk terminator was dropped
// when both arrived in one read (kError with the chunk appended, which callers discard) but
// passed on when they arrived apart. Now it always comes first as kData, then the error.
TEST(ResponseParserTest, BytesBeforeBadChunkFramingAreDeliveredThenTheError) {
  ResponseParser p;
  p.feed("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhelloX\r\n6\r\n world\r\n");
  ASSERT_TRUE(p.take_head());
  std::string body;
  EXPECT_EQ(p.take_body(body), Step::kData);
  EXPECT_EQ(body, "hello");
  EXPECT_EQ(p.take_body(body), Step::kError);
  EXPECT_EQ(body, "hello");
  p.feed("0\r\n\r\n");
  EXPECT_EQ(p.take_body(body), Step::kError);  // stays broken
  EXPECT_EQ(p.at_close(), Step::kError);
  EXPECT_FALSE(p.done());
}

// Found while writing fuzz/http_response_fuzz: bytes past a complete response stayed buffered
// and a pooled connection read them as the next request's response head (Connection::reusable
// now refuses such a connection).
TEST(ResponseParserTest, BytesPastTheResponseAreLeftBuffered) {
  ResponseParser p;
  std::string body;
  EXPECT_EQ(
      read_body(p, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nokHTTP/1.1 500 X\r\n\r\n", body),
      Step::kEnd);
  EXPECT_EQ(body, "ok");
  EXPECT_TRUE(p.done() && p.keep_alive());
  EXPECT_EQ(p.buffered(), 18u);
  ResponseParser clean;
  body.clear();
  EXPECT_EQ(read_body(clean, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok", body), Step::kEnd);
  EXPECT_EQ(clean.buffered(), 0u);
}

TEST(ResponseParserTest, BadChunkSizeIsAnError) {
  ResponseParser p;
  std::string body;
  EXPECT_EQ(read_body(p, "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", body),
            Step::kError);
  EXPECT_EQ(body, "");
}

}  // namespace
}  // namespace sluice::router
