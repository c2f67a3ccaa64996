#include "executor/cpu_executor.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <unordered_set>

#include "base/fp16.h"
#include "base/log.h"
#include "kernels/attention.h"
#include "kernels/matmul.h"
#include "kernels/ops.h"

namespace sluice {

// Activations of one step. Grown to the largest batch seen, never shrunk: a decode step after
// warm-up allocates nothing.
struct CpuExecutor::Scratch {
  std::vector<float> x;      // [n_tokens, n_embd] residual stream
  std::vector<float> xn;     // [n_tokens, n_embd] normalized input of a sub-layer
  std::vector<float> q;      // [n_tokens, n_head, head_dim]
  std::vector<float> k;      // [n_tokens, n_kv_head, head_dim]
  std::vector<float> v;      // [n_tokens, n_kv_head, head_dim]
  std::vector<float> att;    // [n_tokens, n_head, head_dim] attention output
  std::vector<float> proj;   // [n_tokens, n_embd] sub-layer output before the residual add
  std::vector<float> gate;   // [n_tokens, n_ff]
  std::vector<float> up;     // [n_tokens, n_ff]
  std::vector<float> x_out;  // [n_logit_rows, n_embd] rows that produce logits
  std::vector<PagedAttentionParams> attn_params;  // [n_seqs] one layer's attention of each sequence
  AttentionWorkspace attn_ws;                     // paged_attention_batch's work list and partials
  ActBuffer xq;           // xn quantized to 8-bit blocks, shared by Q/K/V and gate/up
  MatmulWorkspace mm_ws;  // the matmuls' own conversions (o, down, output projections)
  QuantizedActs xq_view;  // view of xq for the current sub-layer

