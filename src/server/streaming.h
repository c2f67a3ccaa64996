// Serving one parsed generation request: submit its choices to the engine thread, then either
// stream Server-Sent Events or answer one JSON object.
//
// Streaming wire format (one TCP write per engine step that produced output):
//
//   data: {"object": "chat.completion.chunk", "choices": [{"index": 0, "delta": {"role": ...}}]}
//
//   data: {... "delta": {"content": " there"} ...}
//   ...
//   data: {... "delta": {}, "finish_reason": "length"}
//   data: {... "choices": [], "usage": {...}}      (stream_options.include_usage)
//   data: [DONE]
//
// The stream is written by a single call of httplib's chunked content provider that runs until
// the job ends, so a server stop() (which makes httplib stop calling providers) never cuts an
// in-flight stream short. A failed write means the client is gone: the job is cancelled and the
// call waits for the engine thread's acknowledgement before the connection closes.
#pragma once

#include <httplib.h>

#include <functional>
#include <nlohmann/json.hpp>
#include <vector>

#include "server/engine_bridge.h"
#include "server/metrics.h"
#include "server/openai_request.h"

namespace sluice::server {

// What disaggregated serving adds to a generation (server/kv_tiers.h).
struct GenerationExtras {
  std::vector<PrefixImport> imports;  // K/V brought in for the prompts (GenerationJob::imports)
  bool pin_prompt = false;            // GenerationJob::pin_prompt
  // Adds fields to the whole (non-streamed) answer once the job is done: kv_transfer_params.
  std::function<void(const RequestChannel&, nlohmann::ordered_json&)> decorate;
};

void serve_generation(CompletionRequest request, const ModelContext& model, EngineBridge& bridge,
                      ServerMetrics& metrics, httplib::Response& res, GenerationExtras extras = {});

}  // namespace sluice::server
