#include "model/convert.h"

#include <algorithm>
#include <cmath>
#include <numbers>
#include <thread>
#include <vector>

#include "base/fnv1a.h"
#include "base/fp16.h"
#include "gguf/gguf.h"
#include "gguf/quants.h"

namespace sluice {
namespace {

uint64_t splitmix64(uint64_t& x) {
  uint64_t z = (x += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

int resolve_threads(int n) {
  if (n > 0) return n;
  return std::max(1u, std::thread::hardware_concurrency());
}

// Runs fn(row_begin, row_end) over [0, n_rows) split across threads; returns the first error.
Status parallel_rows(int64_t n_rows, int n_threads,
                     const std::function<Status(int64_t, int64_t)>& fn) {
  n_threads = int(std::min<int64_t>(n_threads, std::max<int64_t>(n_rows, 1)));
  if (n_threads <= 1) return fn(0, n_rows);
  std::vector<Status> status(static_cast<size_t>(n_threads));
  std::vector<std::thread> workers;
  const int64_t per = (n_rows + n_threads - 1) / n_threads;
  for (int t = 0; t < n_threads; ++t) {
    const int64_t b = std::min(n_rows, t * per), e = std::min(n_rows, b + per);
    workers.emplace_back([&, t, b, e] { status[size_t(t)] = fn(b, e); });
  }
  for (auto& w : workers) w.join();
  for (Status& s : status) {
    if (!s.ok()) return s;
  }
  return {};
}

// Encodes one f32 row as `type` (quantize_row handles every supported type).
Status encode_row(GgmlType type, const float* src, uint8_t* dst, int64_t n) {
  switch (type) {
    case GgmlType::F32:
      std::memcpy(dst, src, size_t(n) * 4);
      return {};
    case GgmlType::F16:
      for (int64_t i = 0; i < n; ++i) {
        const uint16_t h = f32_to_f16(src[i]);
        std::memcpy(dst + 2 * i, &h, 2);
      }
      return {};
    case GgmlType::BF16:
      for (int64_t i = 0; i < n; ++i) {
        const uint16_t h = f32_to_bf16(src[i]);
        std::memcpy(dst + 2 * i, &h, 2);
      }
      return {};
    default:
      return quantize_row(type, src, dst, n);
  }
}

Status decode_row(GgmlType type, const uint8_t* src, float* dst, int64_t n) {
  switch (type) {
    case GgmlType::F32:
      std::memcpy(dst, src, size_t(n) * 4);
      return {};
    case GgmlType::F16:
      for (int64_t i = 0; i < n; ++i) {
        uint16_t h;
        std::memcpy(&h, src + 2 * i, 2);
        dst[i] = f16_to_f32(h);
      }
      return {};
    case GgmlType::BF16:
      for (int64_t i = 0; i < n; ++i) {
        uint16_t h;
        std::memcpy(&h, src + 2 * i, 2);
        dst[i] = bf16_to_f32(h);
      }
      return {};
    default:
      return dequantize_row(type, src, dst, n);
  }
}

using Init = SynthInit;

// A BERT encoder's tensors (llama.cpp's names), with a classifier head for rank pooling.
std::vector<SynthTensor> synth_bert_tensors(const ModelPreset& p) {
  const int64_t d = p.n_embd, q = int64_t(p.n_head) * p.head_dim, ff = p.n_ff;
  std::vector<SynthTensor> t;
  t.push_back({"token_embd.weight", {d, p.n_vocab}});
  t.push_back({"position_embd.weight", {d, p.n_ctx}});
  t.push_back({"token_types.weight", {d, 2}});
  t.push_back({"token_embd_norm.weight", {d}, Init::kOnes});
  t.push_back({"token_embd_norm.bias", {d}});
  for (int i = 0; i < p.n_layer; ++i) {
    const std::string b = "blk." + std::to_string(i) + ".";
    for (const char* m : {"attn_q", "attn_k", "attn_v"}) {
      t.push_back({b + m + ".weight", {d, q}});
      t.push_back({b + m + ".bias", {q}});
    }
    t.push_back({b + "attn_output.weight", {q, d}});
    t.push_back({b + "attn_output.bias", {d}});
    t.push_back({b + "attn_output_norm.weight", {d}, Init::kOnes});
    t.push_back({b + "attn_output_norm.bias", {d}});
    t.push_back({b + "ffn_up.weight", {d, ff}});
    t.push_back({b + "ffn_up.bias", {ff}});
    t.push_back({b + "ffn_down.weight", {ff, d}});
    t.push_back({b + "ffn_down.bias", {d}});
    t.push_back({b + "layer_output_norm.weight", {d}, Init::kOnes});
    t.push_back({b + "layer_output_norm.bias", {d}});
  }
  if (p.pooling == 4) {
    t.push_back({"cls.weight", {d, d}});
    t.push_back({"cls.bias", {d}});
    t.push_back({"cls.output.weight", {d, p.n_cls_out}});
    t.push_back({"cls.output.bias", {p.n_cls_out}});
  }
  return t;
}

// A Gemma 4 text model's tensors (llama.cpp's names; arch_gemma4.cpp reads them): per layer its
// kind's head shapes, K/V projections and the K norm only on the layers that store K/V, the
// per-layer input's gate / projection / norm and an output scale; the per-layer input tables;
// rope_freqs for the global layers' proportional RoPE.
std::vector<SynthTensor> synth_gemma4_tensors(const ModelPreset& p) {
  const int64_t d = p.n_embd, ff = p.n_ff, P = p.n_embd_per_layer;
  const int64_t LP = int64_t(p.n_layer) * P;
  std::vector<SynthTensor> t;
  t.push_back({"token_embd.weight", {d, p.n_vocab}});
  if (p.rope_partial > 0) t.push_back({"rope_freqs.weight", {p.head_dim / 2}, Init::kRopeFactors});
  if (P > 0) {
    t.push_back({"per_layer_token_embd.weight", {LP, p.n_vocab}});
    t.push_back({"per_layer_model_proj.weight", {d, LP}});
    t.push_back({"per_layer_proj_norm.weight", {P}, Init::kOnes});
  }
  for (int i = 0; i < p.n_layer; ++i) {
    const std::string b = "blk." + std::to_string(i) + ".";
    const int64_t hd = p.layer_head_dim(i), q = int64_t(p.n_head) * hd;
    const int64_t kv = int64_t(p.layer_n_kv_head(i)) * hd;
    t.push_back({b + "attn_norm.weight", {d}, Init::kOnes});
    t.push_back({b + "attn_q.weight", {d, q}});
    if (p.layer_stores_kv(i)) {
      t.push_back({b + "attn_k.weight", {d, kv}});
      t.push_back({b + "attn_v.weight", {d, kv}});
    }
    t.push_back({b + "attn_q_norm.weight", {hd}, Init::kOnes});
    if (p.layer_stores_kv(i)) t.push_back({b + "attn_k_norm.weight", {hd}, Init::kOnes});
    t.push_back({b + "attn_output.weight", {q, d}});
    t.push_back({b + "post_attention_norm.weight", {d}, Init::kOnes});
    t.push_back({b + "ffn_norm.weight", {d}, Init::kOnes});
    t.push_back({b + "ffn_gate.weight", {d, ff}});
    t.push_back({b + "ffn_up.weight", {d, ff}});
    t.push_back({b + "ffn_down.weight", {ff, d}});
    t.push_back({b + "post_ffw_norm.weight", {d}, Init::kOnes});
    if (P > 0) {
      t.push_back({b + "inp_gate.weight", {d, P}});
      t.push_back({b + "proj.weight", {P, d}});
      t.push_back({b + "post_norm.weight", {d}, Init::kOnes});
    }
    t.push_back({b + "layer_output_scale.weight", {1}, Init::kOnes});
  }
  t.push_back({"output_norm.weight", {d}, Init::kOnes});
  if (!p.tied_embeddings) t.push_back({"output.weight", {d, p.n_vocab}});
  return t;
}

std::vector<SynthTensor> synth_tensors(const ModelPreset& p) {
  if (p.arch == "bert") return synth_bert_tensors(p);
  if (p.arch == "gemma4") return synth_gemma4_tensors(p);
  const int64_t hd = p.head_dim, q = int64_t(p.n_head) * hd, kv = int64_t(p.n_kv_head) * hd;
  std::vector<SynthTensor> t;
  t.push_back({"token_embd.weight", {p.n_embd, p.n_vocab}});
  if (p.rope_scaling.factor > 0) t.push_back({"rope_freqs.weight", {hd / 2}, Init::kRopeFactors});
  for (int i = 0; i < p.n_layer; ++i) {
    const std::string b = "blk." + std::to_string(i) + ".";
    t.push_back({b + "attn_norm.weight", {p.n_embd}, Init::kOnes});
    const bool hybrid = p.full_attention_interval > 0;
    if (hybrid) t.push_back({b + "post_attention_norm.weight", {p.n_embd}, Init::kOnes});
    if (hybrid && (i + 1) % p.full_attention_interval != 0) {
      // A Gated DeltaNet layer (llama.cpp's qwen35 names); ssm_a = -1: a decay below 1.
      const RecurrentShape& r = p.recurrent;
      t.push_back({b + "attn_qkv.weight", {p.n_embd, r.conv_channels()}});
      t.push_back({b + "attn_gate.weight", {p.n_embd, r.v_dim()}});
      t.push_back({b + "ssm_conv1d.weight", {r.conv_kernel, r.conv_channels()}});
      t.push_back({b + "ssm_dt.bias", {r.n_v_heads}});
      t.push_back({b + "ssm_a", {r.n_v_heads}, Init::kMinusOnes});
      t.push_back({b + "ssm_beta.weight", {p.n_embd, r.n_v_heads}});
      t.push_back({b + "ssm_alpha.weight", {p.n_embd, r.n_v_heads}});
      t.push_back({b + "ssm_norm.weight", {r.state_size}, Init::kOnes});
      t.push_back({b + "ssm_out.weight", {r.v_dim(), p.n_embd}});
    } else if (hybrid) {
      // Gated attention: attn_q gives per head the query and its gate.
      t.push_back({b + "attn_q.weight", {p.n_embd, 2 * q}});
      t.push_back({b + "attn_k.weight", {p.n_embd, kv}});
      t.push_back({b + "attn_v.weight", {p.n_embd, kv}});
      t.push_back({b + "attn_q_norm.weight", {hd}, Init::kOnes});
      t.push_back({b + "attn_k_norm.weight", {hd}, Init::kOnes});
      t.push_back({b + "attn_output.weight", {q, p.n_embd}});
    } else if (p.arch == "phi3") {
      t.push_back({b + "attn_qkv.weight", {p.n_embd, q + 2 * kv}});
    } else {
      t.push_back({b + "attn_q.weight", {p.n_embd, q}});
      t.push_back({b + "attn_k.weight", {p.n_embd, kv}});
      t.push_back({b + "attn_v.weight", {p.n_embd, kv}});
    }
    if (p.qkv_bias && !hybrid) {
      t.push_back({b + "attn_q.bias", {q}});
      t.push_back({b + "attn_k.bias", {kv}});
      t.push_back({b + "attn_v.bias", {kv}});
    }
    if (p.qk_norm && !hybrid) {
      t.push_back({b + "attn_q_norm.weight", {hd}, Init::kOnes});
      t.push_back({b + "attn_k_norm.weight", {hd}, Init::kOnes});
    }
    if (!hybrid) t.push_back({b + "attn_output.weight", {q, p.n_embd}});
    // gpt-oss: an output bias, one sink logit per query head, the FFN norm named
    // post_attention_norm, and biases on the router and every expert matrix.
    const bool gpt_oss = p.arch == "gpt-oss";
    if (gpt_oss) {
      t.push_back({b + "attn_output.bias", {p.n_embd}});
      t.push_back({b + "attn_sinks.weight", {p.n_head}});
    }
    const bool post_norms = p.arch == "gemma2" || p.arch == "gemma3";
    if (post_norms) t.push_back({b + "post_attention_norm.weight", {p.n_embd}, Init::kOnes});
    if (!hybrid) {
      t.push_back({b + (gpt_oss ? "post_attention_norm.weight" : "ffn_norm.weight"),
                   {p.n_embd},
                   Init::kOnes});
    }
    if (post_norms) t.push_back({b + "post_ffw_norm.weight", {p.n_embd}, Init::kOnes});
    if (p.n_expert > 0) {
      const int64_t e = p.n_expert, f = p.n_ff_exp;
      t.push_back({b + "ffn_gate_inp.weight", {p.n_embd, e}});
      t.push_back({b + "ffn_gate_exps.weight", {p.n_embd, f, e}});
      t.push_back({b + "ffn_up_exps.weight", {p.n_embd, f, e}});
      t.push_back({b + "ffn_down_exps.weight", {f, p.n_embd, e}});
      if (gpt_oss) {
        t.push_back({b + "ffn_gate_inp.bias", {e}});
        t.push_back({b + "ffn_gate_exps.bias", {f, e}});
        t.push_back({b + "ffn_up_exps.bias", {f, e}});
        t.push_back({b + "ffn_down_exps.bias", {p.n_embd, e}});
      }
      if (p.n_ff_shexp > 0) {
        // qwen35moe's shared-expert gate is one vector, qwen2moe's a [D, 1] matrix.
        if (hybrid) {
          t.push_back({b + "ffn_gate_inp_shexp.weight", {p.n_embd}});
        } else {
          t.push_back({b + "ffn_gate_inp_shexp.weight", {p.n_embd, 1}});
        }
        t.push_back({b + "ffn_gate_shexp.weight", {p.n_embd, p.n_ff_shexp}});
        t.push_back({b + "ffn_up_shexp.weight", {p.n_embd, p.n_ff_shexp}});
        t.push_back({b + "ffn_down_shexp.weight", {p.n_ff_shexp, p.n_embd}});
      }
    } else if (p.arch == "phi3") {
      t.push_back({b + "ffn_up.weight", {p.n_embd, 2 * int64_t(p.n_ff)}});
      t.push_back({b + "ffn_down.weight", {p.n_ff, p.n_embd}});
    } else {
      t.push_back({b + "ffn_gate.weight", {p.n_embd, p.n_ff}});
      t.push_back({b + "ffn_up.weight", {p.n_embd, p.n_ff}});
      t.push_back({b + "ffn_down.weight", {p.n_ff, p.n_embd}});
    }
  }
  t.push_back({"output_norm.weight", {p.n_embd}, Init::kOnes});
  if (!p.tied_embeddings) t.push_back({"output.weight", {p.n_embd, p.n_vocab}});
  return t;
}

// Llama 3 rope frequency factors (the converter's rope_freqs tensor).
std::vector<float> llama3_rope_factors(const ModelPreset& p) {
  const Llama3RopeScaling& s = p.rope_scaling;
  const double low_wavelen = s.original_context / s.low_freq_factor;
  const double high_wavelen = s.original_context / s.high_freq_factor;
  std::vector<float> f;
  for (int i = 0; i < p.head_dim; i += 2) {
    const double freq = 1.0 / std::pow(double(p.rope_theta), double(i) / p.head_dim);
    const double wavelen = 2 * std::numbers::pi / freq;
    if (wavelen < high_wavelen) {
      f.push_back(1.0f);
    } else if (wavelen > low_wavelen) {
      f.push_back(s.factor);
    } else {
      const double smooth = (s.original_context / wavelen - s.low_freq_factor) /
                            (s.high_freq_factor - s.low_freq_factor);
      f.push_back(float(1.0 / ((1 - smooth) / s.factor + smooth)));
    }
  }
  return f;
}

// Gemma 4's proportional RoPE (the converter's rope_freqs): the global head's first
// rope_partial x head_dim / 2 pairs rotate (factor 1), the rest are left unrotated (1e30).
std::vector<float> gemma4_rope_factors(const ModelPreset& p) {
  const int n_pairs = p.head_dim / 2;
  const int n_rotated = int(float(p.head_dim) * p.rope_partial / 2);
  std::vector<float> f(size_t(n_pairs), 1e30f);
  std::fill(f.begin(), f.begin() + std::min(n_rotated, n_pairs), 1.0f);
  return f;
}

// gemma4's keys beyond the common ones (conversion/gemma.py's Gemma4Model): the layer pattern,
// the windowed layers' head size / rotary dims / RoPE base, per-layer KV heads where the kinds
// differ, shared K/V, the per-layer input width.
void set_gemma4_metadata(GgufWriter& w, const ModelPreset& p) {
  const std::string a = p.arch;
  GgufArray pattern;
  pattern.elem_type = GgufType::BOOL;
  std::vector<int32_t> kv_heads;
  for (int il = 0; il < p.n_layer; ++il) {
    pattern.items.emplace_back(p.windowed(il));
    kv_heads.push_back(p.layer_n_kv_head(il));
  }
  w.set(a + ".attention.sliding_window_pattern", pattern);
  if (p.n_kv_head_swa != p.n_kv_head) {
    w.set(a + ".attention.head_count_kv", make_array(GgufType::INT32, kv_heads));
  }
  w.set(a + ".attention.key_length_swa", uint32_t(p.head_dim_swa));
  w.set(a + ".attention.value_length_swa", uint32_t(p.head_dim_swa));
  w.set(a + ".rope.dimension_count_swa", uint32_t(p.n_rot_swa > 0 ? p.n_rot_swa : p.head_dim_swa));
  w.set(a + ".rope.freq_base_swa", p.rope_theta_swa);
  w.set(a + ".attention.shared_kv_layers", uint32_t(p.n_shared_kv_layers));
  w.set(a + ".embedding_length_per_layer_input", uint32_t(p.n_embd_per_layer));
}

void set_architecture_metadata(GgufWriter& w, const ModelPreset& p, FileType ftype) {
  const std::string a = p.arch;
  w.set("general.architecture", a);
  w.set("general.name", "sluice synthetic " + p.name);
  w.set("general.file_type", uint32_t(ftype));
  if (ftype != FileType::ALL_F32 && ftype != FileType::MOSTLY_F16 &&
      ftype != FileType::MOSTLY_BF16) {
    w.set("general.quantization_version", uint32_t(2));
  }
  w.set(a + ".block_count", uint32_t(p.n_layer));
  w.set(a + ".context_length", uint32_t(p.n_ctx));
  w.set(a + ".embedding_length", uint32_t(p.n_embd));
  w.set(a + ".feed_forward_length", uint32_t(p.n_ff));
  w.set(a + ".attention.head_count", uint32_t(p.n_head));
  w.set(a + ".attention.head_count_kv", uint32_t(p.n_kv_head));
  if (a == "bert") {
    w.set(a + ".attention.layer_norm_epsilon", p.rms_eps);
    w.set(a + ".attention.causal", false);
  } else {
    w.set(a + ".rope.freq_base", p.rope_theta);
    w.set(a + ".attention.layer_norm_rms_epsilon", p.rms_eps);
    w.set(a + ".rope.dimension_count", uint32_t(p.n_rot > 0 ? p.n_rot : p.head_dim));
  }
  if (!p.rope_sections.empty()) {
    w.set(a + ".rope.dimension_sections",
          make_array(GgufType::INT32,
                     std::vector<int32_t>(p.rope_sections.begin(), p.rope_sections.end())));
  }
  if (p.full_attention_interval > 0) {
    const RecurrentShape& r = p.recurrent;
    w.set(a + ".ssm.conv_kernel", uint32_t(r.conv_kernel));
    w.set(a + ".ssm.state_size", uint32_t(r.state_size));
    w.set(a + ".ssm.group_count", uint32_t(r.n_k_heads));
    w.set(a + ".ssm.time_step_rank", uint32_t(r.n_v_heads));
    w.set(a + ".ssm.inner_size", uint32_t(r.v_dim()));
    w.set(a + ".full_attention_interval", uint32_t(p.full_attention_interval));
  }
  w.set(a + ".attention.key_length", uint32_t(p.head_dim));
  w.set(a + ".attention.value_length", uint32_t(p.head_dim));
  if (p.pooling >= 0) w.set(a + ".pooling_type", uint32_t(p.pooling));
  w.set(a + ".vocab_size", uint32_t(p.n_vocab));
  if (p.sliding_window > 0) w.set(a + ".attention.sliding_window", uint32_t(p.sliding_window));
  if (p.yarn_factor > 0) {
    w.set(a + ".rope.scaling.type", std::string("yarn"));
    w.set(a + ".rope.scaling.factor", p.yarn_factor);
    w.set(a + ".rope.scaling.original_context_length", uint32_t(p.yarn_orig_ctx));
  }
  if (p.attn_softcap > 0) w.set(a + ".attn_logit_softcapping", p.attn_softcap);
  if (p.final_softcap > 0) w.set(a + ".final_logit_softcapping", p.final_softcap);
  if (a == "gemma4") set_gemma4_metadata(w, p);
  if (p.n_expert > 0) {
    w.set(a + ".expert_count", uint32_t(p.n_expert));
    w.set(a + ".expert_used_count", uint32_t(p.n_expert_used));
    w.set(a + ".expert_feed_forward_length", uint32_t(p.n_ff_exp));
    if (p.n_ff_shexp > 0) {
      w.set(a + ".expert_shared_feed_forward_length", uint32_t(p.n_ff_shexp));
    }
  }
}

// A byte-level SPM vocabulary: <unk> <s> </s>, the 256 byte tokens, then unused fillers.
void set_byte_vocab(GgufWriter& w, int n_vocab) {
  std::vector<std::string> tokens = {"<unk>", "<s>", "</s>"};
  std::vector<int32_t> types = {2, 3, 3};
  for (int b = 0; b < 256; ++b) {
    char buf[8];
    std::snprintf(buf, sizeof buf, "<0x%02X>", b);
    tokens.push_back(buf);
    types.push_back(6);
  }
  while (int(tokens.size()) < n_vocab) {
    tokens.push_back("<unused" + std::to_string(tokens.size()) + ">");
    types.push_back(5);
  }
  std::vector<float> scores(tokens.size(), 0.0f);
  w.set("tokenizer.ggml.model", "llama");
  w.set("tokenizer.ggml.pre", "default");
  w.set("tokenizer.ggml.tokens", make_string_array(tokens));
  w.set("tokenizer.ggml.scores", make_array(GgufType::FLOAT32, scores));
  w.set("tokenizer.ggml.token_type", make_array(GgufType::INT32, types));
  w.set("tokenizer.ggml.bos_token_id", uint32_t(1));
  w.set("tokenizer.ggml.eos_token_id", uint32_t(2));
  w.set("tokenizer.ggml.unknown_token_id", uint32_t(0));
  w.set("tokenizer.ggml.add_bos_token", true);
  w.set("tokenizer.ggml.add_eos_token", false);
}

std::string shape_string(const std::vector<int64_t>& ne) {
  std::string s = "[";
  for (size_t i = 0; i < ne.size(); ++i) {
    if (i) s.append(", ");
    s.append(std::to_string(ne[i]));
  }
  s.append("]");
  return s;
}

// llama.cpp's n_attention_wv: the attention-V tensors (attn_v, fused attn_qkv) in the file,
// fewer than the layers where some layers read another's K/V (gemma4).
int count_attention_wv(const std::vector<SynthTensor>& tensors) {
  int n = 0;
  for (const SynthTensor& t : tensors) n += is_attention_wv(t.name);
  return n;
}

RecipeModel recipe_model(int n_layer, int n_head, int n_kv_head, bool has_output) {
  RecipeModel m;
  m.n_layer = n_layer;
  m.n_gqa = n_kv_head > 0 ? std::max(1, n_head / n_kv_head) : 1;
  m.has_output = has_output;
  return m;
}

}  // namespace

void synth_normal_row(uint64_t seed, const std::string& name, int64_t row, float* out, int64_t n) {
  uint64_t state = seed ^ fnv1a(name) ^ (uint64_t(row) * 0xd1b54a32d192ed03ull);
  splitmix64(state);
  for (int64_t i = 0; i < n; i += 2) {
    // Box-Muller: two uniforms in (0, 1] -> two independent normals.
    const double u1 = (double(splitmix64(state) >> 11) + 1.0) * 0x1.0p-53;
    const double u2 = double(splitmix64(state) >> 11) * 0x1.0p-53;
    const double r = std::sqrt(-2.0 * std::log(u1));
    out[i] = float(r * std::cos(2 * std::numbers::pi * u2));
    if (i + 1 < n) out[i + 1] = float(r * std::sin(2 * std::numbers::pi * u2));
  }
}

Result<SynthPlan> plan_synth(const SynthParams& params) {
  if (!params.preset) return make_error("synth: no preset given");
  ModelPreset p = *params.preset;
  SynthPlan plan;
  GgufWriter& w = plan.metadata;

  GgufFile vocab;
  if (!params.vocab_path.empty()) {
    SLUICE_ASSIGN_OR_RETURN(vocab, GgufFile::open(params.vocab_path));
    const GgufValue* tokens = vocab.find("tokenizer.ggml.tokens");
    const GgufArray* arr = tokens ? tokens->get_if<GgufArray>() : nullptr;
    if (!arr || arr->items.empty()) {
      return make_error("'", params.vocab_path, "' has no tokenizer.ggml.tokens to copy");
    }
    p.n_vocab = int(arr->items.size());  // the model's vocab follows the tokenizer's
  } else if (p.n_vocab < 259) {
    return make_error("preset '", p.name, "' has a vocab of ", p.n_vocab,
                      " tokens; a byte-level vocab needs at least 259");
  }
  set_architecture_metadata(w, p, params.ftype);
  if (!params.vocab_path.empty()) {
    for (const auto& [k, v] : vocab.metadata()) {
      if (k.rfind("tokenizer.", 0) == 0) w.set(k, v);
    }
  } else {
    set_byte_vocab(w, p.n_vocab);
  }

  plan.tensors = synth_tensors(p);
  // llama.cpp's n_gqa() is layer 0's (gemma4: its kind's KV heads).
  const int n_kv_head0 = p.layer_n_kv_head(0);
  RecipeModel rm = recipe_model(p.n_layer, p.n_head, n_kv_head0, !p.tied_embeddings);
  rm.n_attention_wv = count_attention_wv(plan.tensors);
  RecipeState rs;
  for (SynthTensor& t : plan.tensors) {
    t.type = choose_tensor_type(params.ftype, rm, rs, t.name, t.ne[0], int(t.ne.size()));
    if (!can_quantize(t.type) && t.type != GgmlType::F32 && t.type != GgmlType::F16 &&
        t.type != GgmlType::BF16) {
      return make_error("synth: cannot encode tensor '", t.name, "' as ", type_name(t.type));
    }
    int64_t n_rows = 1;  // every dimension past the first (3-D expert tensors: rows x experts)
    for (size_t d = 1; d < t.ne.size(); ++d) n_rows *= t.ne[d];
    t.bytes = row_size(t.type, t.ne[0]) * uint64_t(n_rows);
  }
  if (p.rope_scaling.factor > 0) plan.rope_factors = llama3_rope_factors(p);
  if (p.arch == "gemma4" && p.rope_partial > 0) plan.rope_factors = gemma4_rope_factors(p);
  return plan;
}

Status synthesize_model(const SynthParams& params, const ConvertCallbacks& cb) {
  SLUICE_ASSIGN_OR_RETURN(SynthPlan plan, plan_synth(params));
  GgufWriter& w = plan.metadata;
  const int n_threads = resolve_threads(params.n_threads);
  const std::vector<float>& rope_factors = plan.rope_factors;
  std::vector<TensorConversion> report;

  for (const SynthTensor& t : plan.tensors) {
    const int64_t ne0 = t.ne[0];
    const int64_t n_rows = t.n_rows();
    const GgmlType type = t.type;
    const size_t row_bytes = row_size(type, ne0);
    const uint64_t seed = params.seed;
    const Init init = t.init;
    const std::string name = t.name;
    auto source = [=, &rope_factors](uint8_t* dst, size_t) -> Status {
      return parallel_rows(n_rows, n_threads, [&](int64_t r0, int64_t r1) -> Status {
        std::vector<float> row(static_cast<size_t>(ne0));
        for (int64_t r = r0; r < r1; ++r) {
          if (init == Init::kOnes || init == Init::kMinusOnes) {
            std::fill(row.begin(), row.end(), init == Init::kOnes ? 1.0f : -1.0f);
          } else if (init == Init::kRopeFactors) {
            std::copy(rope_factors.begin(), rope_factors.end(), row.begin());
          } else {
            synth_normal_row(seed, name, r, row.data(), ne0);
            for (float& x : row) x *= 0.02f;
          }
          SLUICE_RETURN_IF_ERROR(encode_row(type, row.data(), dst + size_t(r) * row_bytes, ne0));
        }
        return {};
      });
    };
    SLUICE_RETURN_IF_ERROR(w.add_tensor(t.name, type, t.ne, source));
    TensorConversion c;
    c.name = t.name;
    c.shape = shape_string(t.ne);
    c.from = GgmlType::F32;
    c.to = type;
    c.bytes_from = uint64_t(ne0 * n_rows) * 4;
    c.bytes_to = t.bytes;
    report.push_back(c);
  }
  size_t next = 0;
  auto progress = [&](uint64_t done, uint64_t total) {
    if (cb.on_tensor && next < report.size()) cb.on_tensor(report[next++]);
    if (cb.progress) cb.progress(done, total);
  };
  return w.write(params.out_path, progress);
}

Status quantize_model(const QuantizeParams& params, const ConvertCallbacks& cb) {
  SLUICE_ASSIGN_OR_RETURN(GgufFile in, GgufFile::open(params.in_path));
  GgufWriter w;
  for (const auto& [k, v] : in.metadata()) w.set(k, v);
  w.set("general.file_type", uint32_t(params.ftype));
  if (params.ftype != FileType::ALL_F32 && params.ftype != FileType::MOSTLY_F16 &&
      params.ftype != FileType::MOSTLY_BF16) {
    w.set("general.quantization_version", uint32_t(2));
  }

  const std::string arch = in.get<std::string>("general.architecture").value_or("");
  const int n_layer = int(in.get_int(arch + ".block_count").value_or(0));
  const int n_head = int(in.get_int(arch + ".attention.head_count").value_or(1));
  // One count, or one per layer (gemma4): llama.cpp's n_gqa() is layer 0's.
  const std::string kv_key = arch + ".attention.head_count_kv";
  int n_kv_head = int(in.get_int(kv_key).value_or(n_head));
  if (auto per_layer = in.get_int_array(kv_key); per_layer.ok() && !per_layer->empty()) {
    n_kv_head = int(per_layer->front());
  }
  RecipeModel rm = recipe_model(n_layer, n_head, n_kv_head, in.find_tensor("output.weight"));
  for (const GgufTensorInfo& t : in.tensors()) rm.n_attention_wv += is_attention_wv(t.name);
  RecipeState rs;
  const int n_threads = resolve_threads(params.n_threads);
  std::vector<TensorConversion> report;

  for (const GgufTensorInfo& t : in.tensors()) {
    const GgmlType from = t.type;
    const bool plain = from == GgmlType::F32 || from == GgmlType::F16 || from == GgmlType::BF16;
    GgmlType to = choose_tensor_type(params.ftype, rm, rs, t.name, t.ne[0], t.n_dims);
    // llama.cpp leaves gemma4's per-layer input projection as the converter wrote it.
    if (t.name == "per_layer_model_proj.weight") to = from;
    if (from != to && !plain && !params.allow_requantize) {
      return make_error("tensor '", t.name, "' is already ", type_name(from),
                        "; quantizing it again loses accuracy (pass --allow-requantize)");
    }
    if (from != to && !plain && !can_dequantize(from)) {
      return make_error("tensor '", t.name, "': cannot read type ", type_name(from));
    }
    const int64_t ne0 = t.ne[0];
    const int64_t n_rows = t.n_rows();
    const size_t row_in = row_size(from, ne0), row_out = row_size(to, ne0);
    std::vector<int64_t> ne(t.ne, t.ne + std::max(t.n_dims, 1));
    if (from == to) {
      SLUICE_RETURN_IF_ERROR(w.add_tensor(t.name, to, ne, static_cast<const void*>(t.data)));
    } else {
      const uint8_t* src = t.data;
      auto source = [=](uint8_t* dst, size_t) -> Status {
        return parallel_rows(n_rows, n_threads, [&](int64_t r0, int64_t r1) -> Status {
          std::vector<float> row(static_cast<size_t>(ne0));
          for (int64_t r = r0; r < r1; ++r) {
            SLUICE_RETURN_IF_ERROR(decode_row(from, src + size_t(r) * row_in, row.data(), ne0));
            SLUICE_RETURN_IF_ERROR(encode_row(to, row.data(), dst + size_t(r) * row_out, ne0));
          }
          return {};
        });
      };
      SLUICE_RETURN_IF_ERROR(w.add_tensor(t.name, to, ne, source));
    }
    report.push_back({t.name, t.shape_string(), from, to, t.n_bytes, uint64_t(n_rows) * row_out});
  }
  size_t next = 0;
  auto progress = [&](uint64_t done, uint64_t total) {
    if (cb.on_tensor && next < report.size()) cb.on_tensor(report[next++]);
    if (cb.progress) cb.progress(done, total);
  };
  return w.write(params.out_path, progress);
}

}  // namespace sluice
