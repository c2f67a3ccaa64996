// Tool calls in each template family's own syntax: which family a chat template belongs to,
// how that family writes calls (so that the server can build a grammar that constrains them),
// and one streaming parser that turns the model's text into content and OpenAI-style tool
// calls.
//
//   kLlama3Json  (template: "parameters" + ipython; Llama 3.1 / 3.2 / 3.3)
//     {"name": "f", "parameters": {...}}                      the whole message is the call
//   kHermes      (template: <tool_call>; Hermes 2 Pro / 3, Qwen2.5)
//     <tool_call>\n{"name": "f", "arguments": {...}}\n</tool_call>   one block per call,
//                                                               after optional text
//   kMistral     (template: [TOOL_CALLS]; Mistral Nemo)
//     [TOOL_CALLS][{"name": "f", "arguments": {...}}, ...]
//   kQwenXml     (template: <tool_call> and <function=; Qwen3-Coder, Qwen3.5 / 3.6)
//     <tool_call>\n<function=f>\n<parameter=p>\nvalue\n</parameter>\n</function>\n</tool_call>
//
// The server streams:
//
//   ToolCallParser parser(detect_tool_call_format(template_source));
//   for (each text delta) for (const ToolCallEvent& e : parser.feed(delta)) send(e);
//   for (const ToolCallEvent& e : parser.finish()) send(e);
//
// and a non-streaming response is the same machine over the whole text (parse_tool_calls).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include "template/json_scanner.h"

namespace sluice {

enum class ToolCallFormat : uint8_t { kNone, kLlama3Json, kHermes, kMistral, kQwenXml };

// "none", "llama3_json", "hermes", "mistral", "qwen3_coder".
std::string_view tool_call_format_name(ToolCallFormat format);

// The family of a chat template, from the markers its source writes when it renders tool-call
// history (checked in this order): "[TOOL_CALLS]" -> kMistral; "<tool_call>" with
// "<function=" -> kQwenXml (Qwen3-Coder, Qwen3.5: xml_tool_calls.h); "<tool_call>" -> kHermes;
// "\"parameters\"" together with "<|python_tag|>", "<|eom_id|>" or "ipython" (and no
// functionary-style "<function=") -> kLlama3Json; otherwise kNone.
ToolCallFormat detect_tool_call_format(std::string_view template_source);

// How a family writes tool calls, precisely enough to build a grammar that accepts exactly
// that (grammar/ sits above template/ and builds it; nothing here knows about grammars):
//
//   prefix  call_open CALL call_close  ( separator call_open CALL call_close )*  suffix
//   CALL := {"<name_key>": "<function name>", "<args_key>": <object matching the tool's
//            "parameters" JSON schema>}
//
// e.g. Hermes:  "" "<tool_call>\n" CALL "\n</tool_call>" "\n" ... ""
//      Mistral: "[TOOL_CALLS][" "" CALL "" ", " ... "]"
struct ToolCallSyntax {
  ToolCallFormat format = ToolCallFormat::kNone;
  // The text after which the model is writing tool calls (the start of prefix, or of call_open
  // when there is no prefix): a lazy grammar (tool_choice "auto") starts constraining once the
  // model has written it; "required" forces it. For kLlama3Json it is "{" and counts only as
  // the first non-space character of the message.
  std::string trigger;
  bool trigger_at_start_only = false;
  bool content_before_calls = false;  // plain text may precede the calls
  std::string prefix;                 // once, before the first call
  std::string call_open;              // before each call
  std::string call_close;             // after each call
  std::string separator;              // between two calls
  std::string suffix;                 // once, after the last call
  std::string name_key = "name";
  std::string args_key;   // "parameters" (Llama 3) or "arguments"
  bool parallel = false;  // more than one call per message (the Llama 3 templates allow one)
  size_t id_length = 0;   // tool call ids: 0 for "call_" + 24 alphanumerics, else exactly this
                          // many alphanumerics (Mistral's templates reject other ids)
};

ToolCallSyntax tool_call_syntax(ToolCallFormat format);

// The parameter types of the offered tools, for formats that write values without JSON types
// (kQwenXml): tool name -> parameter name -> whether its schema is a string.
struct ToolParamTypes {
  std::map<std::string, std::map<std::string, bool>> tools;
};

// A tool call id: "call_" + 24 alphanumerics, or (`length` > 0) exactly `length` alphanumerics.
std::string make_tool_call_id(std::mt19937_64& rng, size_t length);

// One thing the parser learned. Events of one call come in order begin, arguments*, end; the
// arguments fragments of a call concatenate to its arguments object exactly as the model wrote
// it (valid JSON), which is what OpenAI's `function.arguments` carries.
struct ToolCallEvent {
  enum class Kind : uint8_t {
    kContent,      // text: assistant text outside tool calls
    kCallBegin,    // index, id, name
    kArguments,    // index, text: the next fragment of the arguments JSON
    kCallEnd,      // index
    kInvalidCall,  // index (-1 when the call never began), text: why; a call that never began
                   // has its text follow as kContent (one that began keeps what was reported of
                   // it: its name and arguments so far); no more calls are recognized after
    kReasoning,    // text: the model's reasoning (MessageParser, reasoning.h; never from here)
  };
  Kind kind = Kind::kContent;
  int index = -1;    // the call's position in this message: 0, 1, ...
  std::string text;  // see Kind
  std::string id;    // kCallBegin: unique within the message
  std::string name;  // kCallBegin