  static void fit(std::vector<float>& v, int64_t n) {
    if (int64_t(v.size()) < n) v.resize(size_t(n));
  }
};

namespace {

// Per-token work below this many floats per token runs on the calling thread.
constexpr int64_t kMinParallelFloats = 1 << 14;

int64_t token_grain(int64_t floats_per_token) {
  return std::max<int64_t>(1, kMinParallelFloats / std::max<int64_t>(1, floats_per_token));
}

void add_bias(float* x, const std::vector<float>& b, int64_t n_rows) {
  if (b.empty()) return;
  const int64_t n = int64_t(b.size());
  for (int64_t r = 0; r < n_rows; ++r) {
    for (int64_t i = 0; i < n; ++i) x[r * n + i] += b[size_t(i)];
  }
}

// Writes n floats to cache elements [row, row + n) as the cache's type.
MatmulParams mm(MatmulIsa isa, const WeightMatrix& w, const float* x, int64_t n, float* y,
                const QuantizedActs* xq) {
  MatmulParams p;
  p.xq = xq;
  p.isa = isa;
  p.type = w.type;
  p.w = w.data;
  p.k = w.n_cols;
  p.m = w.n_rows;
  p.x = x;
  p.n = n;
  p.y = y;
  return p;
}

}  // namespace

CpuExecutor::CpuExecutor(const Model& model, int n_threads, MatmulIsa isa)
    : model_(model), pool_(n_threads), isa_(isa), s_(std::make_unique<Scratch>()) {}

CpuExecutor::~CpuExecutor() = default;

Result<std::unique_ptr<CpuExecutor>> CpuExecutor::create(const Model& model,
                                                         const CpuExecutorOptions& options) {
  const ModelConfig& c = model.config();
  if (options.block_size <= 0) {
    return make_error("CPU executor: block size ", options.block_size, " must be positive");
  }
  if (options.n_blocks < 0 || options.n_threads < 0) {
    return make_error("CPU executor: block count and thread count must not be negative");
  }
  int n_blocks = options.n_blocks;
  if (n_blocks == 0) {
    n_blocks = (std::min(c.n_ctx, 8192) + options.block_size - 1) / options.block_size;
  }

  std::unique_ptr<CpuExecutor> e(new CpuExecutor(model, options.n_threads, options.matmul_isa));
  KvCacheShape shape;
  shape.n_layer = c.n_layer;
  shape.n_blocks = n_blocks;
  shape.block_size = options.block_size;
  shape.n_kv_head = c.n_kv_head;
  shape.head_dim = c.head_dim;
  shape.type = options.kv_type;
  SLUICE_ASSIGN_OR_RETURN(e->kv_, KvCacheStorage::create(shape));
  e->repack(options);
  e->rope_inv_freq_.resize(size_t(c.n_rot / 2));
  const std::vector<float>& ff = model.weights().rope_freqs;
  rope_inv_freq(c.rope_params(ff.empty() ? nullptr : ff.data()), e->rope_inv_freq_.data());
  return e;
}

ExecutorCapacity CpuExecutor::capacity() const {
  return {n_blocks(), block_size(), int32_t(model_.config().n_vocab),
          int32_t(model_.config().n_ctx)};
}

Status CpuExecutor::copy_blocks(std::span<const BlockCopy> copies) {
  SLUICE_RETURN_IF_ERROR(validate_block_copies(copies, n_blocks()));
  for (const BlockCopy& c : copies) kv_->copy_block(c.src, c.dst);
  return {};
}

Result<KvBlockData> CpuExecutor::export_blocks(std::span<const int32_t> ids) const {
  KvBlockData d;
  d.layout = kv_->block_layout();
  d.n_blocks = int32_t(ids.size());
  d.bytes_per_block = kv_->bytes_per_block();
  for (size_t i = 0; i < ids.size(); ++i) {
    if (ids[i] < 0 || ids[i] >= n_blocks()) {
      return make_error("export: block ", ids[i], " at ", i, " is out of range [0, ", n_blocks(),
                        ")");
    }
  }
  d.bytes.resize(d.bytes_per_block * ids.size());
  for (size_t i = 0; i < ids.size(); ++i)
    kv_->read_block(ids[i], d.bytes.data() + i * d.bytes_per_block);
  return d;
}

Status CpuExecutor::import_blocks(std::span<const int32_t> ids, const KvBlockData& data) {
  if (data.layout != kv_->block_layout() || data.bytes_per_block != kv_->bytes_per_block()) {
    return make_error("import: blocks of layout '", data.layout, "' (", data.bytes_per_block,
                      " bytes each) do not fit this cache's '", kv_->block_layout(), "' (",
                      kv_->bytes_per_block(), " bytes)");
  }
  if (int64_t(ids.size()) != data.n_blocks ||
      data.bytes.size() != size_t(data.n_blocks) * data.bytes_per_block) {
    return make_error("import: ", ids.size(), " block ids for ", data.n_blocks, " blocks of data (",
                      data.bytes.size(), " bytes)");
  }
  for (size_t i = 0; i < ids.size(); ++i) {
    if (ids[i] < 0 || ids[i] >= n_blocks()) {
      return make_error("import: block ", ids[i], " at ", i, " is out of range [0, ", n_blocks(),
                        ")");
    }
  }
  for (size_t i = 0; i < ids.size(); ++i)
    kv_->write_block(ids[i], data.bytes.data() + i * data.bytes_per_block);
  return {};
}

Status CpuExecutor::execute(const Batch& batch, Logits& out) {
  SLUICE_RETURN_IF_ERROR(validate_batch(batch, capacity()));
  for (const BlockCopy& c : batch.block_copies) kv_->copy_block(c.src, c.dst);
  forward(batch, out);
  return {};
}

void CpuExecutor::repack(const CpuExecutorOptions& options) {
  const MatmulIsa isa = isa_ == MatmulIsa::kAuto ? matmul_isa_best() : isa_;
  if (!options.repack_weights || isa == MatmulIsa::kScalar) return;
  const ModelWeights& w = model_.weights();
  std::vector<const WeightMatrix*> ms = {&w.output};
  for (const LayerWeights& l : w.layers) {
    for (const WeightMatrix* m : {&l.wq, &l.wk, &l.wv, &l.wo, &l.w_gate, &l.w_up, &l.w_down}) {
      ms.push_back(m);
    }
  }
  // One huge-page mapping for all of them: no page walk every 4 KiB in the small matrices
  // (K/V projections) and no per-matrix rounding to 2 MiB.
  std::vector<std::pair<const WeightMatrix*, size_t>> plan;  // matrix, offset in packed_mem_
  size_t total = 0;
  std::unordered_set<const void*> seen;
  for (const WeightMatrix* m : ms) {
    if (!PackedWeights::supported(m->type) || !seen.insert(m->data).second) continue;
    const Result<size_t> bytes = PackedWeights::bytes_needed(m->type, m->n_rows, m->n_cols);
    if (!bytes.ok()) continue;  // a shape it cannot pack: stays unpacked
    plan.emplace_back(m, total);
    total += (*bytes + 63) / 64 * 64;
  }
  if (plan.empty()) return;
  packed_mem_ = alloc_streamed(total);
  if (!packed_mem_) {
    SLUICE_LOG(kWarn, "cannot allocate " + std::to_string(total) +
                          " bytes for repacked weights: running unpacked");
    return;
  }
  for (const auto& [m, offset] : plan) {
    Result<PackedWeights> p = PackedWeights::pack(m->type, m->data, m->n_rows, m->n_cols, &pool_,
                                                  packed_mem_.get() + offset);
    if (!p.ok()) continue;
    packed_.emplace(m->data, std::move(*p));
    // The file's copy is not read again (get_rows of a tied embedding touches a few rows, read
    // back from the page cache): resident once, not twice.
    model_.file().release(m->data, row_size(m->type, m->n_cols) * size_t(m->n_rows));
  }
}

void CpuExecutor::matmul_w(const WeightMatrix& w, const float* x, int64_t n, float* y,
                           const QuantizedActs* xq) {
  MatmulParams p = mm(isa_, w, x, n, y, xq);
  p.ws = &s_->mm_ws;
  if (!packed_.empty()) {
    const auto it = packed_.find(w.data);
    if (it != packed_.end()) p.packed = &it->second;
  }
  matmul(p, &pool_);
}

// Q/K/V for every token, K/V stored into their slots, then causal attention of each sequence
// through its block table. Leaves the attention output in s_->att.
void CpuExecutor::attention_layer(const Batch& batch, int il, const QuantizedActs* xq) {
  const ModelConfig& c = model_.config();
  const LayerWeights& lw = model_.weights().layers[size_t(il)];
  Scratch& s = *s_;
  const int64_t T = batch.n_tokens();
  const int64_t qd = c.q_dim(), kvd = c.kv_dim(), hd = c.head_dim;

  matmul_w(lw.wq, s.xn.data(), T, s.q.data(), xq);
  matmul_w(lw.wk, s.xn.data(), T, s.k.data(), xq);
  matmul_w(lw.wv, s.xn.data(), T, s.v.data(), xq);
  add_bias(s.q.data(), lw.bq, T);
  add_bias(s.k.data(), lw.bk, T);
  add_bias(s.v.data(), lw.bv, T);

  const RopeParams rp = c.rope_params(nullptr);
  void* k_cache = kv_->k(il);
  void* v_cache = kv_->v(il);
  const KvType kv_type = kv_->shape().type;
  const int bs = block_size();
  const KvLayout layout{bs, c.n_kv_head, c.head_dim};
  pool_.parallel_for(T, token_grain(qd + 2 * kvd), [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      float* q = s.q.data() + t * qd;
      float* k = s.k.data() + t * kvd;
      if (c.qk_norm) {
        for (int h = 0; h < c.n_head; ++h) {
          rms_norm(q + h * hd, lw.q_norm.data(), q + h * hd, hd, c.rms_eps);
        }
        for (int h = 0; h < c.n_kv_head; ++h) {
          rms_norm(k + h * hd, lw.k_norm.data(), k + h * hd, hd, c.rms_eps);
        }
      }
      const int32_t pos = batch.positions[size_t(t)];
      rope(q, c.n_head, pos, rp, rope_inv_freq_.data());
      rope(k, c.n_kv_head, pos, rp, rope_inv_freq_.data());
      const KvSlot slot = batch.kv_slots[size_t(t)];
      store_kv_token(kv_type, layout, k, s.v.data() + t * kvd, k_cache, v_cache, slot.block_id,
                     slot.offset);
    }
  });

