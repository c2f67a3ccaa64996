// Reasoning in an assistant message: which syntax a model family thinks in, and one streaming
// parser that splits the model's text into reasoning, answer text and tool calls. Every API the
// server speaks (chat completions, Responses, Anthropic Messages) renders the same events.
//
//   kThink    (template mentions <think>; Qwen3 / Qwen3.5, DeepSeek-R1 and its distills)
//     <think>\nREASONING\n</think>\n\nANSWER          the answer is then parsed for tool calls
//     When the rendered prompt already ends in "<think>" (DeepSeek-R1's and Qwen3.5's
//     generation prompts), the model starts inside its reasoning (prompt_opens_reasoning).
//   kHarmony  (template mentions <|channel|>; gpt-oss)
//     <|channel|>analysis<|message|>REASONING<|end|>
//     <|start|>assistant<|channel|>commentary to=functions.NAME
//     <|constrain|>json<|message|>ARGS<|call|>
//     <|start|>assistant<|channel|>final<|message|>ANSWER<|return|>
//     analysis -> reasoning; final and commentary without a recipient -> answer text; a message
//     to=functions.NAME -> a tool call whose arguments are its body.
//
//   MessageParser parser(reasoning_format, opens, tool_format);
//   for (each text delta) for (const ToolCallEvent& e : parser.feed(delta)) send(e);
//   for (const ToolCallEvent& e : parser.finish()) send(e);
//
// Like ToolCallParser, a byte-at-a-time state machine: the concatenation of the reasoning
// (and of the content, and each call's arguments) does not depend on how the text is split.
// Whitespace right after the opening marker, right before the closing one and right after the
// reasoning ends is dropped (what llama-server and vLLM return).
#pragma once

#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include "template/tool_calls.h"

namespace sluice {

enum class ReasoningFormat : uint8_t { kNone, kThink, kHarmony };

// "none", "think", "harmony".
std::string_view reasoning_format_name(ReasoningFormat format);

// From the chat template source: "<|channel|>" -> kHarmony; "<think>" or "</think>" -> kThink;
// otherwise kNone.
ReasoningFormat detect_reasoning_format(std::string_view template_source);

// Whether a prompt rendered with add_generation_prompt leaves the model inside its reasoning:
// kThink and the prompt ends with "<think>" and optional whitespace.
bool prompt_opens_reasoning(ReasoningFormat format, std::string_view rendered_prompt);

// The markers of kThink, and what a budget-closed reasoning ends with (see
// GenerationParams::reasoning_budget).
inline constexpr std::string_view kThinkOpen = "<think>";
inline constexpr std::string_view kThinkClose = "</think>";
inline constexpr std::string_view kHarmonyAnalysis = "<|channel|>analysis<|message|>";
inline constexpr std::string_view kHarmonyFinal = "<|start|>assistant<|channel|>final<|message|>";
inline constexpr std::string_view kHarmonyEnd = "<|end|>";

// The text that ends the reasoning and starts the answer, written for the model when its
// reasoning budget is spent (kNone: "").
std::string_view reasoning_close_text(ReasoningFormat format);

class MessageParser {
 public:
  // Ids of tool calls from a random seed; the second form makes them reproducible (tests).
  // `types`: the offered tools' parameter types (ToolCallFormat::kQwenXml; may be null).
  MessageParser(ReasoningFormat reasoning, bool opens_in_reasoning, ToolCallFormat tools,
                std::shared_ptr<const ToolParamTypes> types = nullptr);
  MessageParser(ReasoningFormat reasoning, bool opens_in_reasoning, ToolCallFormat tools,
                uint64_t id_seed, std::shared_ptr<const ToolParamTypes> types = nullptr);

  // Events: kReasoning, kContent and the tool-call kinds (ToolCallEvent).
  std::vector<ToolCallEvent> feed(std::string_view text);
  // The end of the message: releases held text. An unclosed reasoning stays reasoning.
  std::vector<ToolCallEvent> finish();

  bool in_reasoning() const;

 private:
  enum class Mode : uint8_t {
    kStart,          // kThink: leading whitespace, maybe "<think>"
    kReasoning,      // kThink: inside <think>
    kAfterClose,     // kThink: whitespace after </think>
    kAnswer,         // the answer: fed to the tool-call parser
    kHarmonyHeader,  // kHarmony: a message header up to <|message|>
    kHarmonyBody,    // kHarmony: a message body up to its terminator
  };
  enum class Body : uint8_t { kReasoning, kContent, kCall };

  void byte(char c);
  void think_byte(char c);
  void harmony_header_byte(char c);
  void harmony_body_byte(char c);
  void harmony_text(std::string_view text);
  void begin_harmony_body();
  void end_harmony_message();
  void answer(std::string_view text);
  void reasoning(std::string_view text);
  void reasoning_flush_ws();

  ReasoningFormat format_;
  Mode mode_;
  ToolCallParser tools_;
  std::vector<ToolCallEvent> out_;
  std::string held_;                // a possible prefix of a marker
  std::string ws_;                  // reasoning whitespace held (dropped before the closing marker)
  bool reasoning_started_ = false;  // a non-space reasoning byte was emitted since opening

  // kHarmony.
  std::string header_;
  Body body_ = Body::kContent;
  int call_index_ = -1;
  int n_harmony_calls_ = 0;
  std::mt19937_64 rng_;
};

}  // namespace sluice