  bool operator==(const ToolCallEvent&) const = default;
};

// The streaming parser: a byte-at-a-time state machine, so that its output does not depend on
// how the text is split into deltas (events may be split or merged differently, but their
// concatenation is the same). Content is emitted as soon as it cannot be part of a tool-call
// marker; it holds back only
//   - a suffix that may be the start of the family's marker ("<tool_c", "[TOOL_"),
//   - kLlama3Json: the message while it may still be a call ("  {\"name\": \"f\", "): once the
//     call's name is known and its arguments object has begun, it is a call and streams; if
//     the JSON goes wrong before that (or never names a function), the held text is content,
//   - whitespace right after a call, dropped when only more calls or the end follow it.
// A call whose JSON is broken after it began (or, for the marker families, anywhere after the
// marker) gives kInvalidCall; if the call had not begun yet, the text since the last complete
// call (the marker included) comes back as content; one that began stays what was reported
// (streamed clients already have its name and partial arguments: a call cut off by max_tokens
// reads as OpenAI's do). The rest of the message is content: the parser stops looking for calls.
// Call objects may carry other keys (e.g. "type", or Mistral's "id": ignored; ids are always
// generated); with a marker, a call without arguments gets "{}". Forgiven: a missing
// </tool_call> or closing ']'. Llama 3 calls may follow each other, separated by whitespace
// or ';'; text after them is content.
class XmlToolCallParser;

class ToolCallParser {
 public:
  // Ids from a random seed; the second form makes them reproducible (tests).
  explicit ToolCallParser(ToolCallFormat format);
  // `types`: kQwenXml only (which values are strings); may be null.
  ToolCallParser(ToolCallFormat format, uint64_t id_seed,
                 std::shared_ptr<const ToolParamTypes> types = nullptr);
  ~ToolCallParser();
  ToolCallParser(ToolCallParser&&) noexcept;

  std::vector<ToolCallEvent> feed(std::string_view text);
  // The end of the message: releases held text; an unfinished call is invalid (a Llama 3
  // message that never became a call is content). Nothing may be fed afterwards.
  std::vector<ToolCallEvent> finish();

  int n_calls() const;  // calls begun so far