  const float scale = float(1.0 / std::sqrt(double(hd)));
  auto params_of = [&](const BatchSequence& seq) {
    PagedAttentionParams p;
    p.q = s.q.data() + int64_t(seq.token_start) * qd;
    p.out = s.att.data() + int64_t(seq.token_start) * qd;
    p.n_q = seq.n_new_tokens;
    p.kv_len = seq.context_len;
    p.kv_type = kv_type;
    p.k_cache = k_cache;
    p.v_cache = v_cache;
    p.block_table = batch.block_tables.data() + seq.block_table_start;
    p.block_size = bs;
    p.n_head = c.n_head;
    p.n_kv_head = c.n_kv_head;
    p.head_dim = c.head_dim;
    p.scale = scale;
    return p;
  };
  s.attn_params.clear();
  for (const BatchSequence& seq : batch.seqs) s.attn_params.push_back(params_of(seq));
  paged_attention_batch(s.attn_params, s.attn_ws, &pool_);
}

// RMSNorm of the residual stream x [n, d] for the matmuls in `ws`, which all read it. When they
// all take 8-bit activations (and there are several, or one that would quantize anyway) the
// norm and the quantization are fused per row (the row of xn is quantized while it is still in
// L1) and the shared quantized copy is returned. Otherwise xn is written and null returned
// (each matmul then converts xn itself). Rows are split over the pool.
const QuantizedActs* CpuExecutor::norm_for(const std::vector<float>& weight,
                                           std::initializer_list<const WeightMatrix*> ws,
                                           int64_t n) {
  const ModelConfig& c = model_.config();
  Scratch& s = *s_;
  const int64_t d = c.n_embd;
  const MatmulIsa isa = isa_ == MatmulIsa::kAuto ? matmul_isa_best() : isa_;
  bool all_int8 = isa != MatmulIsa::kScalar && d % kActBlock == 0;
  for (const WeightMatrix* w : ws) all_int8 = all_int8 && matmul_uses_int8_acts(w->type);
  if (!all_int8) {
    pool_.parallel_for(n, token_grain(d), [&](int64_t t0, int64_t t1) {
      for (int64_t t = t0; t < t1; ++t) {
        rms_norm(s.x.data() + t * d, weight.data(), s.xn.data() + t * d, d, c.rms_eps);
      }
    });
    return nullptr;
  }
  ActBuffer& buf = s.xq;
  buf.resize(n, d);
  pool_.parallel_for(n, token_grain(d), [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      float* row = s.xn.data() + t * d;  // quantized while it is still in L1
      rms_norm(s.x.data() + t * d, weight.data(), row, d, c.rms_eps);
      quantize_acts_row(row, t, buf, isa);
    }
  });
  s.xq_view = buf.view();
  return &s.xq_view;
}

