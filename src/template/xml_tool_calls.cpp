#include "template/xml_tool_calls.h"

#include <algorithm>
#include <nlohmann/json.hpp>

namespace sluice {
namespace {

constexpr std::string_view kOpenMarker = "<tool_call>";
constexpr std::string_view kCloseMarker = "</tool_call>";
constexpr std::string_view kFunction = "<function=";
constexpr std::string_view kFunctionEnd = "</function>";
constexpr std::string_view kParameter = "<parameter=";
constexpr std::string_view kParameterEnd = "</parameter>";
constexpr size_t kMaxName = 256;

bool is_space(char c) {
  return c == ' ' || c == '\n' || c == '\t' || c == '\r';
}

bool prefix_of(std::string_view whole, std::string_view part) {
  return whole.substr(0, part.size()) == part;
}

// The inside of a JSON string literal for `text`: quotes, backslashes and control characters
// escaped, every other byte as it is (so pieces of a split UTF-8 character concatenate right).
std::string escape(std::string_view text) {
  std::string out;
  for (char c : text) {
    const unsigned char u = static_cast<unsigned char>(c);
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\t') {
      out += "\\t";
    } else if (c == '\r') {
      out += "\\r";
    } else if (u < 0x20) {
      static const char* hex = "0123456789abcdef";
      out += "\\u00";
      out += hex[u >> 4];
      out += hex[u & 15];
    } else {
      out += c;
    }
  }
  return out;
}

}  // namespace

XmlToolCallParser::XmlToolCallParser(uint64_t id_seed, std::shared_ptr<const ToolParamTypes> types)
    : types_(std::move(types)), rng_(id_seed) {}

int XmlToolCallParser::param_is_string() const {
  if (!types_) return -1;
  auto tool = types_->tools.find(name_);
  if (tool == types_->tools.end()) return -1;
  auto p = tool->second.find(param_);
  if (p == tool->second.end()) return -1;
  return p->second ? 1 : 0;
}

std::vector<ToolCallEvent> XmlToolCallParser::feed(std::string_view text) {
  out_.clear();
  for (size_t i = 0; i < text.size(); ++i) {
    if (mode_ == Mode::kPlain) {
      emit_content(text.substr(i));
      break;
    }
    if (mode_ == Mode::kContent && held_.empty()) {
      // Fast path: content up to the next '<'.
      size_t next = text.find('<', i);
      if (next == std::string_view::npos) next = text.size();
      emit_content(text.substr(i, next - i));
      i = next;
      if (i == text.size()) break;
    }
    byte(text[i]);
  }
  return std::move(out_);
}

std::vector<ToolCallEvent> XmlToolCallParser::finish() {
  out_.clear();
  switch (mode_) {
    case Mode::kContent:
      emit_content(held_);
      break;
    case Mode::kAfterCall:
    case Mode::kAfterFunction:  // a missing </tool_call> is forgiven
    case Mode::kPlain:
      break;
    case Mode::kOpen:
    case Mode::kName:
    case Mode::kBody:
    case Mode::kParamName:
    case Mode::kValue:
      fail("the message ended inside the call");
      break;
  }
  held_.clear();
  mode_ = Mode::kPlain;
  return std::move(out_);
}

void XmlToolCallParser::byte(char c) {
  if (mode_ != Mode::kContent && mode_ != Mode::kAfterCall && mode_ != Mode::kPlain) raw_ += c;
  switch (mode_) {
    case Mode::kPlain:
      return emit_content(std::string_view(&c, 1));
    case Mode::kContent:
    case Mode::kAfterCall: {
      if (held_.empty() && c != '<') {
        if (mode_ == Mode::kAfterCall && is_space(c)) {
          ws_ += c;
          return;
        }
        mode_ = Mode::kContent;
        emit_content(ws_);
        ws_.clear();
        return emit_content(std::string_view(&c, 1));
      }
      held_ += c;
      if (held_ == kOpenMarker) {
        ws_.clear();
        raw_ = std::move(held_);
        held_.clear();
        mode_ = Mode::kOpen;
        return;
      }
      if (prefix_of(kOpenMarker, held_)) return;
      // Not the marker: text (with the whitespace before it); the rest is looked at again.
      const std::string rest = held_.substr(1);
      held_.clear();
      mode_ = Mode::kContent;
      emit_content(ws_);
      ws_.clear();
      emit_content("<");
      for (char r : rest) byte(r);
      return;
    }
    case Mode::kOpen:
    case Mode::kBody:
    case Mode::kAfterFunction: {
      if (held_.empty() && is_space(c)) return;
      held_ += c;
      if (mode_ == Mode::kOpen) {
        if (held_ == kFunction) {
          held_.clear();
          name_.clear();
          mode_ = Mode::kName;
        } else if (!prefix_of(kFunction, held_)) {
          fail("expected <function=NAME> after <tool_call>");
        }
        return;
      }
      if (mode_ == Mode::kBody) {
        if (held_ == kParameter) {
          held_.clear();
          param_.clear();
          mode_ = Mode::kParamName;
        } else if (held_ == kFunctionEnd) {
          held_.clear();
          emit_arguments(n_params_ == 0 ? "{}" : "}");
          emit(ToolCallEvent::Kind::kCallEnd);
          begun_ = false;
          mode_ = Mode::kAfterFunction;
        } else if (!prefix_of(kParameter, held_) && !prefix_of(kFunctionEnd, held_)) {
          fail("expected <parameter=NAME> or </function>");
        }
        return;
      }
      // kAfterFunction
      if (held_ == kCloseMarker) {
        held_.clear();
        raw_.clear();
        mode_ = Mode::kAfterCall;
      } else if (!prefix_of(kCloseMarker, held_)) {
        // No </tool_call>: the call stands; what follows is looked at as after a call.
        const std::string rest = std::move(held_);
        held_.clear();
        raw_.clear();
        mode_ = Mode::kAfterCall;
        for (char r : rest) byte(r);
      }
      return;
    }
    case Mode::kName:
    case Mode::kParamName: {
      std::string& name = mode_ == Mode::kName ? name_ : param_;
      if (c != '>') {
        if (c == '<' || c == '\n' || name.size() >= kMaxName) return fail("a malformed name");
        name += c;
        return;
      }
      if (name.empty()) return fail("an empty name");
      if (mode_ == Mode::kName) {
        ToolCallEvent e;
        e.kind = ToolCallEvent::Kind::kCallBegin;
        e.index = n_calls_++;
        for (;;) {
          e.id = make_tool_call_id(rng_, 0);
          if (std::find(ids_.begin(), ids_.end(), e.id) == ids_.end()) break;
        }
        ids_.push_back(e.id);
        e.name = name_;
        out_.push_back(std::move(e));
        begun_ = true;
        n_params_ = 0;
        mode_ = Mode::kBody;
        return;
      }
      const int is_string = param_is_string();
      value_string_ = is_string == 1;
      value_.clear();
      value_start_ = true;
      std::string head = n_params_ == 0 ? "{" : ", ";
      head += nlohmann::json(param_).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
      head += ": ";
      if (value_string_) head += "\"";
      // A JSON-typed (or unknown) value is written when it is whole: hold the key until then.
      if (value_string_) {
        emit_arguments(head);
      } else {
        key_ = std::move(head);
      }
      mode_ = Mode::kValue;
      return;
    }
    case Mode::kValue:
      return value_byte(c);
  }
}

