#include "template/reasoning.h"

#include <array>

namespace sluice {
namespace {

bool is_space(char c) {
  return c == ' ' || c == '\n' || c == '\t' || c == '\r';
}

bool starts_with(std::string_view s, std::string_view prefix) {
  return s.substr(0, prefix.size()) == prefix;
}

constexpr std::string_view kHarmonyMessage = "<|message|>";
constexpr std::string_view kHarmonyChannel = "<|channel|>";
constexpr std::string_view kHarmonyStart = "<|start|>";
// What ends a Harmony message body (<|call|> and <|return|> are end-of-generation tokens that
// usually stop the engine before they reach the text).
constexpr std::array<std::string_view, 4> kHarmonyTerminators = {"<|end|>", "<|call|>",
                                                                 "<|return|>", "<|start|>"};
constexpr size_t kMaxHarmonyHeader = 512;

}  // namespace

std::string_view reasoning_format_name(ReasoningFormat format) {
  switch (format) {
    case ReasoningFormat::kNone:
      return "none";
    case ReasoningFormat::kThink:
      return "think";
    case ReasoningFormat::kHarmony:
      return "harmony";
  }
  return "none";
}

ReasoningFormat detect_reasoning_format(std::string_view source) {
  if (source.find(kHarmonyChannel) != std::string_view::npos) return ReasoningFormat::kHarmony;
  if (source.find(kThinkOpen) != std::string_view::npos ||
      source.find(kThinkClose) != std::string_view::npos)
    return ReasoningFormat::kThink;
  return ReasoningFormat::kNone;
}

bool prompt_opens_reasoning(ReasoningFormat format, std::string_view prompt) {
  if (format != ReasoningFormat::kThink) return false;
  while (!prompt.empty() && is_space(prompt.back())) prompt.remove_suffix(1);
  return prompt.size() >= kThinkOpen.size() &&
         prompt.substr(prompt.size() - kThinkOpen.size()) == kThinkOpen;
}

std::string_view reasoning_close_text(ReasoningFormat format) {
  switch (format) {
    case ReasoningFormat::kNone:
      return "";
    case ReasoningFormat::kThink:
      return "\n</think>\n\n";
    case ReasoningFormat::kHarmony:  // the model (or a grammar) picks the next channel
      return "<|end|><|start|>assistant";
  }
  return "";
}

MessageParser::MessageParser(ReasoningFormat reasoning, bool opens_in_reasoning,
                             ToolCallFormat tools, std::shared_ptr<const ToolParamTypes> types)
    : MessageParser(reasoning, opens_in_reasoning, tools,
                    (uint64_t(std::random_device{}()) << 32) ^ std::random_device{}(),
                    std::move(types)) {}

MessageParser::MessageParser(ReasoningFormat reasoning, bool opens_in_reasoning,
                             ToolCallFormat tools, uint64_t id_seed,
                             std::shared_ptr<const ToolParamTypes> types)
    : format_(reasoning),
      mode_(Mode::kAnswer),
      // Harmony writes its own tool calls (commentary to=functions.NAME).
      tools_(reasoning == ReasoningFormat::kHarmony ? ToolCallFormat::kNone : tools, id_seed,
             std::move(types)),
      rng_(id_seed ^ 0x9E3779B97F4A7C15ull) {
  if (format_ == ReasoningFormat::kThink)
    mode_ = opens_in_reasoning ? Mode::kReasoning : Mode::kStart;
  if (format_ == ReasoningFormat::kHarmony) mode_ = Mode::kHarmonyHeader;
}

bool MessageParser::in_reasoning() const {
  return mode_ == Mode::kReasoning || (mode_ == Mode::kHarmonyBody && body_ == Body::kReasoning);
}

std::vector<ToolCallEvent> MessageParser::feed(std::string_view text) {
  out_.clear();
  size_t i = 0;
  for (; i < text.size() && mode_ != Mode::kAnswer; ++i) byte(text[i]);
  if (i < text.size()) answer(text.substr(i));
  return std::move(out_);
}

std::vector<ToolCallEvent> MessageParser::finish() {
  out_.clear();
  switch (mode_) {
    case Mode::kStart:
      answer(ws_ + held_);
      break;
    case Mode::kReasoning: {
      const std::string held = std::move(held_);
      held_.clear();
      if (!held.empty()) {
        reasoning_flush_ws();
        reasoning(held);
      }
      break;
    }
    case Mode::kAfterClose:
    case Mode::kAnswer:
      break;
    case Mode::kHarmonyHeader:
      // A header that never reached <|message|>: what the model wrote, as text.
      if (!header_.empty()) answer(header_);
      break;
    case Mode::kHarmonyBody: {
      // A held prefix of a terminator is body text now.
      const std::string held = std::move(held_);
      held_.clear();
      harmony_text(held);
      end_harmony_message();
      break;
    }
  }
  mode_ = Mode::kAnswer;
  for (ToolCallEvent& e : tools_.finish()) out_.push_back(std::move(e));
  return std::move(out_);
}

void MessageParser::byte(char c) {
  switch (mode_) {
    case Mode::kStart:
    case Mode::kReasoning:
    case Mode::kAfterClose:
      return think_byte(c);
    case Mode::kHarmonyHeader:
      return harmony_header_byte(c);
    case Mode::kHarmonyBody:
      return harmony_body_byte(c);
    case Mode::kAnswer:
      return answer(std::string_view(&c, 1));
  }
}

void MessageParser::think_byte(char c) {
  switch (mode_) {
    case Mode::kStart: {
      if (held_.empty() && is_space(c)) {
        ws_ += c;
        return;
      }
      held_ += c;
      if (held_ == kThinkOpen) {
        held_.clear();
        ws_.clear();
        reasoning_started_ = false;
        mode_ = Mode::kReasoning;
        return;
      }
      if (starts_with(kThinkOpen, held_)) return;
      mode_ = Mode::kAnswer;
      std::string text = std::move(ws_) + std::move(held_);
      ws_.clear();
      held_.clear();
      return answer(text);
    }
    case Mode::kReasoning: {
      if (held_.empty() && c != '<') {
        if (is_space(c)) {
          if (reasoning_started_) ws_ += c;
          return;
        }
        reasoning_flush_ws();
        return reasoning(std::string_view(&c, 1));
      }
      held_ += c;
      if (held_ == kThinkClose) {
        held_.clear();
        ws_.clear();
        mode_ = Mode::kAfterClose;
        return;
      }
      if (starts_with(kThinkClose, held_)) return;
      // Not the marker: its first byte is reasoning, the rest is looked at again.
      const std::string rest = held_.substr(1);
      held_.clear();
      reasoning_flush_ws();
      reasoning("<");
      for (char r : rest) think_byte(r);
      return;
    }
    case Mode::kAfterClose:
      if (is_space(c)) return;
      mode_ = Mode::kAnswer;
      return answer(std::string_view(&c, 1));
    default:
      return;
  }
}

void MessageParser::reasoning_flush_ws() {
  if (ws_.empty()) return;
  const std::string ws = std::move(ws_);
  ws_.clear();
  reasoning(ws);
}

void MessageParser::reasoning(std::string_view text) {
  if (text.empty()) return;
  reasoning_started_ = true;
  if (!out_.empty() && out_.back().kind == ToolCallEvent::Kind::kReasoning) {
    out_.back().text += text;
    return;
  }
  ToolCallEvent e;
  e.kind = ToolCallEvent::Kind::kReasoning;
  e.text = std::string(text);
  out_.push_back(std::move(e));
}

void MessageParser::answer(std::string_view text) {
  if (text.empty()) return;
  for (ToolCallEvent& e : tools_.feed(text)) out_.push_back(std::move(e));
}

void MessageParser::harmony_header_byte(char c) {
  if (header_.empty() && c != '<' && c != ' ') {
    // No header: the model answers in plain text.
    mode_ = Mode::kAnswer;
    return answer(std::string_view(&c, 1));
  }
  header_ += c;
  if (header_.size() > kMaxHarmonyHeader) {
    mode_ = Mode::kAnswer;
    const std::string text = std::move(header_);
    header_.clear();
    return answer(text);
  }
  if (header_.size() >= kHarmonyMessage.size() &&
      std::string_view(header_).substr(header_.size() - kHarmonyMessage.size()) == kHarmonyMessage)
    begin_harmony_body();
}

void MessageParser::begin_harmony_body() {
  std::string_view h = header_;
  auto word_after = [&](std::string_view key) -> std::string {
    const size_t at = h.find(key);
    if (at == std::string_view::npos) return "";
    size_t end = at + key.size();
    while (end < h.size() && !is_space(h[end]) && h[end] != '<') ++end;
    return std::string(h.substr(at + key.size(), end - at - key.size()));
  };
  const std::string channel = word_after(kHarmonyChannel);
  const std::string recipient = word_after("to=");
  constexpr std::string_view kFunctions = "functions.";
  reasoning_started_ = false;
  ws_.clear();
  if (starts_with(recipient, kFunctions) && recipient.size() > kFunctions.size()) {
    body_ = Body::kCall;
    call_index_ = n_harmony_calls_++;
    ToolCallEvent e;
    e.kind = ToolCallEvent::Kind::kCallBegin;
    e.index = call_index_;
    e.id = make_tool_call_id(rng_, 0);
    e.name = recipient.substr(kFunctions.size());
    out_.push_back(std::move(e));
  } else if (channel == "analysis") {
    body_ = Body::kReasoning;
  } else {
    body_ = Body::kContent;
  }
  header_.clear();
  mode_ = Mode::kHarmonyBody;
}

void MessageParser::harmony_text(std::string_view text) {
  if (text.empty()) return;
  switch (body_) {
    case Body::kReasoning:
      for (char c : text) {
        if (is_space(c)) {
          if (reasoning_started_) ws_ += c;
          continue;
        }
        reasoning_flush_ws();
        reasoning(std::string_view(&c, 1));
      }
      return;
    case Body::kContent:
      return answer(text);
    case Body::kCall:
      if (!out_.empty() && out_.back().kind == ToolCallEvent::Kind::kArguments &&
          out_.back().index == call_index_) {
        out_.back().text += text;
        return;
      }
      ToolCallEvent e;
      e.kind = ToolCallEvent::Kind::kArguments;
      e.index = call_index_;
      e.text = std::string(text);
      out_.push_back(std::move(e));
      return;
  }
}

void MessageParser::harmony_body_byte(char c) {
  if (held_.empty() && c != '<') return harmony_text(std::string_view(&c, 1));
  held_ += c;
  bool prefix = false;
  for (std::string_view t : kHarmonyTerminators) {
    if (held_ == t) {
      held_.clear();
      end_harmony_message();
      mode_ = Mode::kHarmonyHeader;
      if (t == kHarmonyStart) header_ = std::string(kHarmonyStart);
      return;
    }
    prefix |= starts_with(t, held_);
  }
  if (prefix) return;
  // Not a terminator: its first byte is body text, the rest is looked at again.
  const std::string rest = held_.substr(1);
  held_.clear();
  harmony_text("<");
  for (char r : rest) harmony_body_byte(r);
}

void MessageParser::end_harmony_message() {
  ws_.clear();
  if (body_ == Body::kCall) {
    ToolCallEvent e;
    e.kind = ToolCallEvent::Kind::kCallEnd;
    e.index = call_index_;
    out_.push_back(std::move(e));
  }
  body_ = Body::kContent;
}

}  // namespace sluice
