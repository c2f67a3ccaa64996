#include "executor/batch.h"

#include <algorithm>
#include <bit>
#include <cassert>
#include <cstring>

namespace sluice {
namespace {

static_assert(std::endian::native == std::endian::little, "the wire form is little-endian");
constexpr char kBatchMagic[8] = {'S', 'L', 'B', 'A', 'T', 'C', 'H', '3'};
constexpr size_t kHeaderBytes = 32;
constexpr size_t kSeqInts = 8;

void put_i32(std::vector<uint8_t>& out, int32_t v) {
  uint8_t b[4];
  std::memcpy(b, &v, 4);
  out.insert(out.end(), b, b + 4);
}

// Reads i32 values from a byte range, in order.
struct Reader {
  std::span<const uint8_t> bytes;
  size_t at = 0;
  int32_t next() {
    int32_t v;
    std::memcpy(&v, bytes.data() + at, 4);
    at += 4;
    return v;
  }
};

}  // namespace

void serialize_batch(const Batch& b, std::vector<uint8_t>& out) {
  out.clear();
  out.reserve(kHeaderBytes +
              4 * (2 * b.token_ids.size() + 2 * b.kv_slots.size() + kSeqInts * b.seqs.size() +
                   b.block_tables.size() + 2 * b.block_copies.size() + 1));
  out.insert(out.end(), kBatchMagic, kBatchMagic + 8);
  put_i32(out, b.block_size);
  put_i32(out, int32_t(b.token_ids.size()));
  put_i32(out, int32_t(b.seqs.size()));
  put_i32(out, int32_t(b.block_tables.size()));
  put_i32(out, int32_t(b.block_copies.size()));
  put_i32(out, b.n_kv_groups);
  for (int32_t t : b.token_ids) put_i32(out, t);
  for (int32_t p : b.positions) put_i32(out, p);
  for (const KvSlot& s : b.kv_slots) {
    put_i32(out, s.block_id);
    put_i32(out, s.offset);
  }
  for (const BatchSequence& s : b.seqs) {
    put_i32(out, s.token_start);
    put_i32(out, s.n_new_tokens);
    put_i32(out, s.context_len);
    put_i32(out, s.block_table_start);
    put_i32(out, s.n_blocks);
    put_i32(out, int32_t(s.logits));
    put_i32(out, s.state_slot);
    put_i32(out, s.draft_state_slot);
  }
  for (int32_t id : b.block_tables) put_i32(out, id);
  for (const BlockCopy& c : b.block_copies) {
    put_i32(out, c.src);
    put_i32(out, c.dst);
  }
  put_i32(out, int32_t(b.state_copies.size()));
  for (const BlockCopy& c : b.state_copies) {
    put_i32(out, c.src);
    put_i32(out, c.dst);
  }
}

Result<Batch> deserialize_batch(std::span<const uint8_t> bytes) {
  if (bytes.size() < kHeaderBytes || std::memcmp(bytes.data(), kBatchMagic, 8) != 0) {
    return make_error("batch wire form: missing the SLBATCH2 header (", bytes.size(), " bytes)");
  }
  Reader r{bytes, 8};
  Batch b;
  b.block_size = r.next();
  const int32_t n_tokens = r.next(), n_seqs = r.next(), n_table = r.next(), n_copies = r.next();
  b.n_kv_groups = r.next();
  if (b.block_size <= 0 || n_tokens < 0 || n_seqs < 0 || n_table < 0 || n_copies < 0 ||
      b.n_kv_groups < 1 || b.n_kv_groups > 4096) {
    return make_error(
        "batch wire form: bad header (a negative count or block size, or K/V groups not in "
        "[1, 4096])");
  }
  const uint64_t G = uint64_t(b.n_kv_groups);
  const uint64_t ints = (2ull + 2ull * G) * uint64_t(n_tokens) + kSeqInts * uint64_t(n_seqs) +
                        uint64_t(n_table) + 2ull * uint64_t(n_copies) + 1;
  // Then 2 i32 per state copy, as many as the last count says.
  if (bytes.size() - kHeaderBytes < 4 * ints || (bytes.size() - kHeaderBytes - 4 * ints) % 8 != 0) {
    return make_error("batch wire form: ", bytes.size(), " bytes, the header's counts need ",
                      kHeaderBytes + 4 * ints);
  }
  b.token_ids.resize(size_t(n_tokens));
  b.positions.resize(size_t(n_tokens));
  b.kv_slots.resize(size_t(n_tokens) * G);
  b.seqs.resize(size_t(n_seqs));
  b.block_tables.resize(size_t(n_table));
  b.block_copies.resize(size_t(n_copies));
  for (int32_t& t : b.token_ids) t = r.next();
  for (int32_t& p : b.positions) p = r.next();
  for (KvSlot& s : b.kv_slots) {
    s.block_id = r.next();
    s.offset = r.next();
  }
  for (size_t i = 0; i < b.seqs.size(); ++i) {
    BatchSequence& s = b.seqs[i];
    s.token_start = r.next();
    s.n_new_tokens = r.next();
    s.context_len = r.next();
    s.block_table_start = r.next();
    s.n_blocks = r.next();
    const int32_t mode = r.next();
    if (mode < int32_t(LogitsMode::kNone) || mode > int32_t(LogitsMode::kPooled)) {
      return make_error("batch wire form: sequence ", i, " has logits mode ", mode);
    }
    s.logits = LogitsMode(mode);
    s.state_slot = r.next();
    s.draft_state_slot = r.next();
    if (s.token_start < 0 || s.n_new_tokens < 0 || s.token_start > n_tokens ||
        s.n_new_tokens > n_tokens - s.token_start || s.block_table_start < 0 || s.n_blocks < 0 ||
        s.block_table_start > n_table ||
        uint64_t(s.n_blocks) * G > uint64_t(n_table - s.block_table_start)) {
      return make_error("batch wire form: sequence ", i, " reaches outside the arrays");
    }
  }
  for (int32_t& id : b.block_tables) id = r.next();
  for (BlockCopy& c : b.block_copies) {
    c.src = r.next();
    c.dst = r.next();
  }
  const int32_t n_state_copies = r.next();
  if (n_state_copies < 0 ||
      uint64_t(n_state_copies) * 8 != bytes.size() - kHeaderBytes - 4 * ints) {
    return make_error("batch wire form: ", n_state_copies, " state copies do not fill the ",
                      bytes.size() - kHeaderBytes - 4 * ints, " bytes left");
  }
  b.state_copies.resize(size_t(n_state_copies));
  for (BlockCopy& c : b.state_copies) {
    c.src = r.next();
    c.dst = r.next();
  }
  return b;
}

int32_t Batch::n_logit_rows() const {
  int32_t n = 0;
  for (const BatchSequence& s : seqs) {
    if (s.logits == LogitsMode::kLast || s.logits == LogitsMode::kPooled) n += 1;
    if (s.logits == LogitsMode::kAll) n += s.n_new_tokens;
  }
  return n;
}

void set_logit_rows(const Batch& batch, Logits& out) {
  out.seq_index.clear();
  out.token_index.clear();
  for (int32_t si = 0; si < batch.n_seqs(); ++si) {
    const BatchSequence& seq = batch.seqs[size_t(si)];
    if (seq.logits == LogitsMode::kNone) continue;
    const int32_t first = seq.logits == LogitsMode::kAll ? 0 : seq.n_new_tokens - 1;
    for (int32_t j = first; j < seq.n_new_tokens; ++j) {
      out.seq_index.push_back(si);
      out.token_index.push_back(seq.token_start + j);
    }
  }
}

void split_batch(const Batch& batch, int n_parts, std::vector<Batch>& parts) {
  const int32_t n_seqs = batch.n_seqs();
  n_parts = std::max(1, std::min<int>(n_parts, std::max<int32_t>(1, n_seqs)));
  parts.resize(size_t(n_parts));
  int32_t si = 0;
  for (int p = 0; p < n_parts; ++p) {
    Batch& b = parts[size_t(p)];
    b.clear();
    b.block_size = batch.block_size;
    b.n_kv_groups = batch.n_kv_groups;
    if (p == 0) {
      b.block_copies = batch.block_copies;
      b.state_copies = batch.state_copies;
    }
    // Sequences until this part holds its share of the tokens (at least one each, and one
    // left for every later part).
    const int64_t goal = int64_t(batch.n_tokens()) * (p + 1) / n_parts;
    while (si < n_seqs && (b.n_seqs() == 0 || (batch.seqs[size_t(si)].token_start < goal &&
                                               n_seqs - si > n_parts - 1 - p))) {
      const BatchSequence& s = batch.seqs[size_t(si)];
      BatchSequence t = s;
      t.token_start = b.n_tokens();
      t.block_table_start = int32_t(b.block_tables.size());
      const auto tok = [&](const auto& v) {
        return std::span(v).subspan(size_t(s.token_start), size_t(s.n_new_tokens));
      };
      b.token_ids.insert(b.token_ids.end(), tok(batch.token_ids).begin(),
                         tok(batch.token_ids).end());
      b.positions.insert(b.positions.end(), tok(batch.positions).begin(),
                         tok(batch.positions).end());
      const size_t G = size_t(batch.n_kv_groups);
      const auto slots =
          std::span(batch.kv_slots).subspan(size_t(s.token_start) * G, size_t(s.n_new_tokens) * G);
      b.kv_slots.insert(b.kv_slots.end(), slots.begin(), slots.end());
      const auto table = std::span(batch.block_tables)
                             .subspan(size_t(s.block_table_start), size_t(s.n_blocks) * G);
      b.block_tables.insert(b.block_tables.end(), table.begin(), table.end());
      b.seqs.push_back(t);
      ++si;
    }
  }
}

void append_logits(const Logits& part, int32_t seq_offset, int32_t token_offset, Logits& out) {
  out.n_vocab = part.n_vocab;
  out.values.insert(out.values.end(), part.values.begin(), part.values.end());
  for (int32_t r = 0; r < part.n_rows(); ++r) {
    out.seq_index.push_back(part.seq_index[size_t(r)] + seq_offset);
    out.token_index.push_back(part.token_index[size_t(r)] + token_offset);
  }
}

void Batch::clear() {
  token_ids.clear();
  positions.clear();
  kv_slots.clear();
  seqs.clear();
  block_tables.clear();
  block_copies.clear();
  state_copies.clear();
}

namespace {

// Appends one sequence whose block table of group g is row(g) (n_groups of them, one length).
template <class Row>
void append_sequence(Batch& b, std::span<const int32_t> tokens, int32_t n_computed,
                     int32_t n_groups, Row row, LogitsMode logits, int32_t state_slot) {
  BatchSequence s;
  s.token_start = b.n_tokens();
  s.n_new_tokens = int32_t(tokens.size());
  s.context_len = n_computed + s.n_new_tokens;
  s.block_table_start = int32_t(b.block_tables.size());
  s.n_blocks = n_groups > 0 ? int32_t(row(0).size()) : 0;
  s.logits = logits;
  s.state_slot = state_slot;
  for (int32_t j = 0; j < s.n_new_tokens; ++j) {
    const int32_t pos = n_computed + j;
    b.token_ids.push_back(tokens[size_t(j)]);
    b.positions.push_back(pos);
    // A table too short for the step gets block -1 here, which the executor rejects.
    const size_t blk = size_t(pos / b.block_size);
    for (int32_t g = 0; g < n_groups; ++g) {
      const std::span<const int32_t> table = row(g);
      b.kv_slots.push_back({blk < table.size() ? table[blk] : -1, pos % b.block_size});
    }
  }
  for (int32_t g = 0; g < n_groups; ++g) {
    const std::span<const int32_t> table = row(g);
    assert(int32_t(table.size()) == s.n_blocks);
    b.block_tables.insert(b.block_tables.end(), table.begin(), table.end());
  }
  b.seqs.push_back(s);
}

}  // namespace

void Batch::add_sequence(std::span<const int32_t> tokens, int32_t n_computed,
                         std::span<const int32_t> block_table, LogitsMode logits,
                         int32_t state_slot) {
  assert(n_kv_groups == 1);
  append_sequence(
      *this, tokens, n_computed, 1, [&](int32_t) { return block_table; }, logits, state_slot);
}

void Batch::add_sequence(std::span<const int32_t> tokens, int32_t n_computed,
                         std::span<const std::vector<int32_t>> tables, LogitsMode logits,
                         int32_t state_slot) {
  assert(int32_t(tables.size()) == n_kv_groups);
  append_sequence(
      *this, tokens, n_computed, int32_t(tables.size()),
      [&](int32_t g) { return std::span<const int32_t>(tables[size_t(g)]); }, logits, state_slot);
}

Status validate_batch(const Batch& b, const ExecutorCapacity& cap) {
  const int bs = cap.block_size;
  if (b.block_size != bs) {
    return make_error("batch: block size ", b.block_size, " differs from the executor's ", bs);
  }
  const int32_t G = cap.n_kv_groups();
  if (b.n_kv_groups != G) {
    return make_error("batch: ", b.n_kv_groups, " K/V groups, the executor has ", G);
  }
  const size_t n = b.token_ids.size();
  if (b.positions.size() != n || b.kv_slots.size() != n * size_t(G)) {
    return make_error("batch: ", n, " token ids but ", b.positions.size(), " positions and ",
                      b.kv_slots.size(), " KV slots (", G, " per token)");
  }
  int64_t next_token = 0;
  const bool pooled = !b.seqs.empty() && b.seqs[0].logits == LogitsMode::kPooled;
  for (size_t si = 0; si < b.seqs.size(); ++si) {
    const BatchSequence& s = b.seqs[si];
    if ((s.logits == LogitsMode::kPooled) != pooled) {
      return make_error("batch: sequence ", si, " mixes pooled (embedding) and logits sequences ",
                        "in one batch");
    }
    if (pooled && s.context_len != s.n_new_tokens) {
      return make_error("batch: pooled sequence ", si, " has ", s.n_new_tokens,
                        " new tokens of a context of ", s.context_len,
                        " (an embedding runs its whole sequence in one step)");
    }
    if (s.token_start != next_token || s.n_new_tokens < 1 ||
        int64_t(s.token_start) + s.n_new_tokens > int64_t(n)) {
      return make_error("batch: sequence ", si, " covers tokens [", s.token_start, ", ",
                        int64_t(s.token_start) + s.n_new_tokens, ") but must start at ", next_token,
                        " with at least one token within the ", n, " tokens");
    }
    next_token += s.n_new_tokens;
    if (cap.n_state_slots > 0 ? s.state_slot < 0 || s.state_slot >= cap.n_state_slots
                              : s.state_slot != -1) {
      return make_error("batch: sequence ", si, " has state slot ", s.state_slot,
                        "; the executor has ", cap.n_state_slots,
                        " (a sequence names one of them, or -1 when there are none)");
    }
    if (s.draft_state_slot != -1) {
      // The executor's draft slots are the last n_draft_state_slots.
      const int32_t first = cap.n_state_slots - cap.n_draft_state_slots;
      if (s.draft_state_slot < first ||
          int64_t(s.draft_state_slot) + s.n_new_tokens - 1 > int64_t(cap.n_state_slots)) {
        return make_error("batch: sequence ", si, " has draft state slots [", s.draft_state_slot,
                          ", ", int64_t(s.draft_state_slot) + s.n_new_tokens - 1,
                          ") outside the executor's draft slots [", first, ", ", cap.n_state_slots,
                          ")");
      }
    }
    if (s.context_len < s.n_new_tokens || s.context_len > cap.n_ctx) {
      return make_error("batch: sequence ", si, " has context length ", s.context_len, " (",
                        s.n_new_tokens, " new tokens, model context ", cap.n_ctx, ")");
    }
    if (s.block_table_start < 0 || s.n_blocks < 0 ||
        int64_t(s.block_table_start) + int64_t(s.n_blocks) * G > int64_t(b.block_tables.size()) ||
        int64_t(s.n_blocks) * bs < s.context_len) {
      return make_error("batch: sequence ", si, " block tables [", s.block_table_start, ", +", G,
                        " x ", s.n_blocks, ") are out of range or too short for ", s.context_len,
                        " tokens");
    }
    const int32_t first_pos = s.context_len - s.n_new_tokens;
    const int32_t needed = int32_t((int64_t(s.context_len) + bs - 1) / bs);
    for (int32_t g = 0; g < G; ++g) {
      const int32_t* table = b.block_tables.data() + s.block_table_start + int64_t(g) * s.n_blocks;
      // Entries a windowed group released are stale but must still be valid ids (the kernels
      // may read, and mask, a few positions before a window).
      for (int32_t i = 0; i < needed; ++i) {
        if (table[i] < 0 || table[i] >= cap.n_blocks) {
          return make_error("batch: sequence ", si, " uses block ", table[i], " (the cache has ",
                            cap.n_blocks, "; K/V group ", g, ")");
        }
      }
      for (int32_t j = 0; j < s.n_new_tokens; ++j) {
        const size_t t = size_t(s.token_start + j);
        const int32_t p = first_pos + j;
        const KvSlot want{table[p / bs], p % bs};
        const KvSlot have = b.kv_slots[t * size_t(G) + size_t(g)];
        if (have.block_id != want.block_id || have.offset != want.offset) {
          return make_error("batch: token ", t, " of sequence ", si, " has KV slot (",
                            have.block_id, ", ", have.offset,
                            ") but its block table puts cache position ", p, " at (", want.block_id,
                            ", ", want.offset, ") (K/V group ", g, ")");
        }
      }
    }
    for (int32_t j = 0; j < s.n_new_tokens; ++j) {
      const size_t t = size_t(s.token_start + j);
      if (b.token_ids[t] < 0 || b.token_ids[t] >= cap.n_vocab) {
        return make_error("batch: token id ", b.token_ids[t], " at ", t, " is out of range [0, ",
                          cap.n_vocab, ")");
      }
      if (b.positions[t] < 0) return make_error("batch: negative position at token ", t);
    }
  }
  if (next_token != int64_t(n)) {
    return make_error("batch: sequences cover ", next_token, " of ", n, " tokens");
  }
  SLUICE_RETURN_IF_ERROR(validate_block_copies(b.block_copies, cap.n_blocks));
  for (const BlockCopy& c : b.state_copies) {
    if (c.src < 0 || c.src >= cap.n_state_slots || c.dst < 0 || c.dst >= cap.n_state_slots ||
        c.src == c.dst) {
      return make_error("batch: state copy (", c.src, " -> ", c.dst,
                        ") needs two distinct slots in [0, ", cap.n_state_slots, ")");
    }
  }
  return {};
}

Status validate_block_copies(std::span<const BlockCopy> copies, int32_t n_blocks) {
  for (size_t i = 0; i < copies.size(); ++i) {
    const BlockCopy& c = copies[i];
    if (c.src < 0 || c.src >= n_blocks || c.dst < 0 || c.dst >= n_blocks || c.src == c.dst) {
      return make_error("batch: block copy ", i, " (", c.src, " -> ", c.dst,
                        ") needs two distinct blocks in [0, ", n_blocks, ")");
    }
  }
  return {};
}

}  // namespace sluice