void XmlToolCallParser::value_byte(char c) {
  if (value_start_) {
    value_start_ = false;
    if (c == '\n') return;  // the template's newline after <parameter=...>
  }
  // value_: string values: the held tail that may still be "\n</parameter>"; other values: all
  // of the text so far.
  value_ += c;
  if (value_.size() >= kParameterEnd.size() &&
      std::string_view(value_).substr(value_.size() - kParameterEnd.size()) == kParameterEnd) {
    value_.resize(value_.size() - kParameterEnd.size());
    if (!value_.empty() && value_.back() == '\n') value_.pop_back();
    return end_value();
  }
  if (!value_string_) return;
  // Emit what can no longer be part of "\n</parameter>".
  size_t keep = 0;
  for (size_t n = std::min(value_.size(), kParameterEnd.size() + 1); n > 0; --n) {
    std::string_view suffix = std::string_view(value_).substr(value_.size() - n);
    if (prefix_of(kParameterEnd, suffix) ||
        (suffix[0] == '\n' && prefix_of(kParameterEnd, suffix.substr(1)))) {
      keep = n;
      break;
    }
  }
  flush_value(std::string_view(value_).substr(0, value_.size() - keep));
  value_.erase(0, value_.size() - keep);
}

void XmlToolCallParser::flush_value(std::string_view text) {
  if (!text.empty()) emit_arguments(escape(text));
}

void XmlToolCallParser::end_value() {
  if (value_string_) {
    flush_value(value_);
    emit_arguments("\"");
  } else {
    const std::string& text = value_;
    // Surrounding whitespace is not part of a JSON value.
    const size_t b = text.find_first_not_of(" \n\t\r");
    const size_t e = text.find_last_not_of(" \n\t\r");
    const std::string trimmed = b == std::string::npos ? "" : text.substr(b, e - b + 1);
    const nlohmann::json parsed = nlohmann::json::parse(trimmed, nullptr, false);
    const bool as_json = param_is_string() != 1 && !trimmed.empty() && !parsed.is_discarded();
    emit_arguments(key_ + (as_json ? trimmed : "\"" + escape(text) + "\""));
  }
  value_.clear();
  ++n_params_;
  mode_ = Mode::kBody;
}

void XmlToolCallParser::fail(const std::string& why) {
  if (!begun_) {
    emit_content(raw_);
    emit(ToolCallEvent::Kind::kInvalidCall, why);
  } else {
    ToolCallEvent e;
    e.kind = ToolCallEvent::Kind::kInvalidCall;
    e.index = n_calls_ - 1;
    e.text = why;
    out_.push_back(std::move(e));
  }
  raw_.clear();
  held_.clear();
  value_.clear();
  begun_ = false;
  mode_ = Mode::kPlain;
}

void XmlToolCallParser::emit_content(std::string_view text) {
  if (text.empty()) return;
  if (!out_.empty() && out_.back().kind == ToolCallEvent::Kind::kContent) {
    out_.back().text += text;
    return;
  }
  emit(ToolCallEvent::Kind::kContent, std::string(text));
}

void XmlToolCallParser::emit_arguments(std::string_view text) {
  if (text.empty()) return;
  if (!out_.empty() && out_.back().kind == ToolCallEvent::Kind::kArguments &&
      out_.back().index == n_calls_ - 1) {
    out_.back().text += text;
    return;
  }
  ToolCallEvent e;
  e.kind = ToolCallEvent::Kind::kArguments;
  e.index = n_calls_ - 1;
  e.text = std::string(text);
  out_.push_back(std::move(e));
}

void XmlToolCallParser::emit(ToolCallEvent::Kind kind, std::string text) {
  ToolCallEvent e;
  e.kind = kind;
  e.index = kind == ToolCallEvent::Kind::kContent ? -1 : n_calls_ - 1;
  if (kind == ToolCallEvent::Kind::kInvalidCall && !begun_) e.index = -1;
  e.text = std::move(text);
  out_.push_back(std::move(e));
}

}  // namespace sluice
