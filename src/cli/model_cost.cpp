#include "cli/model_cost.h"

#include <algorithm>
#include <filesystem>
#include <string>
#include <vector>

namespace sluice::cli {
namespace {

// Integer hyperparameter `<arch>.<name>` for every layer: a scalar repeated, or a per-layer
// array as some converters write (head_count_kv, feed_forward_length). Empty when absent.
std::vector<int64_t> per_layer(const GgufFile& f, const std::string& key, int64_t n_layers) {
  if (auto v = f.get_int(key); v.ok()) return std::vector<int64_t>(size_t(n_layers), *v);
  if (auto a = f.get_int_array(key); a.ok() && !a->empty()) {
    std::vector<int64_t> out = *a;
    out.resize(size_t(n_layers), out.back());
    return out;
  }
  return {};
}

}  // namespace

Result<ModelCost> model_cost_from_gguf(const GgufFile& f) {
  auto arch = f.get<std::string>("general.architecture");
  if (!arch.ok()) return Error{arch.message()};
  const std::string a = *arch;
  auto get = [&](const char* name) -> Result<int64_t> {
    auto v = f.get_int(a + "." + name);
    if (!v.ok() || *v <= 0) {
      return make_error("'", f.path(), "': cannot plan without '", a, ".", name, "'");
    }
    return *v;
  };
  SLUICE_ASSIGN_OR_RETURN(const int64_t n_layers, get("block_count"));
  SLUICE_ASSIGN_OR_RETURN(const int64_t d_model, get("embedding_length"));
  SLUICE_ASSIGN_OR_RETURN(const int64_t n_heads, get("attention.head_count"));
  std::vector<int64_t> kv_heads = per_layer(f, a + ".attention.head_count_kv", n_layers);
  if (kv_heads.empty()) kv_heads.assign(size_t(n_layers), n_heads);
  const int64_t k_len = f.get_int(a + ".attention.key_length").value_or(d_model / n_heads);
  const int64_t v_len = f.get_int(a + ".attention.value_length").value_or(k_len);
  // gemma4: windowed layers (sliding_window_pattern) have heads of key_length_swa, and the last
  // shared_kv_layers layers read another layer's K/V (no K/V of their own).
  std::vector<int64_t> swa;
  if (auto p = f.get_int_array(a + ".attention.sliding_window_pattern"); p.ok()) swa = *p;
  swa.resize(size_t(n_layers), 0);
  const int64_t k_len_swa = f.get_int(a + ".attention.key_length_swa").value_or(k_len);
  const int64_t v_len_swa = f.get_int(a + ".attention.value_length_swa").value_or(k_len_swa);
  const int64_t n_shared = f.get_int(a + ".attention.shared_kv_layers").value_or(0);
  std::vector<int64_t> ff = per_layer(f, a + ".feed_forward_length", n_layers);

  ModelCost m;
  m.name =
      f.get<std::string>("general.name").value_or(std::filesystem::path(f.path()).stem().string());
  m.d_model = double(d_model);
  m.d_ff = ff.empty() ? 0.0 : double(*std::max_element(ff.begin(), ff.end()));
  // Hybrids (qwen35): recurrent layers hold a state instead of K/V.
  std::vector<bool> recurrent(size_t(n_layers), false);
  RecurrentShape r;
  if (auto interval = f.get_int(a + ".full_attention_interval"); interval.ok() && *interval > 0) {
    for (int64_t il = 0; il < n_layers; ++il) recurrent[size_t(il)] = (il + 1) % *interval != 0;
  }
  if (auto list = f.get_int_array(a + ".attention.recurrent_layers");
      list.ok() && int64_t(list->size()) == n_layers) {
    for (int64_t il = 0; il < n_layers; ++il) recurrent[size_t(il)] = (*list)[size_t(il)] != 0;
  }
  r.conv_kernel = int(f.get_int(a + ".ssm.conv_kernel").value_or(0));
  r.state_size = int(f.get_int(a + ".ssm.state_size").value_or(0));
  r.n_k_heads = int(f.get_int(a + ".ssm.group_count").value_or(0));
  r.n_v_heads = int(f.get_int(a + ".ssm.time_step_rank").value_or(0));
  int n_rec = 0;
  double attn_dims = 0;  // sum over attention layers of k + v head sizes
  for (int64_t il = 0; il < n_layers; ++il) {
    if (recurrent[size_t(il)] && r.state_size > 0) {
      ++n_rec;
      continue;
    }
    const bool windowed = swa[size_t(il)] != 0;
    const int64_t kv_len = windowed ? k_len_swa + v_len_swa : k_len + v_len;
    attn_dims += double(kv_len);
    if (il < n_layers - n_shared) m.kv_elems_per_token += double(kv_heads[size_t(il)] * kv_len);
  }
  m.attn_flops_per_pair = 2.0 * double(n_heads) * attn_dims;
  if (n_rec > 0) add_recurrent_cost(m, r, n_rec);

  double expert_params = 0;
  for (const GgufTensorInfo& t : f.tensors()) {
    m.n_params += double(t.n_elements());
    m.stored_weight_bytes += double(t.n_bytes);
    if (t.name.find("_exps.") != std::string::npos) expert_params += double(t.n_elements());
  }
  if (m.n_params <= 0) return make_error("'", f.path(), "' has no tensors to plan with");
  m.n_params_active = m.n_params;
  const int64_t n_experts = f.get_int(a + ".expert_count").value_or(0);
  const int64_t n_used = f.get_int(a + ".expert_used_count").value_or(0);
  if (n_experts > 0 && n_used > 0 && expert_params > 0) {
    m.n_experts = int(n_experts);
    m.n_experts_used = int(n_used);
    m.n_params_per_expert = expert_params / double(n_experts);
    m.n_params_active = m.n_params - expert_params + m.n_params_per_expert * double(n_used);
  }
  return m;
}

}  // namespace sluice::cli
