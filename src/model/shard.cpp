#include "model/shard.h"

#include <algorithm>
#include <cassert>
#include <cstring>
#include <limits>

#include "gguf/types.h"

namespace sluice {
namespace {

// Column runs of every row of `w`, copied side by side (each run's begin and size whole blocks
// of w.type): the rank's term of x W^T over those input features (partial).
Result<WeightMatrix> copy_columns(const WeightMatrix& w, std::span<const Range> runs,
                                  std::vector<StreamedBuffer>& owned) {
  int64_t n = 0;
  for (const Range& c : runs) n += c.size();
  const size_t src_row = row_size(w.type, w.n_cols), dst_row = row_size(w.type, n);
  StreamedBuffer buf = alloc_streamed(std::max<size_t>(1, dst_row * size_t(w.n_rows)));
  if (!buf) return make_error("out of memory copying a weight shard");
  const auto* src = static_cast<const uint8_t*>(w.data);
  for (int64_t r = 0; r < w.n_rows; ++r) {
    uint8_t* dst = buf.get() + size_t(r) * dst_row;
    for (const Range& c : runs) {
      const size_t bytes = row_size(w.type, c.size());
      std::memcpy(dst, src + size_t(r) * src_row + row_size(w.type, c.begin), bytes);
      dst += bytes;
    }
  }
  WeightMatrix m = w;
  m.data = buf.get();
  m.n_cols = n;
  m.partial = true;
  owned.push_back(std::move(buf));
  return m;
}

// Columns [c0, c0 + n) of every row of `w`, copied (c0 and n whole blocks of w.type).
Result<WeightMatrix> copy_columns(const WeightMatrix& w, int64_t c0, int64_t n,
                                  std::vector<StreamedBuffer>& owned) {
  const Range run{c0, c0 + n};
  return copy_columns(w, {&run, 1}, owned);
}

// Row runs of `w`, one after another: a view when there is one run, else a copy.
Result<WeightMatrix> gather_rows(const WeightMatrix& w, std::span<const Range> runs,
                                 std::vector<StreamedBuffer>& owned) {
  if (runs.size() == 1) return w.rows(runs[0].begin, runs[0].size());
  int64_t n = 0;
  for (const Range& r : runs) n += r.size();
  const size_t row = row_size(w.type, w.n_cols);
  StreamedBuffer buf = alloc_streamed(std::max<size_t>(1, row * size_t(n)));
  if (!buf) return make_error("out of memory copying a weight shard");
  uint8_t* dst = buf.get();
  for (const Range& r : runs) {
    std::memcpy(dst, static_cast<const uint8_t*>(w.data) + size_t(r.begin) * row,
                row * size_t(r.size()));
    dst += row * size_t(r.size());
  }
  WeightMatrix m = w;
  m.data = buf.get();
  m.n_rows = n;
  owned.push_back(std::move(buf));
  return m;
}

// The items of `v` in the runs, one after another.
std::vector<float> gather(const std::vector<float>& v, std::span<const Range> runs) {
  std::vector<float> out;
  for (const Range& r : runs) out.insert(out.end(), v.begin() + r.begin, v.begin() + r.end);
  return out;
}

// Runs of heads as runs of items: head h -> [offset + h * size, offset + (h + 1) * size).
std::vector<Range> scale(std::span<const Range> heads, int64_t size, int64_t offset = 0) {
  std::vector<Range> out;
  for (const Range& h : heads) out.push_back({offset + h.begin * size, offset + h.end * size});
  return out;
}

std::vector<float> slice(const std::vector<float>& v, Range r) {
  if (v.empty()) return v;
  return {v.begin() + r.begin, v.begin() + r.end};
}

// The FFN columns of this rank: whole blocks of the down projection's type.
Range ffn_range(const WeightMatrix& down, int rank, int size) {
  return split_range(down.n_cols, type_traits(down.type).block_size, rank, size);
}

// gate / up rows and down columns of one FFN (dense, an expert or the shared expert).
Status shard_ffn(WeightMatrix& gate, WeightMatrix& up, WeightMatrix& down, int rank, int size,
                 std::vector<StreamedBuffer>& owned) {
  const Range f = ffn_range(down, rank, size);
  gate = gate.rows(f.begin, f.size());
  up = up.rows(f.begin, f.size());
  SLUICE_ASSIGN_OR_RETURN(down, copy_columns(down, f.begin, f.size(), owned));
  return {};
}

// A Gated DeltaNet layer's part for rank `rank` of `size` (delta_net_split): the channels of its
// K heads' q and k and of its V heads' v (rows of attn_qkv, conv taps), its V heads' rows of
// attn_gate, ssm_beta and ssm_alpha and entries of ssm_a and ssm_dt, and their columns of ssm_out.
Status shard_delta_net(const RecurrentShape& s, int rank, int size, DeltaNetWeights& d,
                       std::vector<StreamedBuffer>& owned) {
  const DeltaNetSplit split = delta_net_split(s, rank, size);
  const int64_t S = s.state_size;
  // Channels:  [ q: nk S | k: nk S | v: nv S ]
  std::vector<Range> channels = scale({&split.k, 1}, S);
  channels.push_back({s.qk_dim() + split.k.begin * S, s.qk_dim() + split.k.end * S});
  for (const Range& v : scale(split.v, S, 2 * int64_t(s.qk_dim()))) channels.push_back(v);
  const std::vector<Range> v_cols = scale(split.v, S);
  SLUICE_ASSIGN_OR_RETURN(d.qkv, gather_rows(d.qkv, channels, owned));
  SLUICE_ASSIGN_OR_RETURN(d.z, gather_rows(d.z, v_cols, owned));
  SLUICE_ASSIGN_OR_RETURN(d.beta, gather_rows(d.beta, split.v, owned));
  SLUICE_ASSIGN_OR_RETURN(d.alpha, gather_rows(d.alpha, split.v, owned));
  SLUICE_ASSIGN_OR_RETURN(d.out, copy_columns(d.out, v_cols, owned));
  d.conv = gather(d.conv, scale(channels, s.conv_kernel));  // [C][K]: K taps a channel
  d.dt_bias = gather(d.dt_bias, split.v);
  d.a = gather(d.a, split.v);
  return {};
}

}  // namespace

Range stage_layers(std::span<const double> layer_cost, double last_extra, int stage, int n_stages) {
  const int n = int(layer_cost.size());
  assert(n_stages >= 1 && n_stages <= n && stage >= 0 && stage < n_stages);
  std::vector<double> prefix(size_t(n) + 1, 0.0);
  for (int l = 0; l < n; ++l) prefix[size_t(l) + 1] = prefix[size_t(l)] + layer_cost[size_t(l)];
  const auto stage_cost = [&](int s, int b, int e) {
    return prefix[size_t(e)] - prefix[size_t(b)] + (s + 1 == n_stages ? last_extra : 0.0);
  };
  // Dynamic programs over split[s][e]: stages 0 .. s over layers [0, e). The first finds the
  // least largest stage cost; the second, among splits within it, the least sum of squared
  // stage costs (the most even), ties going to the latest cut (earlier stages take more).
  const double inf = std::numeric_limits<double>::infinity();
  std::vector<std::vector<double>> best(size_t(n_stages), std::vector<double>(size_t(n) + 1, inf));
  std::vector<std::vector<int>> cut(size_t(n_stages), std::vector<int>(size_t(n) + 1, 0));
  double limit = inf;
  for (int pass = 0; pass < 2; ++pass) {
    const auto combine = [&](double prev, double c) {
      return pass == 0 ? std::max(prev, c) : prev + c * c;
    };
    for (auto& row : best) std::fill(row.begin(), row.end(), inf);
    for (int e = 1; e <= n; ++e) {
      const double c = stage_cost(0, 0, e);
      if (c <= limit) best[0][size_t(e)] = combine(0.0, c);
    }
    for (int s = 1; s < n_stages; ++s) {
      for (int e = s + 1; e <= n; ++e) {
        for (int b = s; b < e; ++b) {
          const double c = stage_cost(s, b, e);
          if (c > limit || best[size_t(s - 1)][size_t(b)] == inf) continue;
          const double v = combine(best[size_t(s - 1)][size_t(b)], c);
          if (v <= best[size_t(s)][size_t(e)]) {
            best[size_t(s)][size_t(e)] = v;
            cut[size_t(s)][size_t(e)] = b;
          }
        }
      }
    }
    limit = best[size_t(n_stages - 1)][size_t(n)] * (1 + 1e-12);
  }
  int end = n;
  for (int s = n_stages - 1; s > stage; --s) end = cut[size_t(s)][size_t(end)];
  return {stage == 0 ? 0 : cut[size_t(stage)][size_t(end)], end};
}

namespace {

double matrix_bytes(const WeightMatrix& m) {
  if (!m.data) return 0;
  const TypeTraits& t = type_traits(m.type);
  return double(m.n_rows) * double(m.n_cols / t.block_size) * double(t.type_size);
}

}  // namespace

std::vector<double> layer_weight_bytes(const ModelWeights& w) {
  std::vector<double> out;
  for (const LayerWeights& l : w.layers) {
    double b = 0;
    for_each_matrix(l, [&](const WeightMatrix& m, MatrixRole) { b += matrix_bytes(m); });
    out.push_back(b);
  }
  return out;
}

double output_weight_bytes(const ModelWeights& w) {
  return matrix_bytes(w.output);
}

Range split_range(int64_t n, int64_t unit, int rank, int size) {
  const int64_t units = n / unit;
  return {units * rank / size * unit, rank + 1 == size ? n : units * (rank + 1) / size * unit};
}

DeltaNetSplit delta_net_split(const RecurrentShape& s, int rank, int size) {
  const int nk = s.n_k_heads, group = s.n_v_heads / nk;  // group: V heads reading one K head
  // V head h = j * nk + k reads K head k. The rank's K heads [k0, k0 + n_k) and, of the `group`
  // V heads that read each of them, those with j in [j0, j1).
  int k0 = 0, n_k = 0, j0 = 0, j1 = group;
  if (size <= nk) {
    n_k = nk / size;
    k0 = rank * n_k;
  } else {
    const int replicas = size / nk;  // ranks sharing one K head
    n_k = 1;
    k0 = rank / replicas;
    j0 = rank % replicas * (group / replicas);
    j1 = j0 + group / replicas;
  }
  DeltaNetSplit out;
  out.k = {k0, k0 + n_k};
  for (int j = j0; j < j1; ++j) {
    const Range run{int64_t(j) * nk + k0, int64_t(j) * nk + k0 + n_k};
    if (!out.v.empty() && out.v.back().end == run.begin) {
      out.v.back().end = run.end;
    } else {
      out.v.push_back(run);
    }
  }
  return out;
}

Status check_shardable(const ModelConfig& c, const ModelWeights& w, int tp_size) {
  const int n = tp_size;
  if (n < 1) return make_error("tensor parallel size must be >= 1 (got ", n, ")");
  if (n == 1) return {};
  if (c.any_recurrent()) {
    const RecurrentShape& s = c.recurrent;
    if (s.n_k_heads % n != 0 && n % s.n_k_heads != 0) {
      return make_error("tensor parallel size ", n, " and the model's ", s.n_k_heads,
                        " linear-attention (Gated DeltaNet) K heads: one must divide the other");
    }
    if (s.n_v_heads % n != 0) {
      return make_error("tensor parallel size ", n, " does not divide the model's ", s.n_v_heads,
                        " linear-attention (Gated DeltaNet) V heads");
    }
  }
  if (c.n_head % n != 0) {
    return make_error("tensor parallel size ", n, " does not divide the model's ", c.n_head,
                      " attention heads");
  }
  if (c.n_kv_head % n != 0 && n % c.n_kv_head != 0) {
    return make_error("tensor parallel size ", n, " and the model's ", c.n_kv_head,
                      " KV heads: one must divide the other");
  }
  if (c.n_vocab < n) return make_error("a vocabulary of ", c.n_vocab, " over ", n, " ranks");
  if (c.arch == Arch::kGemma4) {
    return make_error("tensor parallel: ", c.arch_name,
                      " (per-layer head shapes, shared K/V, per-layer inputs) is not sharded yet");
  }
  if (c.attn_sinks || c.attn_out_bias || c.moe_biases) {
    return make_error("tensor parallel: ", c.arch_name,
                      " (attention sinks, output and expert biases) is not sharded yet");
  }
  const int64_t cols = int64_t(c.n_head / n) * c.head_dim;
  for (size_t il = 0; il < w.layers.size(); ++il) {
    const LayerWeights& l = w.layers[il];
    if (c.layer_kind(int(il)) == LayerKind::kRecurrent) {
      // ssm_out's columns: each rank's runs of V heads, S columns a head.
      const WeightMatrix& out = l.delta.out;
      const int64_t bs = type_traits(out.type).block_size, S = c.recurrent.state_size;
      for (int r = 0; r < n; ++r) {
        for (const Range& v : delta_net_split(c.recurrent, r, n).v) {
          if ((v.begin * S) % bs != 0 || (v.size() * S) % bs != 0) {
            return make_error(
                "tensor parallel size ", n, ": blk.", il, ".ssm_out.weight would split at columns ",
                v.begin * S, "..", v.end * S, " (V heads ", v.begin, "..", v.end - 1, " of ",
                c.recurrent.n_v_heads, ", ", S, " columns each), not a whole number of ",
                type_name(out.type), " blocks (", bs, ")");
          }
        }
      }
    } else {
      const int64_t bs = type_traits(l.wo.type).block_size;
      if (cols % bs != 0) {
        return make_error(
            "tensor parallel size ", n, ": blk.", il, ".attn_output.weight would split at ", cols,
            " columns, not a whole number of ", type_name(l.wo.type), " blocks (", bs, ")");
      }
    }
    const auto check_ffn = [&](const WeightMatrix& down, const char* name) -> Status {
      const int64_t blocks = down.n_cols / type_traits(down.type).block_size;
      if (blocks < n) {
        return make_error("tensor parallel size ", n, ": blk.", il, ".", name, " has only ", blocks,
                          " ", type_name(down.type), " blocks per row");
      }
      return {};
    };
    if (c.is_moe()) {
      if (!l.moe.down.empty()) SLUICE_RETURN_IF_ERROR(check_ffn(l.moe.down[0], "ffn_down_exps"));
      if (l.moe.has_shared()) SLUICE_RETURN_IF_ERROR(check_ffn(l.moe.sh_down, "ffn_down_shexp"));
    } else {
      SLUICE_RETURN_IF_ERROR(check_ffn(l.w_down, "ffn_down"));
    }
  }
  return {};
}

Result<ShardInfo> shard_model(const ShardSpec& spec, ModelConfig& c, ModelWeights& w,
                              std::vector<StreamedBuffer>& owned) {
  const int r = spec.tp_rank, n = spec.tp_size;
  if (r < 0 || r >= n) return make_error("tensor parallel rank ", r, " not in [0, ", n, ")");
  SLUICE_RETURN_IF_ERROR(check_shardable(c, w, n));
  if (spec.pp_size < 1 || spec.pp_size > c.n_layer) {
    return make_error("pipeline parallel size ", spec.pp_size, " must be in 1..", c.n_layer,
                      " (the model's layers)");
  }
  if (spec.pp_rank < 0 || spec.pp_rank >= spec.pp_size) {
    return make_error("pipeline stage ", spec.pp_rank, " not in [0, ", spec.pp_size, ")");
  }
  if (spec.pp_size > 1 && c.arch == Arch::kGemma4) {
    // Every layer reads the per-layer inputs made from the embeddings, and the shared layers
    // another layer's K/V: neither crosses a stage boundary yet.
    return make_error("pipeline parallel: ", c.arch_name, " (per-layer inputs, shared K/V) ",
                      "is not split into stages yet");
  }
  ShardInfo info;
  info.tp_rank = r;
  info.tp_size = n;
  info.n_vocab = int32_t(c.n_vocab);
  info.vocab_end = c.n_vocab;
  info.n_head = c.n_head;
  info.n_kv_head = c.n_kv_head;
  info.n_ff = c.n_ff;
  info.pp_rank = spec.pp_rank;
  info.pp_size = spec.pp_size;
  if (spec.pp_size > 1) {
    const Range layers =
        stage_layers(layer_weight_bytes(w), output_weight_bytes(w), spec.pp_rank, spec.pp_size);
    // The other stages' layers are dropped (their file pages are never touched); the
    // embedding stays on the first stage, the output (a view of the embedding when tied) and
    // its norm on the last.
    c.layer_begin = int(layers.begin);
    c.layer_end = int(layers.end);
    for (int il = 0; il < c.n_layer; ++il) {
      if (il < layers.begin || il >= layers.end) w.layers[size_t(il)] = LayerWeights{};
    }
    if (!c.last_stage()) w.output = WeightMatrix{};
    if (!c.first_stage()) w.token_embd = WeightMatrix{};
    if (!c.last_stage()) w.output_norm.clear();
  }
  if (n == 1) return info;

  const int64_t hd = c.head_dim;
  const int hq = c.n_head / n;
  // K/V heads: a share of them, or the one the rank's query heads read (replicated).
  const int hkv = c.n_kv_head >= n ? c.n_kv_head / n : 1;
  const int kv0 = c.n_kv_head >= n ? r * hkv : r / (n / c.n_kv_head);
  const Range q{int64_t(r) * hq * hd, int64_t(r + 1) * hq * hd};
  const Range kv{int64_t(kv0) * hd, int64_t(kv0 + hkv) * hd};
  // Gated attention's attn_q holds per head its query rows, then as many gate rows.
  const int64_t q_rows = c.attn_gated ? 2 : 1;
  const Range wq{q.begin * q_rows, q.end * q_rows};
  int64_t n_ff = 0, n_ff_exp = 0, n_ff_shexp = 0;
  for (int il = c.layer_begin; il < c.stage_layer_end(); ++il) {
    LayerWeights& l = w.layers[size_t(il)];
    if (c.layer_kind(il) == LayerKind::kRecurrent) {
      SLUICE_RETURN_IF_ERROR(shard_delta_net(c.recurrent, r, n, l.delta, owned));
    } else {
      l.wq = l.wq.rows(wq.begin, wq.size());
      l.wk = l.wk.rows(kv.begin, kv.size());
      l.wv = l.wv.rows(kv.begin, kv.size());
      l.bq = slice(l.bq, q);
      l.bk = slice(l.bk, kv);
      l.bv = slice(l.bv, kv);
      SLUICE_ASSIGN_OR_RETURN(l.wo, copy_columns(l.wo, q.begin, q.size(), owned));
    }
    if (c.is_moe()) {
      MoeWeights& m = l.moe;
      for (size_t e = 0; e < m.down.size(); ++e) {
        SLUICE_RETURN_IF_ERROR(shard_ffn(m.gate[e], m.up[e], m.down[e], r, n, owned));
        n_ff_exp = m.down[e].n_cols;
      }
      if (m.has_shared()) {
        SLUICE_RETURN_IF_ERROR(shard_ffn(m.sh_gate, m.sh_up, m.sh_down, r, n, owned));
        n_ff_shexp = m.sh_down.n_cols;
      }
      m.partial = true;
    } else {
      SLUICE_RETURN_IF_ERROR(shard_ffn(l.w_gate, l.w_up, l.w_down, r, n, owned));
      n_ff = l.w_down.n_cols;
    }
  }
  const Range v = split_range(c.n_vocab, 1, r, n);
  const bool tied = w.output.data != nullptr && w.output.data == w.token_embd.data;
  if (w.token_embd.data) w.token_embd = w.token_embd.rows(v.begin, v.size());
  if (w.output.data) w.output = tied ? w.token_embd : w.output.rows(v.begin, v.size());
  info.vocab_begin = v.begin;
  info.vocab_end = v.end;

  c.n_head = hq;
  c.n_kv_head = hkv;
  if (c.any_recurrent()) {
    const DeltaNetSplit d = delta_net_split(c.recurrent, r, n);
    c.recurrent.n_k_heads = int(d.k.size());
    c.recurrent.n_v_heads = d.n_v();
  }
  if (c.is_moe()) {
    c.n_ff_exp = int(n_ff_exp);
    c.n_ff_shexp = int(n_ff_shexp);
  } else {
    c.n_ff = int(n_ff);
  }
  c.n_vocab = int(v.size());
  return info;
}

}  // namespace sluice
