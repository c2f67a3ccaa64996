// The table of supported architecture families. Each family's file (arch_<name>.cpp) defines
// one ArchFamily: the general.architecture names it handles, what it adds to the generic
// metadata reading in config.cpp (rope style, biases, q/k norms, quirks of its converters) and
// its forward pass (forward.h).
#pragma once

#include <span>
#include <string_view>

#include "base/status.h"
#include "gguf/gguf.h"
#include "model/config.h"
#include "model/forward.h"

namespace sluice {

struct ArchFamily {
  Arch arch;
  std::span<const std::string_view> names;  // general.architecture values
  // Called after the generic keys are read into `config`; sets the family's flags and may
  // reject the file (errors name the key or tensor).
  Status (*configure)(const GgufFile& file, ModelConfig& config);
  // One step over the ops (forward.h).
  void (*forward)(const ModelConfig& config, const ModelWeights& weights, ForwardOps& ops);
  // Which layers a sliding window applies to (ModelShape::swa_period, set before configure):
  // 0 every layer; n: all but every n-th (gemma2, gpt-oss: 2; gemma3: 6).
  int swa_period = 0;
};

// The family that handles general.architecture `name` (nullptr: unsupported). Also how a synth
// preset (model/presets.h) gets its architecture's swa_period.
const ArchFamily* find_arch_family(std::string_view name);

// The family of a configured architecture.
const ArchFamily& arch_family(Arch arch);

const ArchFamily& llama_family();
const ArchFamily& qwen2_family();
const ArchFamily& qwen3_family();
const ArchFamily& gemma_family();
const ArchFamily& gemma2_family();
const ArchFamily& gemma3_family();
const ArchFamily& phi3_family();
const ArchFamily& qwen2moe_family();
const ArchFamily& qwen3moe_family();
const ArchFamily& qwen35_family();
const ArchFamily& gpt_oss_family();
const ArchFamily& bert_family();
const ArchFamily& gemma4_family();

}  // namespace sluice
