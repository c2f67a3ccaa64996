// Whole-file model conversions: `sluice synth` (a model with real shapes and seeded random
// weights) and `sluice quantize` (re-encode every tensor with a llama.cpp file-type recipe).
// Both stream tensor by tensor: memory stays at one tensor's encoded bytes.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "base/status.h"
#include "gguf/types.h"
#include "model/presets.h"
#include "model/quant_recipe.h"

namespace sluice {

// One line of the per-tensor report.
struct TensorConversion {
  std::string name;
  std::string shape;
  GgmlType from = GgmlType::F32;  // synth: F32 (the generated values)
  GgmlType to = GgmlType::F32;
  uint64_t bytes_from = 0;
  uint64_t bytes_to = 0;
};

struct ConvertCallbacks {
  std::function<void(uint64_t done, uint64_t total)> progress;  // bytes of output written
  std::function<void(const TensorConversion&)> on_tensor;       // once per tensor, in file order
};

struct SynthParams {
  const ModelPreset* preset = nullptr;
  FileType ftype = FileType::MOSTLY_F16;
  std::string vocab_path;  // GGUF whose tokenizer.* metadata is copied; empty: byte-level SPM
  uint64_t seed = 0;
  int n_threads = 0;  // 0: hardware concurrency
  std::string out_path;
};

// Weights ~ N(0, 0.02) from a counter-based RNG keyed by (seed, tensor name, row), so the same
// seed gives the same file whatever the thread count. Norm weights are 1.0; llama3 rope
// frequency factors are computed, not random.
Status synthesize_model(const SynthParams& params, const ConvertCallbacks& cb = {});

struct QuantizeParams {
  std::string in_path;
  std::string out_path;
  FileType ftype = FileType::MOSTLY_Q8_0;
  int n_threads = 0;
  bool allow_requantize = false;  // accept already-quantized input tensors
};

Status quantize_model(const QuantizeParams& params, const ConvertCallbacks& cb = {});

// The deterministic N(0, 1) stream `sluice synth` uses for row `row` of tensor `name`
// (exposed so tests can regenerate the f32 originals).
void synth_normal_row(uint64_t seed, const std::string& name, int64_t row, float* out, int64_t n);

}  // namespace sluice
