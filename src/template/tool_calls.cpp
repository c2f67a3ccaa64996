#include "template/tool_calls.h"

#include "template/xml_tool_calls.h"

#include <algorithm>
#include <cstring>
#include <optional>

namespace sluice {
namespace {

using ojson = nlohmann::ordered_json;

constexpr std::string_view kPythonTag = "<|python_tag|>";
constexpr std::string_view kHermesOpen = "<tool_call>";
constexpr std::string_view kHermesClose = "</tool_call>";
constexpr std::string_view kMistralMarker = "[TOOL_CALLS]";
constexpr std::string_view kAlnum =
    "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";

bool contains(std::string_view haystack, std::string_view needle) {
  return haystack.find(needle) != std::string_view::npos;
}

// A JSON string literal (already validated by JsonScanner) -> its text; nullopt when it is not
// valid UTF-8.
std::optional<std::string> decode_string(const std::string& literal) {
  ojson j = ojson::parse(literal, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_string()) return std::nullopt;
  return j.get<std::string>();
}

bool is_mistral_id(std::string_view id) {
  return id.size() == 9 && std::all_of(id.begin(), id.end(), [](char c) {
           return kAlnum.find(c) != std::string_view::npos;
         });
}

// Any id -> 9 alphanumerics (FNV-1a), stable so that a call and its result still match.
std::string mistral_id(std::string_view id) {
  if (is_mistral_id(id)) return std::string(id);
  uint64_t h = 14695981039346656037ull;
  for (char c : id) h = (h ^ static_cast<unsigned char>(c)) * 1099511628211ull;
  std::string out;
  for (int i = 0; i < 9; ++i, h /= kAlnum.size()) out += kAlnum[h % kAlnum.size()];
  return out;
}

}  // namespace

std::string_view tool_call_format_name(ToolCallFormat format) {
  switch (format) {
    case ToolCallFormat::kNone:
      return "none";
    case ToolCallFormat::kLlama3Json:
      return "llama3_json";
    case ToolCallFormat::kHermes:
      return "hermes";
    case ToolCallFormat::kMistral:
      return "mistral";
    case ToolCallFormat::kQwenXml:
      return "qwen3_coder";
  }
  return "none";
}

ToolCallFormat detect_tool_call_format(std::string_view src) {
  if (contains(src, kMistralMarker)) return ToolCallFormat::kMistral;
  if (contains(src, kHermesOpen) && contains(src, "<function=")) return ToolCallFormat::kQwenXml;
  if (contains(src, kHermesOpen)) return ToolCallFormat::kHermes;
  // Llama 3.1-3.3 write calls as {"name": ..., "parameters": ...} and results under the ipython
  // role; functionary v3.1 shares the Llama 3.1 special tokens but calls with <function=...>.
  if (contains(src, "\"parameters\"") &&
      (contains(src, kPythonTag) || contains(src, "<|eom_id|>") || contains(src, "ipython")) &&
      !contains(src, "<function=")) {
    return ToolCallFormat::kLlama3Json;
  }
  return ToolCallFormat::kNone;
}

ToolCallSyntax tool_call_syntax(ToolCallFormat format) {
  ToolCallSyntax s;
  s.format = format;
  switch (format) {
    case ToolCallFormat::kNone:
      break;
    case ToolCallFormat::kLlama3Json:
      s.trigger = "{";
      s.trigger_at_start_only = true;
      s.args_key = "parameters";
      break;
    case ToolCallFormat::kHermes:
      s.trigger = std::string(kHermesOpen);
      s.content_before_calls = true;
      s.call_open = std::string(kHermesOpen) + "\n";
      s.call_close = "\n" + std::string(kHermesClose);
      s.separator = "\n";
      s.args_key = "arguments";
      s.parallel = true;
      break;
    case ToolCallFormat::kQwenXml:  // the calls are not JSON: xml_tool_calls.h
      s.trigger = std::string(kHermesOpen);
      s.content_before_calls = true;
      s.call_open = std::string(kHermesOpen) + "\n";
      s.call_close = "\n" + std::string(kHermesClose);
      s.separator = "\n";
      s.parallel = true;
      break;
    case ToolCallFormat::kMistral:
      s.trigger = std::string(kMistralMarker);
      s.prefix = std::string(kMistralMarker) + "[";
      s.separator = ", ";
      s.suffix = "]";
      s.args_key = "arguments";
      s.parallel = true;
      s.id_length = 9;
      break;
  }
  return s;
}

// ---------------------------------------------------------------------------------------------
// ToolCallParser

ToolCallParser::ToolCallParser(ToolCallFormat format)
    : ToolCallParser(format, (uint64_t(std::random_device{}()) << 32) ^ std::random_device{}()) {}

ToolCallParser::ToolCallParser(ToolCallFormat format, uint64_t id_seed,
                               std::shared_ptr<const ToolParamTypes> types)
    : format_(format), syntax_(tool_call_syntax(format)), mode_(Mode::kPlain), rng_(id_seed) {
  switch (format) {
    case ToolCallFormat::kNone:
      break;
    case ToolCallFormat::kQwenXml:
      xml_ = std::make_unique<XmlToolCallParser>(id_seed, std::move(types));
      break;
    case ToolCallFormat::kLlama3Json:
      mode_ = Mode::kLlamaStart;
      break;
    case ToolCallFormat::kHermes:
      marker_ = std::string(kHermesOpen);
      mode_ = Mode::kContent;
      break;
    case ToolCallFormat::kMistral:
      marker_ = std::string(kMistralMarker);
      mode_ = Mode::kContent;
      break;
  }
}

ToolCallParser::~ToolCallParser() = default;
ToolCallParser::ToolCallParser(ToolCallParser&&) noexcept = default;

int ToolCallParser::n_calls() const {
  return xml_ ? xml_->n_calls() : n_calls_;
}

std::vector<ToolCallEvent> ToolCallParser::feed(std::string_view text) {
  if (xml_) return xml_->feed(text);
  out_.clear();
  for (size_t i = 0; i < text.size() && mode_ != Mode::kFinished; ++i) {
    if (mode_ == Mode::kPlain) {
      emit_content(text.substr(i));
      break;
    }
    if (mode_ == Mode::kContent && held_.empty() && !after_call_) {
      // Fast path: content up to the next byte that could start the marker.
      size_t next = text.find(marker_[0], i);
      if (next == std::string_view::npos) next = text.size();
      emit_content(text.substr(i, next - i));
      i = next;
      if (i == text.size()) break;
    }
    byte(text[i]);
  }
  return std::move(out_);
}

std::vector<ToolCallEvent> ToolCallParser::finish() {
  if (xml_) return xml_->finish();
  out_.clear();
  switch (mode_) {
    case Mode::kPlain:
    case Mode::kFinished:
      break;
    case Mode::kContent:
      if (!held_.empty()) {  // a partial marker is text; whitespace before it too
        emit_content(ws_after_call_);
        emit_content(held_);
      }
      break;
    case Mode::kLlamaStart:  // whitespace or part of <|python_tag|>: text
      emit_content(raw_);
      break;
    case Mode::kLlamaNext:  // complete calls; a missing ']' or </tool_call> is forgiven
    case Mode::kListNext:
    case Mode::kHermesClose:
      break;
    case Mode::kAfterMarker:
    case Mode::kListOpen:
    case Mode::kListItem:
    case Mode::kCall:
      fail("the message ended inside the call");
      break;
  }
  held_.clear();
  ws_after_call_.clear();
  raw_.clear();
  mode_ = Mode::kFinished;
  return std::move(out_);
}

void ToolCallParser::byte(char c) {
  switch (mode_) {
    case Mode::kPlain:
      emit_content(std::string_view(&c, 1));
      return;
    case Mode::kContent:
      content_byte(c);
      return;
    case Mode::kFinished:
      return;
    case Mode::kLlamaStart:
      raw_ += c;
      if (match_pos_ > 0 || c == '<') {
        if (c != kPythonTag[match_pos_]) break;  // not a call
        if (++match_pos_ == kPythonTag.size()) match_pos_ = 0;
        return;
      }
      if (is_json_ws(c)) return;
      if (c == '{') return begin_object();
      break;  // not a call
    case Mode::kLlamaNext:
      raw_ += c;
      if (is_json_ws(c) || c == ';') return;
      if (c == '{') return begin_object();
      break;  // text after the calls
    case Mode::kAfterMarker:
      raw_ += c;
      if (is_json_ws(c)) return;
      if (c == '{') return begin_object();
      return fail("expected '{' after " + marker_);
    case Mode::kListOpen:
      raw_ += c;
      if (is_json_ws(c)) return;
      list_ = c == '[';
      list_first_ = true;
      if (c == '[') {
        mode_ = Mode::kListItem;
        return;
      }
      if (c == '{') return begin_object();
      return fail("expected '[' after " + marker_);
    case Mode::kListItem:
      raw_ += c;
      if (is_json_ws(c)) return;
      if (c == '{') return begin_object();
      if (c == ']' && list_first_) {  // "[TOOL_CALLS][]": no calls
        raw_.clear();
        mode_ = Mode::kContent;
        after_call_ = true;
        return;
      }
      return fail("expected a call object in the list");
    case Mode::kListNext:
      raw_ += c;
      if (is_json_ws(c)) return;
      if (c == ',') {
        mode_ = Mode::kListItem;
        list_first_ = false;
        return;
      }
      if (c == ']') {
        raw_.clear();
        mode_ = Mode::kContent;
        after_call_ = true;
        return;
      }
      return fail("expected ',' or ']' after a call in the list");
    case Mode::kHermesClose: {
      raw_ += c;
      if (match_pos_ == 0 && is_json_ws(c)) return;
      if (c == kHermesClose[match_pos_]) {
        if (++match_pos_ == kHermesClose.size()) {
          raw_.clear();
          match_pos_ = 0;
          mode_ = Mode::kContent;
          after_call_ = true;
        }
        return;
      }
      // No </tool_call> (models sometimes drop it): the held text is content, or the next call.
      std::string pending = std::move(raw_);
      raw_.clear();
      match_pos_ = 0;
      mode_ = Mode::kContent;
      after_call_ = true;
      for (char p : pending) content_byte(p);
      return;
    }
    case Mode::kCall:
      raw_ += c;
      return call_byte(c);
  }
  // Llama 3: the held text was not a call after all, and the rest of the message is content.
  match_pos_ = 0;
  emit_content(raw_);
  raw_.clear();
  mode_ = Mode::kPlain;
}

void ToolCallParser::content_byte(char c) {
  held_ += c;
  // Release the bytes that can no longer begin the marker.
  size_t drop = 0;
  while (drop < held_.size() &&
         !std::string_view(marker_).starts_with(std::string_view(held_).substr(drop))) {
    ++drop;
  }
  std::string_view released = std::string_view(held_).substr(0, drop);
  if (after_call_) {
    size_t text = 0;
    while (text < released.size() && is_json_ws(released[text])) ++text;
    ws_after_call_.append(released.substr(0, text));
    released.remove_prefix(text);
    if (!released.empty()) {
      emit_content(ws_after_call_);
      ws_after_call_.clear();
      after_call_ = false;
    }
  }
  emit_content(released);
  held_.erase(0, drop);
  if (held_ == marker_) {
    held_.clear();
    ws_after_call_.clear();  // whitespace between calls
    after_call_ = false;
    raw_ = marker_;
    mode_ = format_ == ToolCallFormat::kHermes ? Mode::kAfterMarker : Mode::kListOpen;
  }
}

void ToolCallParser::begin_object() {
  mode_ = Mode::kCall;
  obj_ = Obj::kKeyOrEnd;
  scratch_.clear();
  name_.clear();
  args_held_.clear();
  have_name_ = have_args_ = begun_ = false;
}

void ToolCallParser::call_byte(char c) {
  switch (obj_) {
    case Obj::kKeyOrEnd:
    case Obj::kKey:
      if (is_json_ws(c)) return;
      if (c == '}' && obj_ == Obj::kKeyOrEnd) return end_object();
      if (c != '"') return fail("expected a key in the call object");
      scratch_.assign(1, c);
      value_.reset();
      value_.push(c);
      obj_ = Obj::kKeyString;
      return;
    case Obj::kKeyString: {
      scratch_ += c;
      JsonScanner::Step step = value_.push(c);
      if (step == JsonScanner::Step::kError) return fail("invalid JSON: " + value_.error());
      if (step != JsonScanner::Step::kDone) return;
      std::optional<std::string> key = decode_string(scratch_);
      if (!key) return fail("invalid UTF-8 in a key");
      slot_ = *key == syntax_.name_key                      ? Slot::kName
              : *key == "arguments" || *key == "parameters" ? Slot::kArgs
                                                            : Slot::kOther;
      if ((slot_ == Slot::kName && have_name_) || (slot_ == Slot::kArgs && have_args_)) {
        return fail("the call object has two \"" + *key + "\" keys");
      }
      obj_ = Obj::kColon;
      return;
    }
    case Obj::kColon:
      if (is_json_ws(c)) return;
      if (c != ':') return fail("expected ':' after a key in the call object");
      obj_ = Obj::kValueStart;
      return;
    case Obj::kValueStart:
      if (is_json_ws(c)) return;
      if (slot_ == Slot::kName && c != '"') return fail("the function name is not a string");
      if (slot_ == Slot::kArgs && c != '{') return fail("the arguments are not a JSON object");
      if (slot_ == Slot::kArgs) have_args_ = true;
      scratch_.clear();
      value_.reset();
      obj_ = Obj::kValue;
      return call_byte(c);
    case Obj::kValue: {
      JsonScanner::Step step = value_.push(c);
      if (step == JsonScanner::Step::kError) return fail("invalid JSON: " + value_.error());
      if (slot_ == Slot::kName) {
        scratch_ += c;
      } else if (slot_ == Slot::kArgs) {
        if (begun_) {
          emit_arguments(std::string_view(&c, 1));
        } else {
          args_held_ += c;
          maybe_begin();
        }
      }
      if (step == JsonScanner::Step::kMore) return;
      obj_ = Obj::kCommaOrEnd;
      if (step == JsonScanner::Step::kDoneBefore) return call_byte(c);  // a number ended
      if (slot_ == Slot::kName) {
        std::optional<std::string> name = decode_string(scratch_);
        if (!name) return fail("invalid UTF-8 in the function name");
        name_ = std::move(*name);
        have_name_ = true;
        maybe_begin();
      }
      return;
    }
    case Obj::kCommaOrEnd:
      if (is_json_ws(c)) return;
      if (c == ',') {
        obj_ = Obj::kKey;
        return;
      }
      if (c == '}') return end_object();
      return fail("expected ',' or '}' in the call object");
  }
}

void ToolCallParser::maybe_begin() {
  if (begun_ || !have_name_ || !have_args_) return;
  begun_ = true;
  ToolCallEvent e;
  e.kind = ToolCallEvent::Kind::kCallBegin;
  e.index = n_calls_++;
  e.id = make_id();
  e.name = name_;
  out_.push_back(std::move(e));
  emit_arguments(args_held_);
  args_held_.clear();
}

void ToolCallParser::end_object() {
  if (!have_name_) return fail("the call object has no \"" + syntax_.name_key + "\"");
  if (!have_args_) {
    if (format_ == ToolCallFormat::kLlama3Json) return fail("the call object has no arguments");
    have_args_ = true;
    maybe_begin();
    emit_arguments("{}");
  }
  emit(ToolCallEvent::Kind::kCallEnd);
  begun_ = false;
  raw_.clear();
  after_call();
}

void ToolCallParser::after_call() {
  switch (format_) {
    case ToolCallFormat::kLlama3Json:
      mode_ = Mode::kLlamaNext;
      break;
    case ToolCallFormat::kHermes:
      mode_ = Mode::kHermesClose;
      match_pos_ = 0;
      break;
    case ToolCallFormat::kMistral:
      mode_ = list_ ? Mode::kListNext : Mode::kContent;
      after_call_ = !list_;
      break;
    case ToolCallFormat::kNone:
    case ToolCallFormat::kQwenXml:  // never here: XmlToolCallParser does the work
      mode_ = Mode::kPlain;
      break;
  }
}

void ToolCallParser::fail(const std::string& why) {
  if (format_ != ToolCallFormat::kLlama3Json || begun_) {
    ToolCallEvent e;
    e.kind = ToolCallEvent::Kind::kInvalidCall;
    e.index = begun_ ? n_calls_ - 1 : -1;
    e.text = begun_ ? "tool call " + std::to_string(e.index) + " ('" + name_ + "'): " + why
                    : "tool call: " + why;
    out_.push_back(std::move(e));
  }  // else a Llama 3 message that was not a call: its text is content, nothing failed
  // A call that began was already reported (its name and arguments so far, streamed): its text
  // is not repeated as content. One that never began (a marker, then no call) is content.
  if (!begun_) emit_content(raw_);
  raw_.clear();
  begun_ = false;
  mode_ = Mode::kPlain;
}

std::string make_tool_call_id(std::mt19937_64& rng, size_t length) {
  const size_t n = length ? length : 24;
  std::uniform_int_distribution<size_t> pick(0, kAlnum.size() - 1);
  std::string id = length ? "" : "call_";
  for (size_t i = 0; i < n; ++i) id += kAlnum[pick(rng)];
  return id;
}

std::string ToolCallParser::make_id() {
  for (;;) {
    std::string id = make_tool_call_id(rng_, syntax_.id_length);
    if (std::find(ids_.begin(), ids_.end(), id) == ids_.end()) {
      ids_.push_back(id);
      return id;
    }
  }
}

void ToolCallParser::emit_content(std::string_view text) {
  if (text.empty()) return;
  if (!out_.empty() && out_.back().kind == ToolCallEvent::Kind::kContent) {
    out_.back().text.append(text);
    return;
  }
  emit(ToolCallEvent::Kind::kContent, std::string(text));
}

void ToolCallParser::emit_arguments(std::string_view text) {
  if (text.empty()) return;
  if (!out_.empty() && out_.back().kind == ToolCallEvent::Kind::kArguments) {
    out_.back().text.append(text);
    return;
  }
  emit(ToolCallEvent::Kind::kArguments, std::string(text));
}

void ToolCallParser::emit(ToolCallEvent::Kind kind, std::string text) {
  ToolCallEvent e;
  e.kind = kind;
  e.text = std::move(text);
  if (kind != ToolCallEvent::Kind::kContent) e.index = n_calls_ - 1;
  out_.push_back(std::move(e));
}

// ---------------------------------------------------------------------------------------------

ParsedToolCalls collect_tool_call_events(const std::vector<ToolCallEvent>& events) {
  ParsedToolCalls out;
  std::vector<ToolCall> begun;
  std::vector<bool> ended;
  for (const ToolCallEvent& e : events) {
    switch (e.kind) {
      case ToolCallEvent::Kind::kContent:
        out.content += e.text;
        break;
      case ToolCallEvent::Kind::kCallBegin:
        begun.resize(std::max<size_t>(begun.size(), size_t(e.index) + 1));
        ended.resize(begun.size());
        begun[size_t(e.index)] = ToolCall{e.id, e.name, ""};
        break;
      case ToolCallEvent::Kind::kArguments:
        begun[size_t(e.index)].arguments += e.text;
        break;
      case ToolCallEvent::Kind::kCallEnd:
        ended[size_t(e.index)] = true;
        break;
      case ToolCallEvent::Kind::kInvalidCall:
        if (!out.invalid) out.error = e.text;
        out.invalid = true;
        break;
      case ToolCallEvent::Kind::kReasoning:
        out.reasoning += e.text;
        break;
    }
  }
  for (size_t i = 0; i < begun.size(); ++i) {
    if (ended[i]) out.calls.push_back(std::move(begun[i]));
  }
  return out;
}

ParsedToolCalls parse_tool_calls(ToolCallFormat format, std::string_view text, uint64_t id_seed) {
  ToolCallParser parser(format, id_seed);
  std::vector<ToolCallEvent> events = parser.feed(text);
  std::vector<ToolCallEvent> last = parser.finish();
  events.insert(events.end(), std::make_move_iterator(last.begin()),
                std::make_move_iterator(last.end()));
  return collect_tool_call_events(events);
}

ojson messages_for_template(ToolCallFormat format, const ojson& messages) {
  if (format == ToolCallFormat::kNone || !messages.is_array()) return messages;
  const bool mistral = format == ToolCallFormat::kMistral;
  ojson out = messages;
  for (ojson& m : out) {
    if (!m.is_object()) continue;
    if (auto calls = m.find("tool_calls"); calls != m.end() && calls->is_array()) {
      for (ojson& call : *calls) {
        if (!call.is_object()) continue;
        if (auto fn = call.find("function"); fn != call.end() && fn->is_object()) {
          if (auto args = fn->find("arguments"); args != fn->end() && args->is_string()) {
            ojson parsed = ojson::parse(args->get<std::string>(), nullptr, false);
            if (!parsed.is_discarded()) *args = std::move(parsed);
          }
        }
        if (auto id = call.find("id"); mistral && id != call.end() && id->is_string()) {
          *id = mistral_id(id->get<std::string>());
        }
      }
    }
    if (auto id = m.find("tool_call_id"); mistral && id != m.end() && id->is_string()) {
      *id = mistral_id(id->get<std::string>());
    }
  }
  return out;
}

}  // namespace sluice
