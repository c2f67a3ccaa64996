// An incremental, validating JSON scanner: it is pushed one byte at a time and says where a
// JSON value ends, without building the value. The tool-call parser (tool_calls.h) uses it to
// find the end of a call's arguments object in model output that arrives in arbitrary pieces:
// O(1) work per byte whatever the chunking, and the state is the same after "ab" + "c" as after
// "a" + "bc".
//
// Accepts exactly RFC 8259 JSON (what nlohmann::json::parse accepts, bar its UTF-8 check and
// its rejection of numbers beyond double's range):
// strings without raw control characters, valid escapes, numbers without leading zeros,
// true/false/null. Nesting is limited to kMaxDepth so that a hostile model cannot make the
// server build an unbounded stack (or the later parse of the text overflow one).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace sluice {

// JSON's insignificant whitespace (RFC 8259: space, tab, line feed, carriage return).
inline bool is_json_ws(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r';
}

class JsonScanner {
 public:
  static constexpr size_t kMaxDepth = 256;

  enum class Step : uint8_t {
    kMore,        // the byte is part of the value (or leading whitespace); not finished yet
    kDone,        // the byte ended the value (closing quote or bracket, last letter of a literal)
    kDoneBefore,  // the value (a number) ended just before this byte, which is not part of it
    kError,       // the byte cannot continue valid JSON; error() says why
  };

  // Scans the next byte. After kDone, kDoneBefore or kError, reset() before the next value.
  Step push(char c);
  // The end of the input: kDone when the value is complete (a top-level number ends here),
  // kError otherwise.
  Step finish();
  void reset();

  const std::string& error() const { return error_; }
  size_t depth() const { return stack_.size(); }  // open objects and arrays

 private:
  enum class Mode : uint8_t {
    kValue,              // expecting a value (whitespace allowed)
    kFirstValueOrClose,  // just after '[': a value or ']'
    kFirstKeyOrClose,    // just after '{': a key or '}'
    kKey,                // after ',' in an object: a key
    kColon,              // after a key
    kAfterValue,         // inside a container after a value: ',' or the closing bracket
    kString,
    kEscape,   // after '\' in a string
    kUnicode,  // inside \uXXXX
    kNumber,
    kLiteral,  // true / false / null
    kDone,
    kError,
  };
  // Where a number is, in the JSON number grammar -?(0|[1-9][0-9]*)(.[0-9]+)?([eE][+-]?[0-9]+)?
  enum class Num : uint8_t { kSign, kZero, kInt, kDot, kFrac, kExp, kExpSign, kExpDigits };

  Step begin_value(char c);
  Step close(char c);
  Step value_end();
  Step number(char c);
  Step fail(std::string message, char c);

  std::vector<char> stack_;  // '{' or '[' per open container, innermost last
  Mode mode_ = Mode::kValue;
  Num num_ = Num::kSign;
  bool in_key_ = false;       // the string being scanned is an object key
  uint8_t unicode_left_ = 0;  // hex digits still expected in \uXXXX
  const char* literal_ = "";  // the literal being matched ("true", "false", "null")
  uint8_t literal_pos_ = 0;   // bytes of literal_ already matched
  std::string error_;
};

}  // namespace sluice
