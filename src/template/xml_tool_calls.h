// Tool calls in Qwen's XML form (ToolCallFormat::kQwenXml: Qwen3-Coder, Qwen3.5 / 3.6):
//
//   <tool_call>
//   <function=get_weather>
//   <parameter=city>
//   Paris
//   </parameter>
//   <parameter=days>
//   3
//   </parameter>
//   </function>
//   </tool_call>
//
// Values are written raw: a string parameter's text is the string, any other parameter's text is
// JSON (the template writes `tojson` for objects and lists). Which is which comes from the tools'
// schemas (ToolParamTypes); for a tool or parameter they do not know, a value that parses as JSON
// is JSON and anything else a string. The parser streams OpenAI-style arguments: a string value
// streams as it is written, another value when its </parameter> arrives.
//
// Used through ToolCallParser (tool_calls.h), with the same events and guarantees: byte at a
// time, so the events do not depend on how the text is split; whitespace between calls is
// dropped; a broken call is kInvalidCall and what follows is content.
#pragma once

#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include "template/tool_calls.h"

namespace sluice {

class XmlToolCallParser {
 public:
  XmlToolCallParser(uint64_t id_seed, std::shared_ptr<const ToolParamTypes> types);

  std::vector<ToolCallEvent> feed(std::string_view text);
  std::vector<ToolCallEvent> finish();
  int n_calls() const { return n_calls_; }

 private:
  enum class Mode : uint8_t {
    kContent,        // text, watching for <tool_call>
    kOpen,           // after <tool_call>: whitespace, then <function=
    kName,           // the function name, up to '>'
    kBody,           // whitespace, then <parameter= or </function>
    kParamName,      // a parameter name, up to '>'
    kValue,          // a value, up to </parameter>
    kAfterFunction,  // whitespace, then </tool_call> (forgiven when missing)
    kAfterCall,      // whitespace, then another <tool_call> or content
    kPlain,          // content only (after an invalid call)
  };

  void byte(char c);
  void value_byte(char c);
  void end_value();
  void flush_value(std::string_view text);
  void fail(const std::string& why);
  void emit_content(std::string_view text);
  void emit_arguments(std::string_view text);
  void emit(ToolCallEvent::Kind kind, std::string text = {});
  // 1 string, 0 JSON, -1 unknown.
  int param_is_string() const;

  std::shared_ptr<const ToolParamTypes> types_;
  Mode mode_ = Mode::kContent;
  std::vector<ToolCallEvent> out_;
  std::string held_;  // a literal being matched (marker, <function=, </parameter> ...)
  std::string ws_;    // whitespace after a call: dropped when only calls follow
  std::string raw_;   // the call's text since its <tool_call>: content if it never begins
  std::string name_, param_;
  std::string key_;    // a JSON-typed value's '"name": ' (with its separator), held
  std::string value_;  // a JSON-typed value, or the held tail of a streamed string value
  bool value_string_ = false;
  bool value_start_ = false;  // the newline after <parameter=...> not seen yet
  int n_params_ = 0;
  bool begun_ = false;
  int n_calls_ = 0;
  std::vector<std::string> ids_;
  std::mt19937_64 rng_;
};

}  // namespace sluice