void CpuExecutor::forward(const Batch& batch, Logits& out) {
  const ModelConfig& c = model_.config();
  const ModelWeights& w = model_.weights();
  Scratch& s = *s_;
  const int64_t T = batch.n_tokens();
  const int64_t d = c.n_embd, ff = c.n_ff;
  Scratch::fit(s.x, T * d);
  Scratch::fit(s.xn, T * d);
  Scratch::fit(s.q, T * c.q_dim());
  Scratch::fit(s.k, T * c.kv_dim());
  Scratch::fit(s.v, T * c.kv_dim());
  Scratch::fit(s.att, T * c.q_dim());
  Scratch::fit(s.proj, T * d);
  Scratch::fit(s.gate, T * ff);
  Scratch::fit(s.up, T * ff);

  auto add_residual = [&]() {
    for (int64_t i = 0; i < T * d; ++i) s.x[size_t(i)] += s.proj[size_t(i)];
  };

  get_rows(w.token_embd.type, w.token_embd.data, d, batch.token_ids.data(), T, s.x.data());
  for (int il = 0; il < c.n_layer; ++il) {
    const LayerWeights& lw = w.layers[size_t(il)];
    const QuantizedActs* xq = norm_for(lw.attn_norm, {&lw.wq, &lw.wk, &lw.wv}, T);
    attention_layer(batch, il, xq);
    matmul_w(lw.wo, s.att.data(), T, s.proj.data());
    add_residual();

    xq = norm_for(lw.ffn_norm, {&lw.w_gate, &lw.w_up}, T);
    matmul_w(lw.w_gate, s.xn.data(), T, s.gate.data(), xq);
    matmul_w(lw.w_up, s.xn.data(), T, s.up.data(), xq);
    pool_.parallel_for(T, token_grain(ff), [&](int64_t t0, int64_t t1) {
      swiglu(s.gate.data() + t0 * ff, s.up.data() + t0 * ff, s.gate.data() + t0 * ff,
             (t1 - t0) * ff);
    });
    matmul_w(lw.w_down, s.gate.data(), T, s.proj.data());
    add_residual();
  }

  // Logits only for the rows that asked, in token order.
  out.n_vocab = c.n_vocab;
  out.seq_index.clear();
  out.token_index.clear();
  for (int si = 0; si < batch.n_seqs(); ++si) {
    const BatchSequence& seq = batch.seqs[size_t(si)];
    if (seq.logits == LogitsMode::kNone) continue;
    const int32_t first = seq.logits == LogitsMode::kAll ? 0 : seq.n_new_tokens - 1;
    for (int32_t j = first; j < seq.n_new_tokens; ++j) {
      out.seq_index.push_back(si);
      out.token_index.push_back(seq.token_start + j);
    }
  }
  const int64_t R = out.n_rows();
  out.values.resize(size_t(R * c.n_vocab));
  if (R == 0) return;
  Scratch::fit(s.x_out, R * d);
  for (int64_t r = 0; r < R; ++r) {
    rms_norm(s.x.data() + int64_t(out.token_index[size_t(r)]) * d, w.output_norm.data(),
             s.x_out.data() + r * d, d, c.rms_eps);
  }
  matmul_w(w.output, s.x_out.data(), R, out.values.data());
}

}  // namespace sluice
