#include "model/config.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>

#include "base/log.h"
#include "model/arch.h"

namespace sluice {
namespace {

std::array<const ArchFamily*, 13> families() {
  return {&llama_family(),    &qwen2_family(),  &qwen3_family(),   &gemma_family(),
          &gemma2_family(),   &gemma3_family(), &phi3_family(),    &qwen2moe_family(),
          &qwen3moe_family(), &qwen35_family(), &gpt_oss_family(), &bert_family(),
          &gemma4_family()};
}

}  // namespace

const ArchFamily* find_arch_family(std::string_view name) {
  for (const ArchFamily* f : families()) {
    for (std::string_view n : f->names) {
      if (n == name) return f;
    }
  }
  return nullptr;
}

const ArchFamily& arch_family(Arch arch) {
  for (const ArchFamily* f : families()) {
    if (f->arch == arch) return *f;
  }
  return llama_family();  // unreachable: every Arch has a family
}

namespace {

// A positive int key; `fallback` (when >= 0) stands in for a missing key.
Result<int> read_count(const GgufFile& f, const std::string& key, int64_t fallback = -1) {
  if (!f.has(key) && fallback >= 0) return int(fallback);
  SLUICE_ASSIGN_OR_RETURN(const int64_t v, f.get_int(key));
  if (v <= 0 || v > std::numeric_limits<int32_t>::max()) {
    return make_error("'", f.path(), "': metadata key '", key, "' = ", v,
                      " is out of range (expected a positive 32-bit count)");
  }
  return int(v);
}

Result<float> read_real(const GgufFile& f, const std::string& key, double fallback, bool required) {
  if (!f.has(key)) {
    if (required) return make_error("'", f.path(), "': metadata key '", key, "' not found");
    return float(fallback);
  }
  SLUICE_ASSIGN_OR_RETURN(const double v, f.get_float(key));
  if (!std::isfinite(v) || v <= 0) {
    return make_error("'", f.path(), "': metadata key '", key, "' = ", v,
                      " must be a positive number");
  }
  return float(v);
}

// attention.sliding_window: absent or 0 means none.
Result<int> read_window(const GgufFile& f, const std::string& key) {
  if (!f.has(key)) return 0;
  SLUICE_ASSIGN_OR_RETURN(const int64_t v, f.get_int(key));
  if (v < 0 || v > std::numeric_limits<int32_t>::max()) {
    return make_error("'", f.path(), "': metadata key '", key, "' = ", v,
                      " is out of range (expected a window of 0 or more positions)");
  }
  return int(v);
}

// A window larger than the trained context masks nothing a run within it computes. On a model
// windowed on every layer (phi3: Phi-3-mini-128k writes 262144 for a context of 131072) that only
// means no window: dropped, and said so. On one alternating windowed and global layers (gemma,
// gpt-oss) the window is what sets the layer kinds apart: a mis-converted file, refused.
Status check_window(const GgufFile& f, const std::string& a, ModelConfig& c) {
  if (c.sliding_window <= 0 || c.sliding_window <= c.n_ctx_train) return {};
  bool mixed = false;
  for (int il = 0; il < c.n_layer && !mixed; ++il) {
    mixed = c.layer_kind(il) == LayerKind::kGlobal;
  }
  if (mixed) {
    return make_error("'", f.path(), "': ", a, ".attention.sliding_window ", c.sliding_window,
                      " is larger than the trained context of ", c.n_ctx_train, " (", a,
                      ".context_length): the windowed layers would attend like the global ones "
                      "(a mis-converted file?)");
  }
  SLUICE_LOG(kInfo, "'" + f.path() + "': " + a + ".attention.sliding_window " +
                        std::to_string(c.sliding_window) + " exceeds the trained context of " +
                        std::to_string(c.n_ctx_train) + ": no window");
  c.sliding_window = 0;
  return {};
}

// Mixture of experts: expert_count (absent: dense), expert_used_count, the expert width
// (expert_feed_forward_length, else feed_forward_length) and the shared expert's.
Status read_experts(const GgufFile& f, const std::string& a, ModelConfig& c) {
  SLUICE_ASSIGN_OR_RETURN(c.n_expert, read_window(f, a + ".expert_count"));
  if (c.n_expert == 0) return {};
  SLUICE_ASSIGN_OR_RETURN(c.n_expert_used, read_count(f, a + ".expert_used_count"));
  if (c.n_expert_used > c.n_expert) {
    return make_error("'", f.path(), "': ", a, ".expert_used_count (", c.n_expert_used,
                      ") exceeds ", a, ".expert_count (", c.n_expert, ")");
  }
  if (c.n_expert_used > ModelConfig::kMaxExpertsUsed) {
    return make_error("'", f.path(), "': ", a, ".expert_used_count (", c.n_expert_used,
                      ") is more than the ", ModelConfig::kMaxExpertsUsed,
                      " experts per token supported");
  }
  SLUICE_ASSIGN_OR_RETURN(c.n_ff_exp, read_count(f, a + ".expert_feed_forward_length", c.n_ff));
  SLUICE_ASSIGN_OR_RETURN(c.n_ff_shexp, read_window(f, a + ".expert_shared_feed_forward_length"));
  return {};
}

// None, linear or YaRN rope scaling; others are rejected rather than silently ignored.
Status read_rope_scaling(const GgufFile& f, const std::string& a, ModelConfig& c) {
  const std::string type_key = a + ".rope.scaling.type";
  SLUICE_ASSIGN_OR_RETURN(const std::string type, f.get_or<std::string>(type_key, "none"));
  if (type == "none") {
    // Older files: rope.scale_linear holds the linear factor directly.
    SLUICE_ASSIGN_OR_RETURN(const float linear, read_real(f, a + ".rope.scale_linear", 1.0, false));
    c.rope_freq_scale = 1.0f / linear;
    return {};
  }
  if (type == "linear") {
    SLUICE_ASSIGN_OR_RETURN(const float factor,
                            read_real(f, a + ".rope.scaling.factor", 1.0, true));
    c.rope_freq_scale = 1.0f / factor;
    return {};
  }
  if (type == "yarn") {
    SLUICE_ASSIGN_OR_RETURN(const float factor,
                            read_real(f, a + ".rope.scaling.factor", 1.0, true));
    c.rope_freq_scale = 1.0f / factor;
    c.rope_yarn = true;
    SLUICE_ASSIGN_OR_RETURN(
        c.yarn_n_ctx_orig,
        read_count(f, a + ".rope.scaling.original_context_length", c.n_ctx_train));
    SLUICE_ASSIGN_OR_RETURN(c.yarn_beta_fast,
                            read_real(f, a + ".rope.scaling.yarn_beta_fast", 32.0, false));
    SLUICE_ASSIGN_OR_RETURN(c.yarn_beta_slow,
                            read_real(f, a + ".rope.scaling.yarn_beta_slow", 1.0, false));
    return {};
  }
  return make_error("'", f.path(), "': metadata key '", type_key, "' = '", type,
                    "' is not supported (supported: none, linear, yarn)");
}

}  // namespace

const char* pooling_name(Pooling p) {
  switch (p) {
    case Pooling::kNone:
      return "none";
    case Pooling::kMean:
      return "mean";
    case Pooling::kCls:
      return "cls";
    case Pooling::kLast:
      return "last";
    case Pooling::kRank:
      return "rank";
  }
  return "none";
}

std::optional<Pooling> parse_pooling(std::string_view name) {
  for (Pooling p :
       {Pooling::kNone, Pooling::kMean, Pooling::kCls, Pooling::kLast, Pooling::kRank}) {
    if (name == pooling_name(p)) return p;
  }
  return std::nullopt;
}

std::string supported_architectures() {
  std::string s;
  for (const ArchFamily* f : families()) {
    for (std::string_view n : f->names) {
      if (!s.empty()) s += ", ";
      s += n;
    }
  }
  return s;
}

Result<ModelConfig> read_model_config(const GgufFile& f, const ModelOptions& options) {
  ModelConfig c;
  SLUICE_ASSIGN_OR_RETURN(c.arch_name, f.get<std::string>("general.architecture"));
  const ArchFamily* family = find_arch_family(c.arch_name);
  if (!family) {
    return make_error("'", f.path(), "': unsupported architecture '", c.arch_name,
                      "' (general.architecture; supported: ", supported_architectures(), ")");
  }
  c.arch = family->arch;
  const std::string& a = c.arch_name;

  SLUICE_ASSIGN_OR_RETURN(c.n_layer, read_count(f, a + ".block_count"));
  SLUICE_ASSIGN_OR_RETURN(c.n_embd, read_count(f, a + ".embedding_length"));
  // MoE files may carry only the experts' width (qwen35moe): the dense width defaults to it.
  int64_t ff_default = -1;
  if (!f.has(a + ".feed_forward_length") && f.has(a + ".expert_feed_forward_length")) {
    SLUICE_ASSIGN_OR_RETURN(ff_default, f.get_int(a + ".expert_feed_forward_length"));
  }
  SLUICE_ASSIGN_OR_RETURN(c.n_ff, read_count(f, a + ".feed_forward_length", ff_default));
  SLUICE_ASSIGN_OR_RETURN(c.n_head, read_count(f, a + ".attention.head_count"));
  const std::string kv_heads_key = a + ".attention.head_count_kv";
  const GgufValue* kv_heads = f.find(kv_heads_key);
  if (kv_heads && kv_heads->get_if<GgufArray>()) {
    // One count per layer (gemma4): n_kv_head is the largest; the family checks it may.
    SLUICE_ASSIGN_OR_RETURN(const std::vector<int64_t> counts, f.get_int_array(kv_heads_key));
    if (int64_t(counts.size()) != c.n_layer) {
      return make_error("'", f.path(), "': ", kv_heads_key, " has ", counts.size(), " entries for ",
                        c.n_layer, " layers (", a, ".block_count)");
    }
    for (size_t il = 0; il < counts.size(); ++il) {
      if (counts[il] <= 0 || c.n_head % counts[il] != 0) {
        return make_error("'", f.path(), "': ", kv_heads_key, "[", il, "] = ", counts[il],
                          " does not divide ", a, ".attention.head_count (", c.n_head, ")");
      }
      c.layer_n_kv_heads.push_back(int(counts[il]));
      c.n_kv_head = std::max(c.n_kv_head, int(counts[il]));
    }
  } else {
    SLUICE_ASSIGN_OR_RETURN(c.n_kv_head, read_count(f, kv_heads_key, c.n_head));
  }
  SLUICE_ASSIGN_OR_RETURN(c.n_ctx_train, read_count(f, a + ".context_length"));
  if (c.n_head % c.n_kv_head != 0) {
    return make_error("'", f.path(), "': ", a, ".attention.head_count (", c.n_head,
                      ") is not a multiple of ", a, ".attention.head_count_kv (", c.n_kv_head, ")");
  }
  const std::string key_len = a + ".attention.key_length";
  if (!f.has(key_len) && c.n_embd % c.n_head != 0) {
    return make_error("'", f.path(), "': ", a, ".embedding_length (", c.n_embd,
                      ") is not a multiple of the head count (", c.n_head, ") and ", key_len,
                      " is missing");
  }
  SLUICE_ASSIGN_OR_RETURN(c.head_dim, read_count(f, key_len, c.n_embd / c.n_head));
  // The attention widths (q_dim, kv_dim <= q_dim) are ints: model_fuzz found a head count whose
  // product with the key length overflowed one.
  if (int64_t(c.n_head) * c.head_dim > std::numeric_limits<int32_t>::max()) {
    return make_error("'", f.path(), "': ", a, ".attention.head_count (", c.n_head, ") x ", key_len,
                      " (", c.head_dim, ") is beyond a 32-bit width");
  }
  SLUICE_ASSIGN_OR_RETURN(const int v_len,
                          read_count(f, a + ".attention.value_length", c.head_dim));
  if (v_len != c.head_dim) {
    return make_error("'", f.path(), "': ", a, ".attention.value_length (", v_len,
                      ") differs from key_length (", c.head_dim, "); not supported");
  }
  SLUICE_ASSIGN_OR_RETURN(c.n_rot, read_count(f, a + ".rope.dimension_count", c.head_dim));
  if (c.n_rot % 2 != 0 || c.n_rot > c.head_dim) {
    return make_error("'", f.path(), "': ", a, ".rope.dimension_count (", c.n_rot,
                      ") must be even and at most the head size (", c.head_dim, ")");
  }
  SLUICE_ASSIGN_OR_RETURN(c.rope_theta, read_real(f, a + ".rope.freq_base", 10000.0, false));
  SLUICE_RETURN_IF_ERROR(read_rope_scaling(f, a, c));
  // Encoders (bert) name their LayerNorm's epsilon layer_norm_epsilon.
  const std::string eps_key = c.arch == Arch::kBert ? a + ".attention.layer_norm_epsilon"
                                                    : a + ".attention.layer_norm_rms_epsilon";
  SLUICE_ASSIGN_OR_RETURN(c.rms_eps, read_real(f, eps_key, 0.0, true));
  c.tied_embeddings = f.find_tensor("output.weight") == nullptr;
  SLUICE_ASSIGN_OR_RETURN(c.sliding_window, read_window(f, a + ".attention.sliding_window"));
  SLUICE_ASSIGN_OR_RETURN(c.rope_attn_factor,
                          read_real(f, a + ".rope.scaling.attn_factor", 1.0, false));

  if (options.n_ctx < 0) return make_error("context length ", options.n_ctx, " is negative");
  c.n_ctx = options.n_ctx > 0 ? options.n_ctx : c.n_ctx_train;
  if (c.n_ctx > c.n_ctx_train) {
    if (!options.allow_context_beyond_trained) {
      return make_error("'", f.path(), "': context length ", c.n_ctx,
                        " exceeds the trained context of ", c.n_ctx_train, " (", a,
                        ".context_length); allow it explicitly to run beyond it");
    }
    SLUICE_LOG(kWarn, make_error("'", f.path(), "': running with context ", c.n_ctx,
                                 " beyond the trained context of ", c.n_ctx_train,
                                 "; output quality may degrade past it")
                          .message);
  }

  if (c.arch == Arch::kBert && c.n_ctx > c.n_ctx_train) {
    return make_error("'", f.path(), "': context length ", c.n_ctx, " exceeds the ", c.n_ctx_train,
                      " learned positions of this encoder (", a, ".context_length)");
  }
  SLUICE_RETURN_IF_ERROR(read_experts(f, a, c));

  // Frequency factors: LongRoPE's pair (chosen by the context this instance runs) or llama 3's.
  const bool long_rope = f.find_tensor("rope_factors_long.weight") != nullptr;
  if (long_rope != (f.find_tensor("rope_factors_short.weight") != nullptr)) {
    return make_error("'", f.path(), "': LongRoPE needs both rope_factors_long.weight and ",
                      "rope_factors_short.weight; the file has one");
  }
  if (long_rope) {
    SLUICE_ASSIGN_OR_RETURN(
        const int n_ctx_orig,
        read_count(f, a + ".rope.scaling.original_context_length", c.n_ctx_train));
    c.rope_factors_tensor =
        c.n_ctx > n_ctx_orig ? "rope_factors_long.weight" : "rope_factors_short.weight";
  } else if (f.find_tensor("rope_freqs.weight")) {
    c.rope_factors_tensor = "rope_freqs.weight";
  }
  c.has_rope_freqs = !c.rope_factors_tensor.empty();
  if (c.rope_attn_factor != 1.0f && c.n_rot != c.head_dim) {
    return make_error(
        "'", f.path(), "': ", a, ".rope.scaling.attn_factor with a partial rotation (", a,
        ".rope.dimension_count ", c.n_rot, " < head size ", c.head_dim, ") is not supported");
  }

  c.swa_period = family->swa_period;
  SLUICE_RETURN_IF_ERROR(family->configure(f, c));
  SLUICE_RETURN_IF_ERROR(check_window(f, a, c));
  if (!c.layer_n_kv_heads.empty() && c.arch != Arch::kGemma4) {
    return make_error("'", f.path(), "': ", kv_heads_key, " is an array (a KV head count per ",
                      "layer), which sluice reads for gemma4 only");
  }

  const std::string pool_key = a + ".pooling_type";
  if (f.has(pool_key)) {
    SLUICE_ASSIGN_OR_RETURN(const int64_t pt, f.get_int(pool_key));
    if (pt < 0 || pt > int64_t(Pooling::kRank)) {
      return make_error("'", f.path(), "': metadata key '", pool_key, "' = ", pt,
                        " is not a pooling type (0 none, 1 mean, 2 cls, 3 last, 4 rank)");
    }
    c.pooling = Pooling(pt);
  }
  if (options.pooling) c.pooling = *options.pooling;
  return c;
}

KvCacheLayout ModelConfig::kv_cache_layout() const {
  std::vector<int32_t> windows(static_cast<size_t>(n_layer));
  for (int il = 0; il < n_layer; ++il) {
    windows[size_t(il)] = layer_kind(il) == LayerKind::kRecurrent ? -1 : layer_window(il);
  }
  return KvCacheLayout::from_windows(windows, layer_kv_source);
}

}  // namespace sluice
