#include "executor/cpu_executor.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <string>
#include <unordered_set>

#include "base/fp16.h"
#include "base/log.h"
#include "executor/kv_sizing.h"
#include "kernels/attention.h"
#include "kernels/delta_net.h"
#include "kernels/matmul.h"
#include "kernels/ops.h"

namespace sluice {

// One expert FFN's buffers (a thread's, when experts run in parallel).
struct MoeThread {
  std::vector<float> x, g, u, y;  // gathered rows, gate, up, result
  ActBuffer xq;                   // x as 8-bit blocks
  MatmulWorkspace ws;             // the matmuls' own conversions
};

// Activations of one step. Grown to the largest batch seen, never shrunk: a decode step after
// warm-up allocates nothing.
struct CpuExecutor::Scratch {
  std::vector<float> bufs[size_t(ActBuf::kCount)];  // the forward pass's, by role
  std::vector<PagedAttentionParams> attn_params;  // [n_seqs] one layer's attention of each sequence
  AttentionWorkspace attn_ws;                     // paged_attention_batch's work list and partials
  ActBuffer xq;           // a norm's output quantized to 8-bit blocks, shared by its matmuls
  MatmulWorkspace mm_ws;  // the matmuls' own conversions (o, down, output projections)
  QuantizedActs xq_view;  // view of xq
  std::vector<const WeightMatrix*> xq_for;  // the matmuls that read xq_view (the norm's `next`)
  // Mixture of experts: router logits [T, n_expert], each token's chosen experts and weights
  // [T, n_used], the tokens routed to each expert (by expert, offsets in moe_at), and the
  // gathered rows of one expert and its results.
  std::vector<float> moe_logits, moe_weight, moe_slot_y, moe_shgate;
  std::vector<float> pos_rows;  // [T, n_embd] encoders: the position embeddings of the step
  std::vector<int32_t> moe_sel, moe_at, moe_slot, moe_sel_next;
  std::vector<float> delta_scratch;    // [n_threads][the Gated DeltaNet kernels' scratch]
  std::vector<int> moe_active;         // experts with rows this layer
  std::vector<MoeThread> moe_threads;  // per pool thread: one expert's buffers
  std::vector<float> logits_local;     // tensor parallel: this rank's vocabulary columns
  std::vector<float> logits_ranks;     // rank 0: every rank's columns, rank after rank
  std::vector<int64_t> logits_counts;  // floats from each rank

