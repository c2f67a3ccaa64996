// libFuzzer target: the MessageParser (template/reasoning.h) over arbitrary model output. The
// first byte picks the reasoning format, whether the prompt opened the reasoning, the tool-call
// family and the chunking; the text is parsed whole and in chunks, and the merged events must be
// the same and well formed: calls begin, stream arguments and end (or fail) in order, no content
// or reasoning inside a call, and nothing is lost: with no tool calls the reasoning and content
// are the text less markers and trimmed whitespace (every byte of them is in the text, in order).
//
//   scripts/fuzz 60 reasoning_fuzz
// Seeds: fuzz/seeds/reasoning_fuzz (think blocks, Harmony channels, calls after thinking).
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>
#include <vector>

#include "template/reasoning.h"

namespace {

using sluice::ToolCallEvent;
using Kind = ToolCallEvent::Kind;

struct Setup {
  sluice::ReasoningFormat reasoning;
  bool opens;
  sluice::ToolCallFormat tools;
};

std::vector<ToolCallEvent> parse(const Setup& s, std::string_view text, size_t chunk) {
  sluice::MessageParser parser(s.reasoning, s.opens, s.tools, 1);
  std::vector<ToolCallEvent> out;
  auto add = [&](std::vector<ToolCallEvent> events) {
    for (ToolCallEvent& e : events) {
      if (!out.empty() && out.back().kind == e.kind && out.back().index == e.index &&
          (e.kind == Kind::kContent || e.kind == Kind::kArguments || e.kind == Kind::kReasoning)) {
        out.back().text += e.text;
      } else {
        out.push_back(std::move(e));
      }
    }
  };
  for (size_t i = 0; i < text.size(); i += chunk) add(parser.feed(text.substr(i, chunk)));
  add(parser.finish());
  return out;
}

// Whether `part` is a subsequence of `text` (every byte of it, in order).
bool subsequence(std::string_view part, std::string_view text) {
  size_t at = 0;
  for (char c : part) {
    at = text.find(c, at);
    if (at == std::string_view::npos) return false;
    ++at;
  }
  return true;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  Setup s;
  s.reasoning = static_cast<sluice::ReasoningFormat>(data[0] % 3);
  s.opens = (data[0] >> 2) & 1;
  s.tools = static_cast<sluice::ToolCallFormat>((data[0] >> 3) % 5);
  const size_t chunk = 1 + (data[0] >> 5) % 7;
  const std::string_view text(reinterpret_cast<const char*>(data + 1), size - 1);
  const std::vector<ToolCallEvent> whole = parse(s, text, text.size() + 1);
  if (parse(s, text, chunk) != whole) std::abort();
  int open = -1;
  std::string reasoning, content;
  for (const ToolCallEvent& e : whole) {
    switch (e.kind) {
      case Kind::kContent:
      case Kind::kReasoning:
        if (open != -1 || e.text.empty()) std::abort();
        (e.kind == Kind::kContent ? content : reasoning) += e.text;
        break;
      case Kind::kCallBegin:
        if (open != -1) std::abort();
        open = e.index;
        break;
      case Kind::kArguments:
        if (e.index != open) std::abort();
        break;
      case Kind::kCallEnd:
      case Kind::kInvalidCall:
        if (e.index != open) std::abort();
        open = -1;
        break;
    }
  }
  if (open != -1) std::abort();
  if (!subsequence(reasoning, text) || !subsequence(content, text)) std::abort();
  return 0;
}
