// libFuzzer target: the streaming tool-call parser over arbitrary model output. The first byte
// picks the family and the chunking; the text is parsed whole and in chunks, and the events
// (adjacent content and arguments merged) must be the same and well formed: each call begins,
// streams arguments and ends (or fails) before the next, with indices 0, 1, ...
//
//   scripts/fuzz 60 tool_calls_fuzz
// A good seed corpus: the texts of tests/template/template_tool_calls_test.cpp.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>
#include <vector>

#include "template/tool_calls.h"

namespace {

using sluice::ToolCallEvent;
using Kind = ToolCallEvent::Kind;

std::vector<ToolCallEvent> parse(sluice::ToolCallFormat format, std::string_view text,
                                 size_t chunk) {
  sluice::ToolCallParser parser(format, 1);
  std::vector<ToolCallEvent> out;
  auto add = [&](std::vector<ToolCallEvent> events) {
    for (ToolCallEvent& e : events) {
      if (!out.empty() && out.back().kind == e.kind && out.back().index == e.index &&
          (e.kind == Kind::kContent || e.kind == Kind::kArguments)) {
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

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const auto format = static_cast<sluice::ToolCallFormat>(data[0] % 5);
  const size_t chunk = 1 + (data[0] >> 2) % 7;
  const std::string_view text(reinterpret_cast<const char*>(data + 1), size - 1);
  const std::vector<ToolCallEvent> whole = parse(format, text, text.size() + 1);
  if (parse(format, text, chunk) != whole) std::abort();
  int open = -1, next = 0;
  std::string content;
  for (const ToolCallEvent& e : whole) {
    switch (e.kind) {
      case Kind::kContent:
        if (open != -1) std::abort();
        content += e.text;
        break;
      case Kind::kCallBegin:
        if (open != -1 || e.index != next) std::abort();
        open = next++;
        break;
      case Kind::kArguments:
        if (e.index != open) std::abort();
        break;
      case Kind::kCallEnd:
      case Kind::kInvalidCall:
        if (e.index != open) std::abort();
        open = -1;
        break;
      case Kind::kReasoning:  // MessageParser only
        std::abort();
    }
  }
  if (open != -1) std::abort();
  if (format == sluice::ToolCallFormat::kNone && content != text) std::abort();
  return 0;
}
