// Which ggml type each tensor of a model gets for a llama.cpp "file type" (Q4_K_M, Q8_0, ...).
// Follows llama.cpp's llama-quantize rules so files are comparable with the ones users have.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "gguf/types.h"

namespace sluice {

// llama.cpp's llama_ftype values (written as general.file_type).
enum class FileType : uint32_t {
  ALL_F32 = 0,
  MOSTLY_F16 = 1,
  MOSTLY_Q4_0 = 2,
  MOSTLY_Q4_1 = 3,
  MOSTLY_Q8_0 = 7,
  MOSTLY_Q5_0 = 8,
  MOSTLY_Q5_1 = 9,
  MOSTLY_Q2_K = 10,
  MOSTLY_Q3_K_M = 12,
  MOSTLY_Q4_K_S = 14,
  MOSTLY_Q4_K_M = 15,
  MOSTLY_Q5_K_S = 16,
  MOSTLY_Q5_K_M = 17,
  MOSTLY_Q6_K = 18,
  MOSTLY_IQ4_NL = 25,
  MOSTLY_BF16 = 32,
  MOSTLY_MXFP4_MOE = 38,  // experts (3-D tensors) MXFP4, the other matrices Q8_0 (gpt-oss)
};

// "q4_k_m", "Q8_0", "f16", "bf16", "mxfp4_moe" (alias "mxfp4"), ... (case-insensitive).
std::optional<FileType> parse_file_type(std::string_view name);
std::string file_type_names();  // for help and errors
std::string_view file_type_name(FileType t);

// What the recipe needs to know about the model besides one tensor.
struct RecipeModel {
  int n_layer = 0;
  bool has_output = true;  // false: output tied to token_embd
  int n_gqa = 1;           // n_head / n_kv_head
  // Attention-V tensors in the file (llama.cpp's n_attention_wv: Q4_K_M's extra bits go by it);
  // 0: n_layer. Fewer than the layers where some read another's K/V (gemma4).
  int n_attention_wv = 0;
};

// llama.cpp's attention-V category: attn_v, and fused attn_qkv (phi3, qwen35's DeltaNet input).
bool is_attention_wv(std::string_view name);

// Counters of tensors seen so far (llama.cpp picks more bits for some layers by index).
struct RecipeState {
  int i_attention_wv = 0;
  int i_ffn_down = 0;
};

// The type for tensor `name` with row length `ne0` and `n_dims` dimensions, in file order.
// 1-D tensors (norms, biases) and rope_freqs stay F32; per_layer_model_proj is not quantized
// (F16 in quantized files, as the converter writes it); per_layer_token_embd follows
// token_embd (as output when tied, as llama.cpp's quantize does). Types whose block does not divide
// the row fall back as llama.cpp does (Q4_K -> Q5_0, Q5_K -> Q5_1, Q6_K -> Q8_0, others -> Q4_0...
// ).
GgmlType choose_tensor_type(FileType ftype, const RecipeModel& model, RecipeState& state,
                            const std::string& name, int64_t ne0, int n_dims);

}  // namespace sluice