 private:
  enum class Mode : uint8_t {
    kPlain,        // only content from here on
    kContent,      // content, watching for the marker
    kLlamaStart,   // Llama 3: leading whitespace and an optional <|python_tag|>
    kLlamaNext,    // Llama 3: after a call: whitespace or ';' then maybe another call
    kAfterMarker,  // Hermes: after <tool_call>, before '{'
    kListOpen,     // Mistral: after [TOOL_CALLS], before '[' (or a single '{')
    kListItem,     // Mistral: before a call in the list
    kListNext,     // Mistral: after a call in the list: ',' or ']'
    kHermesClose,  // Hermes: after a call's object, matching </tool_call>
    kCall,         // inside a call's JSON object (see Obj)
    kFinished,
  };
  // Where the parser is in a call's top-level object.
  enum class Obj : uint8_t {
    kKeyOrEnd,
    kKey,
    kKeyString,
    kColon,
    kValueStart,
    kValue,
    kCommaOrEnd
  };
  enum class Slot : uint8_t { kName, kArgs, kOther };  // what the current key's value is

  void byte(char c);
  void content_byte(char c);
  void call_byte(char c);
  void begin_object();
  void end_object();
  void maybe_begin();
  void fail(const std::string& why);
  void after_call();
  std::string make_id();

  void emit_content(std::string_view text);
  void emit_arguments(std::string_view text);
  void emit(ToolCallEvent::Kind kind, std::string text = {});

  ToolCallFormat format_;
  ToolCallSyntax syntax_;
  Mode mode_;
  std::vector<ToolCallEvent> out_;  // events of the current feed()/finish()

  // Content.
  std::string marker_;         // the marker that starts calls ("" for none)
  std::string held_;           // a prefix of marker_ seen in the content
  bool after_call_ = false;    // only whitespace since the last call
  std::string ws_after_call_;  // that whitespace, held
  size_t match_pos_ = 0;       // bytes of <|python_tag|> or </tool_call> matched

  // The current call. raw_ is every byte since the last complete call (or since the start of
  // a Llama 3 message): what becomes content if the call turns out invalid or not a call.
  std::string raw_;
  bool list_ = false;        // Mistral: the calls are in a [...] list
  bool list_first_ = false;  // Mistral: no call in the list yet
  Obj obj_ = Obj::kKeyOrEnd;
  Slot slot_ = Slot::kOther;
  JsonScanner value_;    // the current key, name, arguments or other value
  std::string scratch_;  // the current key or name, as JSON text
  std::string name_;     // decoded
  bool have_name_ = false;
  bool have_args_ = false;  // the arguments key was seen
  std::string args_held_;   // arguments text before the call began
  bool begun_ = false;      // kCallBegin was emitted

  int n_calls_ = 0;
  std::vector<std::string> ids_;
  std::mt19937_64 rng_;
  std::unique_ptr<XmlToolCallParser> xml_;  // kQwenXml: the whole job
};

// A whole message, parsed (feed + finish of one ToolCallParser).
struct ToolCall {
  std::string id;
  std::string name;
  std::string arguments;  // JSON text of an object
};
struct ParsedToolCalls {
  std::string content;          // all kContent text
  std::string reasoning;        // all kReasoning text (MessageParser)
  std::vector<ToolCall> calls;  // the calls that ended, in order
  bool invalid = false;         // a kInvalidCall was seen
  std::string error;            // its reason
};
// Folds the events of one message, in order, into its content and calls.
ParsedToolCalls collect_tool_call_events(const std::vector<ToolCallEvent>& events);
ParsedToolCalls parse_tool_calls(ToolCallFormat format, std::string_view text, uint64_t id_seed);

// `messages` as the family's template needs them to render tool-call history. OpenAI clients
// send `tool_calls[i].function.arguments` as a JSON string, but the Llama 3.x, Qwen2.5 and
// Mistral templates write it with `| tojson`, which would double-encode it
// ("parameters": "{\"city\": ...}"); Hermes templates take either. So for every family but
// kNone, arguments strings that hold JSON become that JSON. For kMistral, whose templates
// reject tool call ids that are not 9 alphanumerics, other ids (in `tool_calls[i].id` and
// `tool_call_id`) are mapped to 9 alphanumerics by a hash, the same in both places.
nlohmann::ordered_json messages_for_template(ToolCallFormat format,
                                             const nlohmann::ordered_json& messages);

}  // namespace sluice