  static void fit(std::vector<float>& v, int64_t n) {
    if (int64_t(v.size()) < n) v.resize(size_t(n));
  }
};

namespace {

// Per-token work below this many floats per token runs on the calling thread.
constexpr int64_t kMinParallelFloats = 1 << 14;

// Keys p's queries see, summed over the queries (a decode step's one query: min(kv_len, window)
// with a window, kv_len without): what the kernels attend, from the same params.
int64_t keys_visible(const PagedAttentionParams& p) {
  int64_t n = 0;
  for (int qi = 0; qi < p.n_q; ++qi) n += p.kv_len - p.n_q + qi + 1 - p.first_visible(qi);
  return n;
}

int64_t token_grain(int64_t floats_per_token) {
  return std::max<int64_t>(1, kMinParallelFloats / std::max<int64_t>(1, floats_per_token));
}

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
    : model_(model),
      pool_(n_threads),
      isa_(isa == MatmulIsa::kAuto ? matmul_isa_best() : isa),
      s_(std::make_unique<Scratch>()) {}

CpuExecutor::~CpuExecutor() = default;

std::string describe_options(const CpuExecutorOptions& o) {
  return "blocks " + std::to_string(o.n_blocks) + " of " + std::to_string(o.block_size) +
         " tokens, kv " + (o.kv_type == KvType::kF32 ? "f32" : "f16") + ", isa " +
         std::to_string(int(o.matmul_isa));
}

Result<std::unique_ptr<CpuExecutor>> CpuExecutor::create(const Model& model,
                                                         const CpuExecutorOptions& options) {
  const ModelConfig& c = model.config();
  if (options.block_size <= 0) {
    return make_error("CPU executor: block size ", options.block_size, " must be positive");
  }
  if (options.n_blocks < 0 || options.n_threads < 0) {
    return make_error("CPU executor: block count and thread count must not be negative");
  }
  const KvCacheLayout layout = c.kv_cache_layout();
  if (layout.n_groups() == 0) {
    return make_error("CPU executor: the model has no attention layer (no K/V to cache)");
  }
  int n_blocks = options.n_blocks;
  if (n_blocks == 0) {
    // One sequence of min(n_ctx, 8192) tokens that keeps every block (as an executor driven
    // directly does: BlockFreeList).
    n_blocks = layout.n_groups() *
               ((std::min(c.n_ctx, 8192) + options.block_size - 1) / options.block_size);
  }

  const ShardInfo& shard = model.shard();
  if (shard.sharded() && (!options.collective || options.collective->size() != shard.tp_size ||
                          options.collective->rank() != shard.tp_rank)) {
    return make_error("CPU executor: tensor-parallel shard ", shard.tp_rank, " of ", shard.tp_size,
                      " needs the collectives of that rank");
  }

  if (shard.pipelined() && !options.stage_link) {
    return make_error("CPU executor: pipeline stage ", shard.pp_rank, " of ", shard.pp_size,
                      " needs the link to its neighbouring stages");
  }

  std::unique_ptr<CpuExecutor> e(new CpuExecutor(model, options.n_threads, options.matmul_isa));
  if (shard.sharded()) e->coll_ = options.collective;
  if (shard.pipelined()) e->link_ = options.stage_link;
  // A pipeline stage stores only the slots its layers use.
  const KvStageSlots slots = kv_stage_slots(c);
  e->layout_ = layout;
  e->slot_base_ = slots.base;
  KvCacheShape shape;
  shape.n_layer = slots.n;
  shape.n_blocks = n_blocks;
  shape.block_size = options.block_size;
  shape.n_kv_head = c.n_kv_head;
  shape.head_dim = c.head_dim;
  shape.type = options.kv_type;
  if (c.kv_slot_width() != c.kv_dim()) shape.token_width = c.kv_slot_width();
  SLUICE_ASSIGN_OR_RETURN(e->kv_, KvCacheStorage::create(shape));
  if (c.any_recurrent()) {
    e->n_state_checkpoints_ =
        options.n_state_checkpoints == 0 ? 16 : std::max(0, options.n_state_checkpoints);
    e->n_draft_state_slots_ = std::max(0, options.n_draft_state_slots);
    e->n_state_slots_ = (options.n_state_slots > 0 ? options.n_state_slots : 16) +
                        e->n_state_checkpoints_ + e->n_draft_state_slots_;
    e->state_floats_ = c.recurrent.state_floats();
    e->state_index_.assign(size_t(c.n_layer), -1);
    for (int il = c.layer_begin; il < c.stage_layer_end(); ++il) {
      if (c.layer_recurrent[size_t(il)]) e->state_index_[size_t(il)] = e->n_stage_recurrent_++;
    }
    e->states_.assign(
        size_t(e->n_state_slots_) * size_t(e->n_stage_recurrent_) * size_t(e->state_floats_), 0.0f);
  }
  e->repack(options);
  e->rope_inv_freq_.resize(size_t(c.n_rot / 2));
  const std::vector<float>& ff = model.weights().rope_freqs;
  const float* factors = ff.empty() ? nullptr : ff.data();
  rope_inv_freq(c.rope_params(factors), e->rope_inv_freq_.data());
  if (c.rope_theta_swa > 0) {
    // The windowed layers' own RoPE (gemma3, gemma4: their base, rotary dims and factors).
    int swa_layer = 0;
    while (swa_layer < c.n_layer && !c.layer_uses_swa_rope(swa_layer)) ++swa_layer;
    const RopeParams rp = c.layer_rope_params(std::min(swa_layer, c.n_layer - 1), factors);
    e->rope_inv_freq_swa_.resize(size_t(rp.n_rot / 2));
    rope_inv_freq(rp, e->rope_inv_freq_swa_.data());
  }
  return e;
}

float* CpuExecutor::layer_state(int32_t slot, int il) {
  return states_.data() +
         (int64_t(slot) * n_stage_recurrent_ + state_index_[size_t(il)]) * state_floats_;
}

ExecutorCapacity CpuExecutor::capacity() const {
  const ModelConfig& c = model_.config();
  return {n_blocks(),
          block_size(),
          model_.shard().n_vocab,
          int32_t(c.n_ctx),
          layout_.group_window,
          kv_->bytes_per_block(),
          n_state_slots_,
          size_t(state_slot_floats()) * sizeof(float),
          n_state_checkpoints_,
          n_draft_state_slots_};
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

std::string CpuExecutor::state_layout() const {
  const ModelConfig& c = model_.config();
  return "state f32 layers " + std::to_string(c.layer_begin) + "-" +
         std::to_string(c.stage_layer_end()) + " R" + std::to_string(n_stage_recurrent_) + " S" +
         std::to_string(state_floats_);
}

Status CpuExecutor::check_state_slots(const char* what, std::span<const int32_t> slots) const {
  if (n_state_slots_ == 0) {
    return make_error(what, ": this model has no recurrent layers (no state slots)");
  }
  for (size_t i = 0; i < slots.size(); ++i) {
    if (slots[i] < 0 || slots[i] >= n_state_slots_) {
      return make_error(what, ": state slot ", slots[i], " at ", i, " is out of range [0, ",
                        n_state_slots_, ")");
    }
  }
  return {};
}

Result<KvBlockData> CpuExecutor::export_states(std::span<const int32_t> slots) const {
  SLUICE_RETURN_IF_ERROR(check_state_slots("export", slots));
  KvBlockData d;
  d.layout = state_layout();
  d.n_blocks = int32_t(slots.size());
  const size_t slot_floats = size_t(state_slot_floats());
  d.bytes_per_block = slot_floats * sizeof(float);
  d.bytes.resize(d.bytes_per_block * slots.size());
  for (size_t i = 0; i < slots.size(); ++i) {
    std::memcpy(d.bytes.data() + i * d.bytes_per_block,
                states_.data() + size_t(slots[i]) * slot_floats, d.bytes_per_block);
  }
  return d;
}

Status CpuExecutor::import_states(std::span<const int32_t> slots, const KvBlockData& data) {
  SLUICE_RETURN_IF_ERROR(check_state_slots("import", slots));
  const size_t slot_floats = size_t(state_slot_floats());
  const std::string layout = state_layout();
  if (data.layout != layout || data.bytes_per_block != slot_floats * sizeof(float)) {
    return make_error("import: states of layout '", data.layout, "' (", data.bytes_per_block,
                      " bytes each) do not fit this executor's '", layout, "' (",
                      slot_floats * sizeof(float), " bytes)");
  }
  if (int64_t(slots.size()) != data.n_blocks ||
      data.bytes.size() != size_t(data.n_blocks) * data.bytes_per_block) {
    return make_error("import: ", slots.size(), " state slots for ", data.n_blocks,
                      " states of data (", data.bytes.size(), " bytes)");
  }
  for (size_t i = 0; i < slots.size(); ++i) {
    std::memcpy(states_.data() + size_t(slots[i]) * slot_floats,
                data.bytes.data() + i * data.bytes_per_block, data.bytes_per_block);
  }
  return {};
}

Status CpuExecutor::execute(const Batch& batch, Logits& out) {
  SLUICE_RETURN_IF_ERROR(validate_batch(batch, capacity()));
  const ModelConfig& c = model_.config();
  const bool pooled = batch.n_seqs() > 0 && batch.seqs[0].logits == LogitsMode::kPooled;
  if (pooled && (c.pooling == Pooling::kNone || coll_ || link_)) {
    return make_error("CPU executor: pooled (embedding) sequences need an embedding model (",
                      "pooling type ", pooling_name(c.pooling), ") run whole on one process");
  }
  if (!c.causal && !pooled && batch.n_seqs() > 0) {
    return make_error("CPU executor: an encoder (", c.arch_name, ") computes embeddings only: ",
                      "its sequences must be pooled (sluice serve --embedding)");
  }
  if (!c.causal) {
    for (const BatchSequence& seq : batch.seqs) {
      if (seq.context_len != seq.n_new_tokens) {
        return make_error("CPU executor: an encoder (", c.arch_name, ") attends over the whole ",
                          "sequence: it must run in one step (", seq.n_new_tokens,
                          " new tokens of a context of ", seq.context_len, ")");
      }
    }
  }
  for (const BlockCopy& c : batch.block_copies) kv_->copy_block(c.src, c.dst);
  const int64_t slot_floats = state_slot_floats();
  for (const BlockCopy& c : batch.state_copies) {
    std::copy_n(states_.data() + c.src * slot_floats, slot_floats,
                states_.data() + c.dst * slot_floats);
  }
  forward(batch, out);
  return {};
}

void CpuExecutor::repack(const CpuExecutorOptions& options) {
  if (!options.repack_weights || isa_ == MatmulIsa::kScalar) return;
  const ModelWeights& w = model_.weights();
  // Embedding models never compute logits: their output matrix (often the tied embeddings)
  // stays as it is; a reranker's classifier head is packed.
  std::vector<const WeightMatrix*> ms = {&w.cls, &w.cls_out};
  if (model_.config().pooling == Pooling::kNone) ms.push_back(&w.output);
  // Every layer matrix but the routers (they stay as the file has them).
  for (const LayerWeights& l : w.layers) {
    for_each_matrix(l, [&](const WeightMatrix& m, MatrixRole role) {
      if (role != MatrixRole::kRouter) ms.push_back(&m);
    });
  }
  // One huge-page mapping for all of them: no page walk every 4 KiB in the small matrices
  // (K/V projections) and no per-matrix rounding to 2 MiB. MXFP4 where the ISA's kernels have no
  // packed form is copied there as it is: gpt-oss's experts then stream without a page walk
  // every 4 KiB of the file mapping.
  struct Planned {
    const WeightMatrix* m;
    size_t offset;  // in packed_mem_
    bool copy;      // as it is (MXFP4), else packed
  };
  std::vector<Planned> plan;
  size_t total = 0;
  std::unordered_set<const void*> seen;
  for (const WeightMatrix* m : ms) {
    if (!m->data || !seen.insert(m->data).second) continue;
    const bool copy = m->type == GgmlType::MXFP4 && !PackedWeights::supported(m->type, isa_);
    size_t bytes = row_size(m->type, m->n_cols) * size_t(m->n_rows);
    if (!copy) {
      if (!PackedWeights::supported(m->type, isa_)) continue;
      const Result<size_t> packed = PackedWeights::bytes_needed(m->type, m->n_rows, m->n_cols);
      if (!packed.ok()) continue;  // a shape it cannot pack: stays unpacked
      bytes = *packed;
    }
    plan.push_back({m, total, copy});
    total += (bytes + 63) / 64 * 64;
  }
  if (plan.empty()) return;
  packed_mem_ = alloc_streamed(total);
  if (!packed_mem_) {
    SLUICE_LOG(kWarn, "cannot allocate " + std::to_string(total) +
                          " bytes for repacked weights: running unpacked");
    return;
  }
  for (const Planned& p : plan) {
    const WeightMatrix& m = *p.m;
    uint8_t* dst = packed_mem_.get() + p.offset;
    const size_t bytes = row_size(m.type, m.n_cols) * size_t(m.n_rows);
    if (p.copy) {
      const size_t rb = row_size(m.type, m.n_cols);
      pool_.parallel_for(m.n_rows, 256, [&](int64_t r0, int64_t r1) {
        std::memcpy(dst + size_t(r0) * rb, static_cast<const uint8_t*>(m.data) + size_t(r0) * rb,
                    size_t(r1 - r0) * rb);
      });
      copied_.emplace(m.data, dst);
    } else {
      Result<PackedWeights> packed =
          PackedWeights::pack(m.type, m.data, m.n_rows, m.n_cols, &pool_, dst, isa_);
      if (!packed.ok()) continue;
      packed_.emplace(m.data, std::move(*packed));
    }
    // The file's copy is not read again (get_rows of a tied embedding touches a few rows, read
    // back from the page cache): resident once, not twice.
    model_.file().release(m.data, bytes);
  }
}

void CpuExecutor::matmul_w(const WeightMatrix& w, const float* x, int64_t n, float* y,
                           const QuantizedActs* xq) {
  matmul_on(w, x, n, y, xq, &pool_, s_->mm_ws);
}

void CpuExecutor::matmul_on(const WeightMatrix& w, const float* x, int64_t n, float* y,
                            const QuantizedActs* xq, ThreadPool* pool, MatmulWorkspace& ws) {
  MatmulParams p = mm(isa_, w, x, n, y, xq);
  p.ws = &ws;
  if (!packed_.empty()) {
    const auto it = packed_.find(w.data);
    if (it != packed_.end()) p.packed = &it->second;
  }
  if (!copied_.empty() && w.type == GgmlType::MXFP4) {
    const auto it = copied_.find(w.data);
    if (it != copied_.end()) p.w = it->second;
  }
  matmul(p, pool);
}

// The forward pass's operations (model/forward.h) over this executor's pool, kernels, packed
// weights and paged cache, for one batch.
class CpuExecutor::Ops final : public ForwardOps {
 public:
  Ops(CpuExecutor& e, const Batch& batch, Logits& out) : e_(e), s_(*e.s_), b_(batch), out_(out) {}

  int64_t n_tokens() const override { return b_.n_tokens(); }

  Act buffer(ActBuf role, int64_t rows, int64_t cols) override {
    std::vector<float>& v = s_.bufs[size_t(role)];
    Scratch::fit(v, rows * cols);
    return {v.data(), rows, cols};
  }

  void embed(const WeightMatrix& table, Act x) override {
    if (!e_.coll_) {
      get_rows(table.type, table.data, x.cols, b_.token_ids.data(), x.rows, x.data);
      return;
    }
    // Vocabulary parallel: the rank holding a token's row writes it, the others zeros.
    const ShardInfo& sh = e_.model_.shard();
    for (int64_t t = 0; t < x.rows; ++t) {
      const int32_t id = b_.token_ids[size_t(t)];
      float* row = x.data + t * x.cols;
      if (id >= sh.vocab_begin && id < sh.vocab_end) {
        const auto local = int32_t(id - sh.vocab_begin);
        get_rows(table.type, table.data, x.cols, &local, 1, row);
      } else {
        std::fill(row, row + x.cols, 0.0f);
      }
    }
    e_.coll_->all_reduce_sum(x.data, x.rows * x.cols);
  }

  // With every matmul of `next` taking 8-bit activations, the norm and the quantization are
  // fused per row (the row is quantized while it is still in L1) and those matmuls share the
  // quantized copy; otherwise each matmul converts `out` itself. Rows are split over the pool.
  void rms_norm(Act x, const std::vector<float>& w, float eps, Act out,
                std::initializer_list<const WeightMatrix*> next) override {
    const int64_t d = x.cols;
    bool all_int8 = next.size() > 0 && e_.isa_ != MatmulIsa::kScalar && d % kActBlock == 0;
    for (const WeightMatrix* m : next) all_int8 = all_int8 && matmul_uses_int8_acts(m->type);
    prepared_for_ = nullptr;
    if (!all_int8) {
      e_.pool_.parallel_for(x.rows, token_grain(d), [&](int64_t t0, int64_t t1) {
        for (int64_t t = t0; t < t1; ++t) {
          sluice::rms_norm(x.data + t * d, w.data(), out.data + t * d, d, eps);
        }
      });
      return;
    }
    ActBuffer& buf = s_.xq;
    buf.resize(x.rows, d);
    e_.pool_.parallel_for(x.rows, token_grain(d), [&](int64_t t0, int64_t t1) {
      for (int64_t t = t0; t < t1; ++t) {
        float* row = out.data + t * d;
        sluice::rms_norm(x.data + t * d, w.data(), row, d, eps);
        quantize_acts_row(row, t, buf, e_.isa_);
      }
    });
    s_.xq_view = buf.view();
    prepared_for_ = out.data;
    s_.xq_for.assign(next.begin(), next.end());
  }

  void matmul(const WeightMatrix& w, Act x, Act y) override {
    const bool prepared = x.data == prepared_for_ &&
                          std::find(s_.xq_for.begin(), s_.xq_for.end(), &w) != s_.xq_for.end();
    e_.matmul_w(w, x.data, x.rows, y.data, prepared ? &s_.xq_view : nullptr);
    if (w.partial && e_.coll_) e_.coll_->all_reduce_sum(y.data, y.rows * y.cols);
  }

  void add_bias(Act y, const std::vector<float>& b) override {
    if (b.empty()) return;
    for (int64_t r = 0; r < y.rows; ++r) {
      for (int64_t i = 0; i < y.cols; ++i) y.data[r * y.cols + i] += b[size_t(i)];
    }
  }

  // Layer `layer`'s K/V shape in the cache (a slot's blocks may be wider: block_stride).
  KvLayout kv_layout(int layer) const {
    const ModelConfig& c = e_.model_.config();
    return {e_.block_size(), c.layer_n_kv_head(layer), c.layer_head_dim(layer),
            int64_t(e_.kv_->shape().elems_per_block())};
  }

  void rope_store_kv(int layer, Act q, Act k, Act v, const HeadNorms& norms) override {
    rope_heads(layer, q, &k, &v, norms);
  }

  void rope_q(int layer, Act q, const HeadNorms& norms) override {
    rope_heads(layer, q, nullptr, nullptr, norms);
  }

  // Per token: head norms, RoPE of q (and k), then k and v into the token's slot (k null: q
  // only, a layer reading another layer's K/V).
  void rope_heads(int layer, Act q, const Act* k, const Act* v, const HeadNorms& norms) {
    const ModelConfig& c = e_.model_.config();
    const int64_t qd = q.cols, kvd = k ? k->cols : 0, hd = c.layer_head_dim(layer);
    const int n_kv_head = c.layer_n_kv_head(layer);
    const RopeParams rp = c.layer_rope_params(layer, nullptr);
    void* k_cache = e_.kv_->k(e_.kv_slot(layer));
    void* v_cache = e_.kv_->v(e_.kv_slot(layer));
    const size_t group = size_t(e_.layout_.layer_group[size_t(layer)]);
    const size_t n_groups = size_t(b_.n_kv_groups);
    const KvType kv_type = e_.kv_->shape().type;
    const KvLayout layout = kv_layout(layer);
    const float* inv_freq =
        c.layer_uses_swa_rope(layer) ? e_.rope_inv_freq_swa_.data() : e_.rope_inv_freq_.data();
    e_.pool_.parallel_for(q.rows, token_grain(qd + 2 * kvd), [&](int64_t t0, int64_t t1) {
      for (int64_t t = t0; t < t1; ++t) {
        float* qt = q.data + t * qd;
        if (norms.q) {
          for (int h = 0; h < c.n_head; ++h) {
            sluice::rms_norm(qt + h * hd, norms.q->data(), qt + h * hd, hd, norms.eps);
          }
        }
        const int32_t pos = b_.positions[size_t(t)];
        if (c.rope) rope(qt, c.n_head, pos, rp, inv_freq);
        if (!k) continue;
        float* kt = k->data + t * kvd;
        float* vt = v->data + t * kvd;
        for (int h = 0; h < n_kv_head; ++h) {
          if (norms.k) sluice::rms_norm(kt + h * hd, norms.k->data(), kt + h * hd, hd, norms.eps);
          if (norms.v_unit) sluice::rms_norm(vt + h * hd, nullptr, vt + h * hd, hd, norms.eps);
        }
        if (c.rope) rope(kt, n_kv_head, pos, rp, inv_freq);
        const KvSlot slot = b_.kv_slots[size_t(t) * n_groups + group];
        store_kv_token(kv_type, layout, kt, vt, k_cache, v_cache, slot.block_id, slot.offset);
      }
    });
  }

  void attention(int layer, Act q, Act out, const std::vector<float>& sinks) override {
    const ModelConfig& c = e_.model_.config();
    const int64_t qd = q.cols;
    const float scale = c.attention_scale();
    const int window = c.layer_window(layer);
    const int64_t group = e_.layout_.layer_group[size_t(layer)];
    const auto t0 = std::chrono::steady_clock::now();
    int64_t keys = 0;
    s_.attn_params.clear();
    for (const BatchSequence& seq : b_.seqs) {
      if (!c.causal) {
        add_full_attention(layer, seq, q, out);
        keys += int64_t(seq.n_new_tokens) * seq.context_len;
        continue;
      }
      PagedAttentionParams p;
      p.q = q.data + int64_t(seq.token_start) * qd;
      p.out = out.data + int64_t(seq.token_start) * qd;
      p.n_q = seq.n_new_tokens;
      p.kv_len = seq.context_len;
      p.kv_type = e_.kv_->shape().type;
      p.k_cache = e_.kv_->k(e_.kv_slot(layer));
      p.v_cache = e_.kv_->v(e_.kv_slot(layer));
      p.block_table = b_.block_tables.data() + seq.block_table_start + group * seq.n_blocks;
      p.block_size = e_.block_size();
      p.n_head = c.n_head;
      p.n_kv_head = c.layer_n_kv_head(layer);
      p.head_dim = c.layer_head_dim(layer);
      p.kv_block_stride = int64_t(e_.kv_->shape().elems_per_block());
      p.scale = scale;
      p.window = window;
      p.softcap = c.attn_softcap;
      p.sinks = sinks.empty() ? nullptr : sinks.data();
      keys += keys_visible(p);
      s_.attn_params.push_back(p);
    }
    paged_attention_batch(s_.attn_params, s_.attn_ws, &e_.pool_);
    AttentionTimes::Kind& kind = window > 0 ? e_.attn_times_.windowed : e_.attn_times_.global;
    kind.ns +=
        std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - t0)
            .count();
    ++kind.calls;
    kind.keys += keys;
  }

  void moe(const MoeWeights& w, Act xn, Act out) override {
    const int64_t T = xn.rows, d = xn.cols;
    const int E = int(w.gate.size()), K = w.n_used;
    // Router: the experts' logits (+ bias), the K largest (lowest index first on a tie), their
    // weights as the gating says.
    Scratch::fit(s_.moe_logits, T * E);
    e_.matmul_w(w.router, xn.data, T, s_.moe_logits.data());
    add_bias({s_.moe_logits.data(), T, E}, w.router_bias);
    s_.moe_sel.resize(size_t(T * K));
    Scratch::fit(s_.moe_weight, T * K);
    for (int64_t t = 0; t < T; ++t) {
      route_token(s_.moe_logits.data() + t * E, E, K, w, s_.moe_sel.data() + t * K,
                  s_.moe_weight.data() + t * K);
    }
    // Tokens by expert (counting sort: each expert's tokens in token order).
    s_.moe_at.assign(size_t(E + 1), 0);
    for (int32_t e : s_.moe_sel) ++s_.moe_at[size_t(e) + 1];
    for (int e = 0; e < E; ++e) s_.moe_at[size_t(e) + 1] += s_.moe_at[size_t(e)];
    s_.moe_slot.resize(size_t(T * K));
    s_.moe_sel_next.assign(s_.moe_at.begin(), s_.moe_at.end() - 1);
    for (int64_t i = 0; i < T * K; ++i) {
      s_.moe_slot[size_t(s_.moe_sel_next[size_t(s_.moe_sel[size_t(i)])]++)] = int32_t(i);
    }
    s_.moe_active.clear();
    for (int e = 0; e < E; ++e) {
      if (s_.moe_at[size_t(e) + 1] > s_.moe_at[size_t(e)]) s_.moe_active.push_back(e);
    }
    e_.moe_expert_reads_ += int64_t(s_.moe_active.size());
    // Each chosen expert once over its rows, results by (token, k) slot. With at least as many
    // experts as threads, whole experts go to threads (one pool dispatch a layer instead of
    // several per expert); else each expert's matmuls split over the pool. A row's result is
    // the same either way (matmul rows do not depend on the split).
    Scratch::fit(s_.moe_slot_y, T * K * d);
    const int nt = e_.pool_.n_threads();
    if (s_.moe_threads.size() < size_t(nt)) s_.moe_threads.resize(size_t(nt));
    const auto n_active = int64_t(s_.moe_active.size());
    if (nt > 1 && n_active >= nt) {
      e_.pool_.parallel_for_indexed(n_active, 1, [&](int th, int64_t i0, int64_t i1) {
        for (int64_t i = i0; i < i1; ++i) {
          run_expert(w, s_.moe_active[size_t(i)], xn, s_.moe_threads[size_t(th)], nullptr);
        }
      });
    } else {
      for (int e : s_.moe_active) run_expert(w, e, xn, s_.moe_threads[0], &e_.pool_);
    }
    // out[t] = sum of the token's experts' results times their weights, in expert order.
    for (int64_t t = 0; t < T; ++t) {
      int32_t order[ModelConfig::kMaxExpertsUsed];  // K <= it (config.cpp refuses more)
      const int k_used = K;
      for (int k = 0; k < k_used; ++k) order[k] = int32_t(t * K + k);
      std::sort(order, order + k_used, [&](int32_t a, int32_t b) {
        return s_.moe_sel[size_t(a)] < s_.moe_sel[size_t(b)];
      });
      float* dst = out.data + t * d;
      std::fill(dst, dst + d, 0.0f);
      for (int k = 0; k < k_used; ++k) {
        const float wt = s_.moe_weight[size_t(order[k])];
        const float* y = s_.moe_slot_y.data() + int64_t(order[k]) * d;
        for (int64_t j = 0; j < d; ++j) dst[j] += wt * y[j];
      }
    }
    if (w.has_shared()) shared_expert(w, xn, out);
    if (w.partial && e_.coll_) e_.coll_->all_reduce_sum(out.data, out.rows * out.cols);
  }

  // out += the shared expert over every row, times sigmoid(gate_inp . x) when it has that gate.
  void shared_expert(const MoeWeights& w, Act xn, Act out) {
    const int64_t T = xn.rows, d = xn.cols;
    MoeThread& ts = s_.moe_threads[0];
    expert_ffn(w.sh_gate, w.sh_up, w.sh_down, ExpertBiases{}, MoeActivation::kSwiglu, xn.data, T, d,
               ts, &e_.pool_);
    const bool gated = w.sh_gate_inp.data != nullptr;
    if (gated) {
      Scratch::fit(s_.moe_shgate, T);
      e_.matmul_w(w.sh_gate_inp, xn.data, T, s_.moe_shgate.data());
    }
    for (int64_t t = 0; t < T; ++t) {
      const float g = gated ? 1.0f / (1.0f + std::exp(-s_.moe_shgate[size_t(t)])) : 1.0f;
      const float* y = ts.y.data() + t * d;
      float* dst = out.data + t * d;
      for (int64_t j = 0; j < d; ++j) dst[j] += g * y[j];
    }
  }

  void delta_net(int layer, const DeltaNetWeights& w, Act qkv, Act z, Act beta, Act alpha,
                 Act out) override {
    const ModelConfig& c = e_.model_.config();
    DeltaNetParams p;
    p.state_size = c.recurrent.state_size;
    p.n_k_heads = c.recurrent.n_k_heads;
    p.n_v_heads = c.recurrent.n_v_heads;
    p.conv_kernel = c.recurrent.conv_kernel;
    p.conv_w = w.conv.data();
    p.dt_bias = w.dt_bias.data();
    p.a = w.a.data();
    p.norm = w.norm.data();
    p.eps = c.rms_eps;
    const int64_t n_seqs = b_.n_seqs();
    const int C = p.channels(), K = p.conv_kernel;
    for (int64_t si = 0; si < n_seqs; ++si) {
      const BatchSequence& seq = b_.seqs[size_t(si)];
      float* state = e_.layer_state(seq.state_slot, layer);
      if (seq.context_len == seq.n_new_tokens) std::fill_n(state, e_.state_floats_, 0.0f);
      // A verification's conv states after each token but the last: the K-1 inputs before
      // it (the state's rows, then the new tokens'), copied before the conv overwrites them.
      for (int32_t t = 0; seq.draft_state_slot >= 0 && t + 1 < seq.n_new_tokens; ++t) {
        float* dst = e_.layer_state(seq.draft_state_slot + t, layer);
        for (int r = 0; r < K - 1; ++r) {
          const int64_t row = t + 1 + r;  // in [conv state rows | new tokens]
          const float* src = row < K - 1 ? state + row * C
                                         : qkv.data + (seq.token_start + row - (K - 1)) * qkv.cols;
          std::copy_n(src, C, dst + int64_t(r) * C);
        }
      }
    }
    // The chunked form (kernels/delta_net.h): the conv over (sequence, channel block) tasks,
    // then the delta rule over (sequence, V head) tasks, each resuming from its slot.
    const int block = delta_net_conv_block(p);
    const int64_t n_blocks = (C + block - 1) / block;
    const int64_t per_thread = std::max(delta_net_conv_scratch_floats(p),
                                        delta_net_heads_scratch_floats(p, kDeltaNetChunk));
    Scratch::fit(s_.delta_scratch, int64_t(e_.pool_.n_threads()) * per_thread);
    e_.pool_.parallel_for_indexed(n_seqs * n_blocks, 1, [&](int th, int64_t i0, int64_t i1) {
      for (int64_t i = i0; i < i1; ++i) {
        const BatchSequence& seq = b_.seqs[size_t(i / n_blocks)];
        const int c0 = int(i % n_blocks) * block;
        delta_net_conv(p, qkv.data + seq.token_start * qkv.cols, seq.n_new_tokens,
                       e_.layer_state(seq.state_slot, layer), c0, std::min(C, c0 + block),
                       s_.delta_scratch.data() + th * per_thread);
      }
    });
    const int nv = p.n_v_heads;
    e_.pool_.parallel_for_indexed(n_seqs * nv, 1, [&](int th, int64_t i0, int64_t i1) {
      for (int64_t i = i0; i < i1; ++i) {
        const BatchSequence& seq = b_.seqs[size_t(i / nv)];
        const int h = int(i % nv);
        const int64_t t0 = seq.token_start;
        // A verification runs token by token (chunks of 1: the arithmetic of decoding them one
        // step each, so speculation cannot change greedy output) keeping each state.
        const bool verify = seq.draft_state_slot >= 0;
        float* capture =
            verify ? e_.layer_state(seq.draft_state_slot, layer) + p.conv_floats() : nullptr;
        delta_net_heads(p, qkv.data + t0 * qkv.cols, z.data + t0 * z.cols,
                        beta.data + t0 * beta.cols, alpha.data + t0 * alpha.cols, seq.n_new_tokens,
                        e_.layer_state(seq.state_slot, layer) + p.conv_floats(), h, h + 1,
                        verify ? 1 : kDeltaNetChunk, out.data + t0 * out.cols,
                        s_.delta_scratch.data() + th * per_thread, capture, e_.state_slot_floats());
      }
    });
  }

  void split_halves(Act src, int64_t head_dim, Act a, Act b) override {
    const int64_t n_heads = a.cols / head_dim;
    for (int64_t t = 0; t < src.rows; ++t) {
      const float* row = src.data + t * src.cols;
      for (int64_t h = 0; h < n_heads; ++h) {
        std::copy_n(row + 2 * h * head_dim, head_dim, a.data + t * a.cols + h * head_dim);
        std::copy_n(row + (2 * h + 1) * head_dim, head_dim, b.data + t * b.cols + h * head_dim);
      }
    }
  }

  void sigmoid_gate(Act x, Act g) override {
    const int64_t n = x.rows * x.cols;
    for (int64_t i = 0; i < n; ++i) x.data[i] *= 1.0f / (1.0f + std::exp(-g.data[i]));
  }

  void swiglu(Act gate, Act up, Act out) override {
    const int64_t ff = gate.cols;
    e_.pool_.parallel_for(gate.rows, token_grain(ff), [&](int64_t t0, int64_t t1) {
      sluice::swiglu(gate.data + t0 * ff, up.data + t0 * ff, out.data + t0 * ff, (t1 - t0) * ff);
    });
  }

  void geglu(Act gate, Act up, Act out) override {
    const int64_t ff = gate.cols;
    e_.pool_.parallel_for(gate.rows, token_grain(ff), [&](int64_t t0, int64_t t1) {
      sluice::geglu(gate.data + t0 * ff, up.data + t0 * ff, out.data + t0 * ff, (t1 - t0) * ff);
    });
  }

  void scale(Act x, float s) override {
    const int64_t n = x.rows * x.cols;
    for (int64_t i = 0; i < n; ++i) x.data[i] *= s;
  }

  void slice_cols(Act src, int64_t col0, Act dst) override {
    for (int64_t t = 0; t < dst.rows; ++t) {
      std::copy_n(src.data + t * src.cols + col0, dst.cols, dst.data + t * dst.cols);
    }
  }

  void softcap(Act x, float cap) override {
    const int64_t n = x.rows * x.cols;
    e_.pool_.parallel_for(
        n, 4096, [&](int64_t i0, int64_t i1) { sluice::softcap(x.data + i0, i1 - i0, cap); });
  }

  void add(Act x, Act y) override {
    const int64_t n = x.rows * x.cols;
    for (int64_t i = 0; i < n; ++i) x.data[i] += y.data[i];
  }

  void stage_input(Act x) override { e_.link_->recv_from_prev(x.data, x.rows * x.cols); }
  void stage_output(Act x) override { e_.link_->send_to_next(x.data, x.rows * x.cols); }

  void add_positions(const WeightMatrix& table, Act x) override {
    Scratch::fit(s_.pos_rows, x.rows * x.cols);
    get_rows(table.type, table.data, x.cols, b_.positions.data(), x.rows, s_.pos_rows.data());
    const int64_t n = x.rows * x.cols;
    for (int64_t i = 0; i < n; ++i) x.data[i] += s_.pos_rows[size_t(i)];
  }

  void layer_norm(Act x, const std::vector<float>& w, const std::vector<float>& b, float eps,
                  Act out) override {
    const int64_t d = x.cols;
    e_.pool_.parallel_for(x.rows, token_grain(d), [&](int64_t t0, int64_t t1) {
      for (int64_t t = t0; t < t1; ++t) {
        const float* xr = x.data + t * d;
        float* yr = out.data + t * d;
        float mean = 0;
        for (int64_t i = 0; i < d; ++i) mean += xr[i];
        mean /= float(d);
        float var = 0;
        for (int64_t i = 0; i < d; ++i) var += (xr[i] - mean) * (xr[i] - mean);
        const float inv = 1.0f / std::sqrt(var / float(d) + eps);
        for (int64_t i = 0; i < d; ++i) {
          yr[i] = (xr[i] - mean) * inv * w[size_t(i)] + b[size_t(i)];
        }
      }
    });
  }

  void gelu(Act x) override {
    const int64_t n = x.rows * x.cols;
    e_.pool_.parallel_for(n, 4096,
                          [&](int64_t i0, int64_t i1) { sluice::gelu(x.data + i0, i1 - i0); });
  }

  void tanh(Act x) override {
    const int64_t n = x.rows * x.cols;
    for (int64_t i = 0; i < n; ++i) x.data[i] = std::tanh(x.data[i]);
  }

  void copy(Act src, Act dst) override { std::copy_n(src.data, src.rows * src.cols, dst.data); }

  bool pooled() const override {
    return b_.n_seqs() > 0 && b_.seqs[0].logits == LogitsMode::kPooled;
  }

  // Sums in f32 in token order: a sequence's vector does not depend on its batch.
  Act pool(Act x, Pooling how) override {
    set_logit_rows(b_, out_);
    const int64_t S = b_.n_seqs(), d = x.cols;
    const Act rows = buffer(ActBuf::kLogitRows, S, d);
    for (int64_t si = 0; si < S; ++si) {
      const BatchSequence& seq = b_.seqs[size_t(si)];
      const float* first = x.data + int64_t(seq.token_start) * d;
      float* dst = rows.data + si * d;
      if (how == Pooling::kMean) {
        std::fill(dst, dst + d, 0.0f);
        for (int32_t j = 0; j < seq.n_new_tokens; ++j) {
          for (int64_t i = 0; i < d; ++i) dst[i] += first[j * d + i];
        }
        const float inv = 1.0f / float(seq.n_new_tokens);
        for (int64_t i = 0; i < d; ++i) dst[i] *= inv;
      } else if (how == Pooling::kLast) {
        std::copy_n(first + int64_t(seq.n_new_tokens - 1) * d, d, dst);
      } else {  // kCls, kRank: the first token
        std::copy_n(first, d, dst);
      }
    }
    return rows;
  }

  // Logits only for the rows that asked, in token order.
  Act logit_rows(Act x) override {
    set_logit_rows(b_, out_);
    const int64_t R = out_.n_rows();
    const Act rows = buffer(ActBuf::kLogitRows, R, x.cols);
    for (int64_t r = 0; r < R; ++r) {
      const float* src = x.data + int64_t(out_.token_index[size_t(r)]) * x.cols;
      std::copy(src, src + x.cols, rows.data + r * x.cols);
    }
    return rows;
  }

  Act logits(int64_t rows, int64_t n_vocab) override {
    if (e_.coll_) {  // this rank's vocabulary columns; forward() gathers them
      Scratch::fit(s_.logits_local, rows * n_vocab);
      return {s_.logits_local.data(), rows, n_vocab};
    }
    out_.n_vocab = int32_t(n_vocab);
    out_.values.resize(size_t(rows * n_vocab));
    return {out_.values.data(), rows, n_vocab};
  }

 private:
  CpuExecutor& e_;
  Scratch& s_;
  const Batch& b_;
  Logits& out_;
  const float* prepared_for_ = nullptr;  // the norm output s_.xq_view quantizes

  // Attention over the whole sequence (encoders): query i of `seq` as a sequence of one new
  // token at the end of all seq.context_len positions, so the causal kernels let it see every
  // one. Each query then reads the sequence's K/V once (no sharing across a query block): fine
  // for the short texts embeddings take.
  void add_full_attention(int layer, const BatchSequence& seq, Act q, Act out) {
    const ModelConfig& c = e_.model_.config();
    const int64_t qd = q.cols;
    for (int32_t j = 0; j < seq.n_new_tokens; ++j) {
      PagedAttentionParams p;
      p.q = q.data + int64_t(seq.token_start + j) * qd;
      p.out = out.data + int64_t(seq.token_start + j) * qd;
      p.n_q = 1;
      p.kv_len = seq.context_len;
      p.kv_type = e_.kv_->shape().type;
      p.k_cache = e_.kv_->k(e_.kv_slot(layer));
      p.v_cache = e_.kv_->v(e_.kv_slot(layer));
      p.block_table = b_.block_tables.data() + seq.block_table_start;
      p.block_size = e_.block_size();
      p.n_head = c.n_head;
      p.n_kv_head = c.n_kv_head;
      p.head_dim = c.head_dim;
      p.scale = c.attention_scale();
      s_.attn_params.push_back(p);
    }
  }

  // Expert e over the rows routed to it: gathered into ts.x, its FFN, each result row into its
  // (token, k) slot of s_.moe_slot_y.
  void run_expert(const MoeWeights& w, int e, Act xn, MoeThread& ts, ThreadPool* pool) {
    const int64_t d = xn.cols;
    const int32_t a0 = s_.moe_at[size_t(e)], n = s_.moe_at[size_t(e) + 1] - a0;
    const int K = w.n_used;
    Scratch::fit(ts.x, int64_t(n) * d);
    for (int32_t i = 0; i < n; ++i) {
      const float* src = xn.data + int64_t(s_.moe_slot[size_t(a0 + i)] / K) * d;
      std::copy(src, src + d, ts.x.data() + int64_t(i) * d);
    }
    ExpertBiases b;
    if (!w.gate_bias.empty()) {
      const int64_t ff = w.gate[size_t(e)].n_rows;
      b = {w.gate_bias.data() + e * ff, w.up_bias.data() + e * ff, w.down_bias.data() + e * d};
    }
    expert_ffn(w.gate[size_t(e)], w.up[size_t(e)], w.down[size_t(e)], b, w.act, ts.x.data(), n, d,
               ts, pool);
    for (int32_t i = 0; i < n; ++i) {
      const float* y = ts.y.data() + int64_t(i) * d;
      std::copy(y, y + d, s_.moe_slot_y.data() + int64_t(s_.moe_slot[size_t(a0 + i)]) * d);
    }
  }

  // One expert's biases (gpt-oss): gate and up [n_ff], down [n_embd]; null: none.
  struct ExpertBiases {
    const float* gate = nullptr;
    const float* up = nullptr;
    const float* down = nullptr;
  };

  static void add_rows(float* y, int64_t n, int64_t cols, const float* b) {
    if (!b) return;
    for (int64_t r = 0; r < n; ++r) {
      for (int64_t i = 0; i < cols; ++i) y[r * cols + i] += b[i];
    }
  }

  // One gated FFN (`act`) over n rows of x [n, d] into ts.y [n, d], over `pool` (null: this
  // thread): gate and up share one 8-bit copy of x when their type takes 8-bit activations.
  void expert_ffn(const WeightMatrix& gate, const WeightMatrix& up, const WeightMatrix& down,
                  const ExpertBiases& bias, MoeActivation act, const float* x, int64_t n, int64_t d,
                  MoeThread& ts, ThreadPool* pool) {
    const int64_t ff = gate.n_rows;
    Scratch::fit(ts.g, n * ff);
    Scratch::fit(ts.u, n * ff);
    Scratch::fit(ts.y, n * d);
    const bool int8 = e_.isa_ != MatmulIsa::kScalar && d % kActBlock == 0 &&
                      matmul_uses_int8_acts(gate.type) && matmul_uses_int8_acts(up.type);
    QuantizedActs xq;
    if (int8) {
      ts.xq.resize(n, d);
      if (pool) {
        pool->parallel_for(n, token_grain(d), [&](int64_t r0, int64_t r1) {
          quantize_acts_rows(x, r0, r1, ts.xq, e_.isa_);
        });
      } else {
        quantize_acts_rows(x, 0, n, ts.xq, e_.isa_);
      }
      xq = ts.xq.view();
    }
    e_.matmul_on(gate, x, n, ts.g.data(), int8 ? &xq : nullptr, pool, ts.ws);
    e_.matmul_on(up, x, n, ts.u.data(), int8 ? &xq : nullptr, pool, ts.ws);
    add_rows(ts.g.data(), n, ff, bias.gate);
    add_rows(ts.u.data(), n, ff, bias.up);
    if (act == MoeActivation::kSwigluOai) {
      swiglu_oai(ts.g.data(), ts.u.data(), ts.g.data(), n * ff);
    } else {
      sluice::swiglu(ts.g.data(), ts.u.data(), ts.g.data(), n * ff);
    }
    e_.matmul_on(down, ts.g.data(), n, ts.y.data(), nullptr, pool, ts.ws);
    add_rows(ts.y.data(), n, d, bias.down);
  }

  // One token's E router logits -> its K experts (the K largest logits, lowest index first
  // among equals) and their weights: kSoftmax: the softmax over all E at the chosen ones,
  // renormalized to sum 1 when w.norm_topk; kTopKSoftmax: a softmax over the K chosen logits.
  static void route_token(const float* logits, int E, int K, const MoeWeights& w, int32_t* sel,
                          float* weight) {
    for (int k = 0; k < K; ++k) {
      int best = -1;
      for (int e = 0; e < E; ++e) {
        bool taken = false;
        for (int j = 0; j < k; ++j) taken = taken || sel[j] == e;
        if (!taken && (best < 0 || logits[e] > logits[best])) best = e;
      }
      sel[k] = best;
    }
    if (w.gating == MoeGating::kTopKSoftmax) {
      const float mx = logits[sel[0]];  // the largest
      float sum = 0;
      for (int k = 0; k < K; ++k) sum += weight[k] = std::exp(logits[sel[k]] - mx);
      for (int k = 0; k < K; ++k) weight[k] /= sum;
      return;
    }
    float mx = logits[0];
    for (int e = 1; e < E; ++e) mx = std::max(mx, logits[e]);
    float sum = 0;
    for (int e = 0; e < E; ++e) sum += std::exp(logits[e] - mx);
    float chosen = 0;
    for (int k = 0; k < K; ++k) {
      weight[k] = std::exp(logits[sel[k]] - mx) / sum;
      chosen += weight[k];
    }
    if (w.norm_topk) {
      for (int k = 0; k < K; ++k) weight[k] /= chosen;
    }
  }
};

void CpuExecutor::forward(const Batch& batch, Logits& out) {
  out.n_vocab = model_.shard().n_vocab;
  out.values.clear();
  out.seq_index.clear();
  out.token_index.clear();
  moe_expert_reads_ = 0;
  Ops ops(*this, batch, out);
  model_.forward(ops);
  if (coll_ && out.n_rows() > 0) gather_logits(out);
}

// Tensor parallel: rank r computed vocabulary columns [vocab_begin, vocab_end) of every row;
// rank 0 receives them all, rank after rank, and interleaves them into whole rows.
void CpuExecutor::gather_logits(Logits& out) {
  const int n = coll_->size();
  const int64_t R = out.n_rows(), V = model_.shard().n_vocab;
  Scratch& s = *s_;
  s.logits_counts.resize(size_t(n));
  for (int r = 0; r < n; ++r) s.logits_counts[size_t(r)] = R * split_range(V, 1, r, n).size();
  const bool root = coll_->rank() == 0;
  if (root) Scratch::fit(s.logits_ranks, R * V);
  coll_->gather(s.logits_local.data(), s.logits_counts[size_t(coll_->rank())], s.logits_counts,
                root ? s.logits_ranks.data() : nullptr);
  if (!root) return;
  out.values.resize(size_t(R * V));
  const float* src = s.logits_ranks.data();
  for (int r = 0; r < n; ++r) {
    const Range v = split_range(V, 1, r, n);
    for (int64_t i = 0; i < R; ++i) {
      std::copy(src + i * v.size(), src + (i + 1) * v.size(), out.values.data() + i * V + v.begin);
    }
    src += R * v.size();
  }
}

}  // namespace sluice
