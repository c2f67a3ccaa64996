#include "model/quant_recipe.h"

#include <cctype>
#include <string>

namespace sluice {
namespace {

struct FileTypeName {
  FileType type;
  std::string_view name;
  GgmlType base;
};

constexpr FileTypeName kFileTypes[] = {
    {FileType::ALL_F32, "f32", GgmlType::F32},
    {FileType::MOSTLY_F16, "f16", GgmlType::F16},
    {FileType::MOSTLY_BF16, "bf16", GgmlType::BF16},
    {FileType::MOSTLY_Q8_0, "q8_0", GgmlType::Q8_0},
    {FileType::MOSTLY_Q4_0, "q4_0", GgmlType::Q4_0},
    {FileType::MOSTLY_Q4_1, "q4_1", GgmlType::Q4_1},
    {FileType::MOSTLY_Q5_0, "q5_0", GgmlType::Q5_0},
    {FileType::MOSTLY_Q5_1, "q5_1", GgmlType::Q5_1},
    {FileType::MOSTLY_Q2_K, "q2_k", GgmlType::Q2_K},
    {FileType::MOSTLY_Q3_K_M, "q3_k_m", GgmlType::Q3_K},
    {FileType::MOSTLY_Q4_K_S, "q4_k_s", GgmlType::Q4_K},
    {FileType::MOSTLY_Q4_K_M, "q4_k_m", GgmlType::Q4_K},
    {FileType::MOSTLY_Q5_K_S, "q5_k_s", GgmlType::Q5_K},
    {FileType::MOSTLY_Q5_K_M, "q5_k_m", GgmlType::Q5_K},
    {FileType::MOSTLY_Q6_K, "q6_k", GgmlType::Q6_K},
    {FileType::MOSTLY_IQ4_NL, "iq4_nl", GgmlType::IQ4_NL},
    {FileType::MOSTLY_MXFP4_MOE, "mxfp4_moe", GgmlType::MXFP4},
};

const FileTypeName& entry(FileType t) {
  for (const FileTypeName& e : kFileTypes) {
    if (e.type == t) return e;
  }
  return kFileTypes[0];
}

bool is_quantized(GgmlType t) {
  return t != GgmlType::F32 && t != GgmlType::F16 && t != GgmlType::BF16;
}

bool contains(const std::string& s, std::string_view part) {
  return s.find(part) != std::string::npos;
}

// llama.cpp's use_more_bits: the first and last eighth of the layers, and every third between.
bool use_more_bits(int i_layer, int n_layers) {
  return i_layer < n_layers / 8 || i_layer >= 7 * n_layers / 8 || (i_layer - n_layers / 8) % 3 == 2;
}

// A type whose block does not divide the row length is replaced as llama.cpp does.
GgmlType fallback(GgmlType t, int64_t ne0) {
  if (ne0 % type_traits(t).block_size == 0) return t;
  GgmlType f;
  switch (t) {
    case GgmlType::Q2_K:
    case GgmlType::Q3_K:
      f = GgmlType::Q4_0;
      break;
    case GgmlType::Q4_K:
      f = GgmlType::Q5_0;
      break;
    case GgmlType::Q5_K:
      f = GgmlType::Q5_1;
      break;
    case GgmlType::Q6_K:
      f = GgmlType::Q8_0;
      break;
    default:
      f = GgmlType::F16;
      break;
  }
  return ne0 % type_traits(f).block_size == 0 ? f : GgmlType::F16;
}

}  // namespace

bool is_attention_wv(std::string_view name) {
  return name.find("attn_v.weight") != std::string_view::npos ||
         name.find("attn_qkv.weight") != std::string_view::npos;
}

std::optional<FileType> parse_file_type(std::string_view name) {
  std::string want(name);
  for (char& c : want) c = char(std::tolower(static_cast<unsigned char>(c)));
  if (want == "q4_k") want = "q4_k_m";  // llama.cpp's aliases
  if (want == "q5_k") want = "q5_k_m";
  if (want == "q3_k") want = "q3_k_m";
  if (want == "mxfp4") want = "mxfp4_moe";
  for (const FileTypeName& e : kFileTypes) {
    if (e.name == want) return e.type;
  }
  return std::nullopt;
}

std::string file_type_names() {
  std::string s;
  for (const FileTypeName& e : kFileTypes) {
    if (!s.empty()) s += ", ";
    s += e.name;
  }
  return s;
}

std::string_view file_type_name(FileType t) {
  return entry(t).name;
}

GgmlType choose_tensor_type(FileType ftype, const RecipeModel& model, RecipeState& state,
                            const std::string& name, int64_t ne0, int n_dims) {
  // Only 2-D+ "...weight" tensors are quantized; norms stay f32.
  const bool weight = name.size() >= 6 && name.compare(name.size() - 6, 6, "weight") == 0;
  if (n_dims < 2 || !weight || contains(name, "_norm.weight") || name == "rope_freqs.weight") {
    return GgmlType::F32;
  }
  // BERT's token-type table stays f32, as llama.cpp's converter writes it: llama.cpp adds its
  // row directly (not through get_rows), which its CPU backend does only in f32.
  if (name == "token_types.weight") return GgmlType::F32;
  // MoE routers stay f32, as llama.cpp keeps them: tiny, and the top-k choice is sensitive.
  if (contains(name, "ffn_gate_inp")) return GgmlType::F32;
  // A recurrent layer's conv taps ([K, C], K = 4) stay f32, as llama.cpp keeps them.
  if (contains(name, "ssm_conv1d")) return GgmlType::F32;
  const GgmlType base = entry(ftype).base;
  // gemma4's per-layer input projection: llama.cpp never quantizes it ("not too big").
  if (name == "per_layer_model_proj.weight") return is_quantized(base) ? GgmlType::F16 : base;
  if (!is_quantized(base)) return base;
  // llama.cpp's MXFP4_MOE: the experts' 3-D tensors MXFP4, every other matrix Q8_0.
  if (ftype == FileType::MOSTLY_MXFP4_MOE) {
    return fallback(n_dims >= 3 ? GgmlType::MXFP4 : GgmlType::Q8_0, ne0);
  }

  GgmlType t = base;
  // llama.cpp's token-embedding category holds gemma4's per-layer table too: with the output
  // tied, both take the output's type.
  const bool token_embd = name == "token_embd.weight" || name == "per_layer_token_embd.weight";
  const bool is_output = name == "output.weight" || (!model.has_output && token_embd);
  if (is_output) {
    if (ne0 % type_traits(base).block_size != 0) {
      t = GgmlType::Q8_0;
    } else if (base != GgmlType::Q8_0) {
      t = GgmlType::Q6_K;
    }
  } else if (is_attention_wv(name)) {
    // llama.cpp counts fused QKV (phi3, qwen35's DeltaNet input) as attention V.
    const int i = state.i_attention_wv++;
    const int n = model.n_attention_wv > 0 ? model.n_attention_wv : model.n_layer;
    switch (ftype) {
      case FileType::MOSTLY_Q2_K:
        t = model.n_gqa >= 4 ? GgmlType::Q4_K : GgmlType::Q3_K;
        break;
      case FileType::MOSTLY_Q3_K_M:
        t = i < 2 ? GgmlType::Q5_K : GgmlType::Q4_K;
        break;
      case FileType::MOSTLY_IQ4_NL:
        if (model.n_gqa >= 4) t = GgmlType::Q5_K;
        break;
      case FileType::MOSTLY_Q4_K_M:
      case FileType::MOSTLY_Q5_K_M:
        if (use_more_bits(i, n)) t = GgmlType::Q6_K;
        break;
      case FileType::MOSTLY_Q4_K_S:
        if (i < 4) t = GgmlType::Q5_K;
        break;
      default:
        break;
    }
  } else if (contains(name, "ffn_down")) {
    const int i = state.i_ffn_down++;
    const int n = model.n_layer;
    switch (ftype) {
      case FileType::MOSTLY_Q2_K:
        t = GgmlType::Q3_K;
        break;
      case FileType::MOSTLY_Q3_K_M:
        t = i < n / 16 ? GgmlType::Q5_K : GgmlType::Q4_K;
        break;
      case FileType::MOSTLY_Q4_K_M:
      case FileType::MOSTLY_Q5_K_M:
        if (use_more_bits(i, n)) t = GgmlType::Q6_K;
        break;
      case FileType::MOSTLY_Q4_K_S:
        if (i < n / 8) t = GgmlType::Q5_K;
        break;
      case FileType::MOSTLY_IQ4_NL:
        if (i < n / 8) t = GgmlType::Q5_K;
        break;
      default:
        break;
    }
  } else if (contains(name, "attn_output.weight")) {
    if (ftype == FileType::MOSTLY_Q2_K) t = GgmlType::Q3_K;
    if (ftype == FileType::MOSTLY_Q3_K_M) t = GgmlType::Q4_K;
  }
  return fallback(t, ne0);
}

}  // namespace sluice
