// Qwen3.5 / 3.6 hybrids (general.architecture = "qwen35"): three of every four layers are Gated
// DeltaNet linear attention with a fixed-size recurrent state per sequence, the fourth is gated
// full attention. A layer il is attention when (il + 1) % full_attention_interval == 0, unless
// an attention.recurrent_layers array (one flag per layer) says otherwise.
//
//   layer:  x += mixer(rmsnorm(x) * attn_norm);  x += ffn(rmsnorm(x) * post_attention_norm)
//   gated attention: attn_q gives per head [query (D) | gate (D)]; q, k head-normed, NeoX RoPE
//     over rope.dimension_count dims; out = attn_output . (attention(q, k, v) * sigmoid(gate))
//   Gated DeltaNet (ForwardOps::delta_net): qkv = attn_qkv . h (nk*S query | nk*S key | nv*S
//     value), z = attn_gate . h, b = ssm_beta . h, a = ssm_alpha . h; causal conv + SiLU over
//     qkv, the delta rule per V head, rmsnorm(o) * ssm_norm * silu(z), then ssm_out.
//
// The MTP (next-n) layers a file may carry are not part of block_count's layers and are ignored.
#include <algorithm>
#include <string>

#include "model/arch.h"

namespace sluice {
namespace {

// qwen35moe: the same layers with a MoE FFN (expert_count ...: softmax router, top k
// renormalized, SiLU experts, a shared expert gated by sigmoid(ffn_gate_inp_shexp . x)).
constexpr std::string_view kNames[] = {"qwen35", "qwen35moe"};

Result<int> read_positive(const GgufFile& f, const std::string& key) {
  SLUICE_ASSIGN_OR_RETURN(const int64_t v, f.get_int(key));
  if (v <= 0 || v > (1 << 20)) {
    return make_error("'", f.path(), "': metadata key '", key, "' = ", v,
                      " must be in [1, 1048576]");
  }
  return int(v);
}

Status configure_qwen35(const GgufFile& f, ModelConfig& c) {
  const std::string& a = c.arch_name;
  c.rope_style = RopeStyle::kNeox;
  c.qkv_bias = false;
  c.qk_norm = true;
  c.attn_gated = true;
  c.sliding_window = 0;
  c.moe_norm_topk = true;
  RecurrentShape& r = c.recurrent;
  SLUICE_ASSIGN_OR_RETURN(r.conv_kernel, read_positive(f, a + ".ssm.conv_kernel"));
  SLUICE_ASSIGN_OR_RETURN(r.state_size, read_positive(f, a + ".ssm.state_size"));
  SLUICE_ASSIGN_OR_RETURN(r.n_k_heads, read_positive(f, a + ".ssm.group_count"));
  SLUICE_ASSIGN_OR_RETURN(r.n_v_heads, read_positive(f, a + ".ssm.time_step_rank"));
  SLUICE_ASSIGN_OR_RETURN(const int inner, read_positive(f, a + ".ssm.inner_size"));
  if (inner != r.v_dim()) {
    return make_error("'", f.path(), "': ", a, ".ssm.inner_size (", inner, ") is not ", a,
                      ".ssm.time_step_rank x ", a, ".ssm.state_size (", r.v_dim(), ")");
  }
  if (r.n_v_heads % r.n_k_heads != 0) {
    return make_error("'", f.path(), "': ", a, ".ssm.time_step_rank (", r.n_v_heads,
                      ") is not a multiple of ", a, ".ssm.group_count (", r.n_k_heads, ")");
  }
  c.layer_recurrent.assign(size_t(c.n_layer), 0);
  const std::string list = a + ".attention.recurrent_layers";
  if (f.has(list)) {
    SLUICE_ASSIGN_OR_RETURN(const std::vector<int64_t> flags, f.get_int_array(list));
    if (int64_t(flags.size()) != c.n_layer) {
      return make_error("'", f.path(), "': ", list, " has ", flags.size(), " entries for ",
                        c.n_layer, " layers (", a, ".block_count)");
    }
    for (size_t il = 0; il < flags.size(); ++il) c.layer_recurrent[il] = flags[il] != 0;
  } else {
    SLUICE_ASSIGN_OR_RETURN(const int interval, read_positive(f, a + ".full_attention_interval"));
    if (c.n_layer % interval != 0) {
      return make_error("'", f.path(), "': ", a, ".full_attention_interval (", interval,
                        ") does not divide the ", c.n_layer, " layers (", a, ".block_count)");
    }
    for (int il = 0; il < c.n_layer; ++il) {
      c.layer_recurrent[size_t(il)] = (il + 1) % interval != 0;
    }
    c.full_attention_interval = interval;
  }
  bool any_attention = false;
  for (uint8_t rec : c.layer_recurrent) any_attention |= rec == 0;
  if (!any_attention) {
    return make_error("'", f.path(), "': every layer is recurrent; sluice needs at least one ",
                      "attention layer");
  }
  return {};
}

}  // namespace

void qwen35_forward(const ModelConfig& c, const ModelWeights& w, ForwardOps& ops) {
  const int64_t T = ops.n_tokens();
  const RecurrentShape& r = c.recurrent;
  const Act x = ops.buffer(ActBuf::kX, T, c.n_embd);
  const Act xn = ops.buffer(ActBuf::kXn, T, c.n_embd);
  const Act proj = ops.buffer(ActBuf::kProj, T, c.n_embd);
  // gate: the FFN's gate, z, or the attention gate; up: the FFN's up, qkv, or the attention.
  const Act gate = ops.buffer(ActBuf::kGate, T, std::max({c.n_ff, r.v_dim(), c.q_dim()}));
  const Act up = ops.buffer(ActBuf::kUp, T, std::max({c.n_ff, r.conv_channels(), c.q_dim()}));

  if (c.first_stage()) {
    ops.embed(w.token_embd, x);
  } else {
    ops.stage_input(x);
  }
  for (int il = c.layer_begin; il < c.stage_layer_end(); ++il) {
    const LayerWeights& l = w.layers[size_t(il)];
    if (c.layer_kind(il) == LayerKind::kRecurrent) {
      const DeltaNetWeights& d = l.delta;
      ops.rms_norm(x, l.attn_norm, c.rms_eps, xn, {&d.qkv, &d.z, &d.beta, &d.alpha});
      const Act qkv{up.data, T, r.conv_channels()};
      const Act z{gate.data, T, r.v_dim()};
      const Act beta = ops.buffer(ActBuf::kK, T, r.n_v_heads);
      const Act alpha = ops.buffer(ActBuf::kV, T, r.n_v_heads);
      ops.matmul(d.qkv, xn, qkv);
      ops.matmul(d.z, xn, z);
      ops.matmul(d.beta, xn, beta);
      ops.matmul(d.alpha, xn, alpha);
      const Act o = ops.buffer(ActBuf::kAtt, T, r.v_dim());
      ops.delta_net(il, d, qkv, z, beta, alpha, o);
      ops.matmul(d.out, o, proj);
    } else {
      ops.rms_norm(x, l.attn_norm, c.rms_eps, xn, {&l.wq, &l.wk, &l.wv});
      const Act qg = ops.buffer(ActBuf::kAtt, T, 2 * int64_t(c.q_dim()));
      ops.matmul(l.wq, xn, qg);
      const Act q = ops.buffer(ActBuf::kQ, T, c.q_dim());
      const Act g{gate.data, T, c.q_dim()};
      ops.split_halves(qg, c.head_dim, q, g);
      const Act k = ops.buffer(ActBuf::kK, T, c.kv_dim());
      const Act v = ops.buffer(ActBuf::kV, T, c.kv_dim());
      ops.matmul(l.wk, xn, k);
      ops.matmul(l.wv, xn, v);
      ops.rope_store_kv(il, q, k, v, {&l.q_norm, &l.k_norm, c.rms_eps});
      const Act att{up.data, T, c.q_dim()};
      ops.attention(il, q, att, l.attn_sinks);
      ops.sigmoid_gate(att, g);
      ops.matmul(l.wo, att, proj);
    }
    ops.add(x, proj);

    if (c.is_moe()) {
      ops.rms_norm(x, l.ffn_norm, c.rms_eps, xn, {});
      ops.moe(l.moe, xn, proj);
    } else {
      ops.rms_norm(x, l.ffn_norm, c.rms_eps, xn, {&l.w_gate, &l.w_up});
      const Act fg{gate.data, T, c.n_ff}, fu{up.data, T, c.n_ff};
      ops.matmul(l.w_gate, xn, fg);
      ops.matmul(l.w_up, xn, fu);
      ops.swiglu(fg, fu, fg);
      ops.matmul(l.w_down, fg, proj);
    }
    ops.add(x, proj);
  }

  forward_output(c, w, ops, x);
}

const ArchFamily& qwen35_family() {
  static const ArchFamily f{Arch::kQwen35, kNames, configure_qwen35, qwen35_forward};
  return f;
}

}  // namespace sluice
