// Whole-file model conversions: `sluice synth` (a model with real shapes and seeded random
// weights) and `sluice quantize` (re-encode every tensor with a llama.cpp file-type recipe).
// Both stream tensor by tensor: memory stays at one tensor's encoded bytes.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "base/status.h"
#include "gguf/gguf.h"
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

// How the values of one synthetic tensor are made: N(0, 0.02), all 1 (norm weights, scales),
// the rope frequency factors, all -1 (ssm_a).
enum class SynthInit { kNormal, kOnes, kRopeFactors, kMinusOnes };

// One tensor `sluice synth` writes.
struct SynthTensor {
  std::string name;
  std::vector<int64_t> ne;
  SynthInit init = SynthInit::kNormal;
  GgmlType type = GgmlType::F32;  // as the file type's recipe chooses (plan_synth)
  uint64_t bytes = 0;             // encoded, without alignment padding
  int64_t n_rows() const {
    int64_t n = 1;  // every dimension past the first (3-D expert tensors: rows x experts)
    for (size_t d = 1; d < ne.size(); ++d) n *= ne[d];
    return n;
  }
};

// What synthesize_model writes, without generating any tensor data: the metadata (tokenizer
// included; a writer holding no tensors) and every tensor in file order with its type. Tests
// check a multi-GB preset's keys and tensor directory through it.
struct SynthPlan {
  GgufWriter metadata;
  std::vector<SynthTensor> tensors;
  std::vector<float> rope_factors;  // the rope_freqs tensor's values, if it has one
};

Result<SynthPlan> plan_synth(const SynthParams& params);

// Weights ~ N(0, 0.02) from a counter-based RNG keyed by (seed, tensor name, row), so the same
// seed gives the same file whatever the thread count. Norm weights and gemma4's layer output
// scales are 1.0; rope frequency factors (llama3's, gemma4's proportional RoPE) are computed,
// not random.
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
