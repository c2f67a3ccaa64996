#include "parallel/sharded_executor.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <thread>

#include "base/fnv1a.h"
#include "base/log.h"

namespace sluice::parallel {
namespace {

// The last byte of every message rank 0 broadcasts.
enum class Op : uint8_t {
  kExecute = 1,
  kCopyBlocks = 2,
  kStop = 3,
  kExport = 4,
  kImport = 5,
  kExportStates = 6,  // as kExport / kImport, of recurrent state slots
  kImportStates = 7,
};

void put_u64(std::vector<uint8_t>& m, uint64_t v) {
  const size_t at = m.size();
  m.resize(at + 8);
  std::memcpy(m.data() + at, &v, 8);
}

// Reads a u64 at `at` (advanced); false past the end.
bool get_u64(std::span<const uint8_t> m, size_t& at, uint64_t& v) {
  if (at + 8 > m.size()) return false;
  std::memcpy(&v, m.data() + at, 8);
  at += 8;
  return true;
}

void put_ids(std::vector<uint8_t>& m, std::span<const int32_t> ids) {
  put_u64(m, ids.size());
  const size_t at = m.size();
  m.resize(at + ids.size() * 4);
  if (!ids.empty()) std::memcpy(m.data() + at, ids.data(), ids.size() * 4);
}

bool get_ids(std::span<const uint8_t> m, size_t& at, std::vector<int32_t>& ids) {
  uint64_t n = 0;
  if (!get_u64(m, at, n) || n > (m.size() - at) / 4) return false;
  ids.resize(size_t(n));
  if (n != 0) std::memcpy(ids.data(), m.data() + at, size_t(n) * 4);  // data() may be null
  at += size_t(n) * 4;
  return true;
}

// This rank's part of an export of `ids` (K/V blocks, or state slots when `states`): its
// layout tag, '\n', its bytes per block, '\n', then its bytes (or "!" and the error). Every rank
// sends it to rank 0.
std::vector<uint8_t> local_export(const Executor& exec, std::span<const int32_t> ids, bool states) {
  auto d = states ? exec.export_states(ids) : exec.export_blocks(ids);
  const std::string head =
      d.ok() ? d->layout + "\n" + std::to_string(d->bytes_per_block) + "\n" : "!" + d.message();
  std::vector<uint8_t> out(head.begin(), head.end());
  if (d.ok()) out.insert(out.end(), d->bytes.begin(), d->bytes.end());
  return out;
}

// One rank's part of an export, as rank 0 received it.
struct RankPart {
  std::string layout;
  size_t bytes_per_block = 0;
  const uint8_t* bytes = nullptr;  // [n_blocks, bytes_per_block], into the gathered message
};

// Every rank exports its part of blocks `ids` (the workers answer Op::kExport); rank 0 gets
// the parts in rank order (`all` holds the messages they point into).
Status gather_parts(MpiComm& comm, const Executor& exec, std::span<const int32_t> ids, bool states,
                    std::vector<std::vector<uint8_t>>& all, std::vector<RankPart>& parts) {
  SLUICE_RETURN_IF_ERROR(comm.gather_bytes(local_export(exec, ids, states), all));
  parts.clear();
  for (size_t r = 0; r < all.size(); ++r) {
    const std::vector<uint8_t>& a = all[r];
    if (!a.empty() && a[0] == '!') {
      return make_error("rank ", r, ": ", std::string(a.begin() + 1, a.end()));
    }
    const auto nl1 = std::find(a.begin(), a.end(), uint8_t('\n'));
    const auto nl2 = nl1 == a.end() ? a.end() : std::find(nl1 + 1, a.end(), uint8_t('\n'));
    if (nl2 == a.end()) return make_error("rank ", r, " sent a malformed KV export");
    RankPart part{std::string(a.begin(), nl1),
                  size_t(std::strtoull(std::string(nl1 + 1, nl2).c_str(), nullptr, 10)),
                  a.data() + (nl2 - a.begin()) + 1};
    if (size_t(a.end() - nl2 - 1) != part.bytes_per_block * ids.size()) {
      return make_error("rank ", r, " sent ", a.end() - nl2 - 1, " bytes for ", ids.size(),
                        " blocks of ", part.bytes_per_block);
    }
    parts.push_back(std::move(part));
  }
  return {};
}

// Every rank's status after an operation, at rank 0: the first error, or ok.
Status agree_status(MpiComm& comm, const Status& mine) {
  const std::string msg = mine.ok() ? "" : mine.message();
  std::vector<std::vector<uint8_t>> all;
  SLUICE_RETURN_IF_ERROR(comm.gather_bytes(std::vector<uint8_t>(msg.begin(), msg.end()), all));
  for (size_t r = 0; r < all.size(); ++r) {
    if (!all[r].empty()) {
      return make_error("rank ", r, ": ", std::string(all[r].begin(), all[r].end()));
    }
  }
  return {};
}

// This rank's slice of an import message (see ShardedExecutor::import_blocks) into its cache.
Status local_import(MpiComm& comm, Executor& exec, std::span<const uint8_t> m, bool states) {
  size_t at = 0;
  std::vector<int32_t> ids;
  uint64_t n_ranks = 0;
  if (!get_ids(m, at, ids) || !get_u64(m, at, n_ranks) || n_ranks != uint64_t(comm.world_size())) {
    return make_error("a malformed KV import message");
  }
  std::vector<uint64_t> sizes(static_cast<size_t>(n_ranks));
  uint64_t total = 0, offset = 0;
  for (uint64_t r = 0; r < n_ranks; ++r) {
    if (!get_u64(m, at, sizes[size_t(r)])) return make_error("a malformed KV import message");
    if (int(r) < comm.world_rank()) offset += sizes[size_t(r)];
    total += sizes[size_t(r)];
  }
  if (m.size() - at != total * ids.size()) return make_error("a KV import of the wrong size");
  SLUICE_ASSIGN_OR_RETURN(KvBlockData mine,
                          states ? exec.export_states({}) : exec.export_blocks({}));
  mine.n_blocks = int32_t(ids.size());
  const size_t part = size_t(sizes[size_t(comm.world_rank())]);
  mine.bytes.resize(part * ids.size());
  for (size_t i = 0; i < ids.size(); ++i) {
    std::memcpy(mine.bytes.data() + i * part, m.data() + at + i * total + offset, part);
  }
  return states ? exec.import_states(ids, mine) : exec.import_blocks(ids, mine);
}

}  // namespace

std::string rank_fingerprint(const Model& model, const std::string& executor) {
  // The header, metadata and tensor directory and the first 64 KiB of tensor data: a
  // re-quantized or re-converted file differs there.
  const GgufFile& f = model.file();
  const size_t n = std::min<size_t>(f.file_size(), f.data_offset() + (size_t(1) << 16));
  char buf[160];
  std::snprintf(buf, sizeof buf, "model %zu bytes, hash %016llx; --tp %d --pp %d; ", f.file_size(),
                (unsigned long long)fnv1a(f.bytes(), n), model.shard().tp_size,
                model.shard().pp_size);
  return buf + executor;
}

Status check_ranks_agree(MpiComm& comm, const std::string& fingerprint) {
  const std::vector<uint8_t> mine(fingerprint.begin(), fingerprint.end());
  std::vector<std::vector<uint8_t>> all;
  SLUICE_RETURN_IF_ERROR(comm.gather_bytes(mine, all));
  std::string verdict;
  for (size_t r = 1; r < all.size() && verdict.empty(); ++r) {
    const std::string theirs(all[r].begin(), all[r].end());
    if (theirs != fingerprint) {
      verdict = "rank " + std::to_string(r) + " differs from rank 0: it has " + theirs +
                "; rank 0 has " + fingerprint + " (the same model file and options on every rank)";
    }
  }
  std::vector<uint8_t> v(verdict.begin(), verdict.end());
  SLUICE_RETURN_IF_ERROR(comm.broadcast(v));
  if (!v.empty()) return make_error(std::string(v.begin(), v.end()));
  return {};
}

Status run_stage(MpiComm& comm, Executor& exec, const Batch& batch, int n_micro,
                 std::vector<Batch>& parts, Logits& out) {
  if (comm.n_stages() == 1) return exec.execute(batch, out);
  split_batch(batch, n_micro, parts);
  const bool sends_logits = comm.last_stage() && comm.rank() == 0;
  for (const Batch& part : parts) {
    SLUICE_RETURN_IF_ERROR(exec.execute(part, out));
    if (comm.failed()) break;
    if (sends_logits) comm.send_logits(out.values.data(), int64_t(out.values.size()));
  }
  return {};
}

void receive_logits(MpiComm& comm, int32_t n_vocab, const std::vector<Batch>& parts,
                    Logits& part_out, Logits& out) {
  out.values.clear();
  out.seq_index.clear();
  out.token_index.clear();
  out.n_vocab = n_vocab;
  int32_t seq0 = 0, tok0 = 0;
  for (const Batch& part : parts) {
    set_logit_rows(part, part_out);
    part_out.n_vocab = n_vocab;
    part_out.values.resize(size_t(part_out.n_rows()) * size_t(n_vocab));
    comm.recv_logits(part_out.values.data(), int64_t(part_out.values.size()));
    if (comm.failed()) return;
    append_logits(part_out, seq0, tok0, out);
    seq0 += part.n_seqs();
    tok0 += part.n_tokens();
  }
}

ShardedExecutor::ShardedExecutor(MpiComm& comm, std::unique_ptr<Executor> local, int n_micro,
                                 int depth)
    : comm_(comm), local_(std::move(local)) {
  if (comm.n_stages() > 1) {
    depth_ = depth > 0 ? depth : comm.n_stages();
    n_micro_ = n_micro > 0 ? n_micro : depth_ > 1 ? 1 : comm.n_stages();
  }
}

ShardedExecutor::~ShardedExecutor() {
  if (comm_.failed() || !drain().ok()) return;
  const std::vector<uint8_t> stop{uint8_t(Op::kStop)};
  if (comm_.post(stop).ok()) comm_.finish_posts();
  comm_.finish_sends();
}

Status ShardedExecutor::fail() const {
  const std::string msg = "MPI ranks: " + comm_.error();
  in_flight_.clear();
  if (!failing_) {
    failing_ = true;
    // The step's requests fail with this error now; the job ends shortly after, non-zero, so a
    // supervisor restarts it (the ranks cannot be rejoined).
    // Two seconds let the front end send the failed requests their errors; then this rank
    // leaves at once (MPI_Abort or MPI_Finalize could wait on the dead rank), and mpirun ends
    // the job.
    SLUICE_LOG(kError, msg + "; exiting in 2 s");
    std::thread([msg] {
      std::this_thread::sleep_for(std::chrono::seconds(2));
      std::fprintf(stderr, "sluice: error: %s\n", msg.c_str());
      std::fflush(nullptr);
      std::_Exit(1);
    }).detach();
  }
  return make_error(msg);
}

Status ShardedExecutor::execute(const Batch& batch, Logits& out) {
  if (!in_flight_.empty()) {
    return make_error("execute() with ", in_flight_.size(), " steps in flight (collect them)");
  }
  SLUICE_RETURN_IF_ERROR(submit(batch));
  return collect(out);
}

Status ShardedExecutor::submit(const Batch& batch) {
  if (comm_.failed()) return fail();
  if (int32_t(in_flight_.size()) >= depth_) {
    return make_error("submit() with ", in_flight_.size(), " steps in flight already (depth ",
                      depth_, ")");
  }
  SLUICE_RETURN_IF_ERROR(validate_batch(batch, capacity()));
  serialize_batch(batch, msg_);
  const uint32_t n_micro = uint32_t(n_micro_);
  msg_.insert(msg_.end(), reinterpret_cast<const uint8_t*>(&n_micro),
              reinterpret_cast<const uint8_t*>(&n_micro) + 4);
  msg_.push_back(uint8_t(Op::kExecute));
  InFlight f;
  if (!spare_.empty()) {
    f = std::move(spare_.back());
    spare_.pop_back();
  }
  f.received = false;
  f.before = comm_.stats();
  if (!comm_.post(msg_).ok()) return fail();
  // One stage: the logits are this rank's own, now.
  const Status st = run_stage(comm_, *local_, batch, n_micro_, f.parts, f.logits);
  if (comm_.failed()) return fail();
  SLUICE_RETURN_IF_ERROR(st);
  f.received = comm_.n_stages() == 1;
  in_flight_.push_back(std::move(f));
  return {};
}

Status ShardedExecutor::collect(Logits& out) {
  if (in_flight_.empty()) return make_error("collect() with no step in flight");
  InFlight& f = in_flight_.front();
  if (!f.received) {
    receive_logits(comm_, capacity().n_vocab, f.parts, part_out_, f.logits);
    if (comm_.failed()) return fail();
    f.received = true;
  }
  std::swap(out, f.logits);
  const MpiComm::Stats& after = comm_.stats();
  last_comm_ = {after.n_ops - f.before.n_ops, after.bytes - f.before.bytes,
                after.seconds - f.before.seconds};
  spare_.push_back(std::move(f));
  in_flight_.pop_front();
  return {};
}

Status ShardedExecutor::drain() const {
  for (InFlight& f : in_flight_) {
    if (f.received) continue;
    receive_logits(comm_, capacity().n_vocab, f.parts, part_out_, f.logits);
    if (comm_.failed()) return fail();
    f.received = true;
  }
  return {};
}

Status ShardedExecutor::copy_blocks(std::span<const BlockCopy> copies) {
  if (comm_.failed()) return fail();
  SLUICE_RETURN_IF_ERROR(validate_block_copies(copies, capacity().n_blocks));
  // The copies travel in the Batch wire form (a batch of no tokens).
  copies_.clear();
  copies_.block_copies.assign(copies.begin(), copies.end());
  serialize_batch(copies_, msg_);
  msg_.push_back(uint8_t(Op::kCopyBlocks));
  if (!comm_.post(msg_).ok()) return fail();
  return local_->copy_blocks(copies);
}

// Every rank exports its part of each block (its KV heads of its layers); rank 0 joins them,
// block by block in rank order, under a layout tag naming every rank's part:
//   "mpi 2x1 [f16 L16 H4 D64 B16 ...] [f16 L16 H4 D64 B16 ...]"  (tp x pp, then the parts)
// so only an executor with the same ranks and shards imports them.
Result<KvBlockData> ShardedExecutor::export_blocks(std::span<const int32_t> ids) const {
  return export_parts(ids, nullptr, false);
}

Result<KvBlockData> ShardedExecutor::export_states(std::span<const int32_t> slots) const {
  return export_parts(slots, nullptr, true);
}

Result<KvBlockData> ShardedExecutor::export_parts(std::span<const int32_t> ids,
                                                  std::vector<size_t>* rank_bytes,
                                                  bool states) const {
  if (comm_.failed()) return make_error("MPI ranks: " + comm_.error());
  // Every rank answers in a gather: the steps in flight must have left the last stage first.
  SLUICE_RETURN_IF_ERROR(drain());
  std::vector<uint8_t> msg;
  put_ids(msg, ids);
  msg.push_back(uint8_t(states ? Op::kExportStates : Op::kExport));
  SLUICE_RETURN_IF_ERROR(comm_.post(msg));
  std::vector<std::vector<uint8_t>> all;
  std::vector<RankPart> parts;
  SLUICE_RETURN_IF_ERROR(gather_parts(comm_, *local_, ids, states, all, parts));
  KvBlockData d;
  d.layout = "mpi " + std::to_string(comm_.size()) + "x" + std::to_string(comm_.n_stages());
  for (const RankPart& p : parts) {
    d.layout += " [" + p.layout + "]";
    d.bytes_per_block += p.bytes_per_block;
    if (rank_bytes) rank_bytes->push_back(p.bytes_per_block);
  }
  d.n_blocks = int32_t(ids.size());
  d.bytes.resize(d.bytes_per_block * ids.size());
  size_t at = 0;
  for (size_t i = 0; i < ids.size(); ++i) {
    for (const RankPart& p : parts) {
      std::memcpy(d.bytes.data() + at, p.bytes + i * p.bytes_per_block, p.bytes_per_block);
      at += p.bytes_per_block;
    }
  }
  return d;
}

// The layout must be this executor's (an export of no blocks gives it with each rank's share of
// a block); the whole data goes to every rank, which imports its slice of each block.
Status ShardedExecutor::import_blocks(std::span<const int32_t> ids, const KvBlockData& data) {
  return import_parts(ids, data, false);
}

Status ShardedExecutor::import_states(std::span<const int32_t> slots, const KvBlockData& data) {
  return import_parts(slots, data, true);
}

Status ShardedExecutor::import_parts(std::span<const int32_t> ids, const KvBlockData& data,
                                     bool states) {
  if (comm_.failed()) return fail();
  // An export of none: the layout, and each rank's bytes per block (or state slot).
  std::vector<size_t> rank_bytes;
  SLUICE_ASSIGN_OR_RETURN(KvBlockData shape, export_parts({}, &rank_bytes, states));
  const int32_t n_ids = states ? capacity().n_state_slots : capacity().n_blocks;
  if (data.layout != shape.layout) {
    return make_error("import: blocks of layout '", data.layout, "' do not fit these ranks' '",
                      shape.layout, "'");
  }
  if (int64_t(ids.size()) != data.n_blocks || data.bytes_per_block != shape.bytes_per_block ||
      data.bytes.size() != size_t(data.n_blocks) * data.bytes_per_block) {
    return make_error("import: ", ids.size(), " block ids for ", data.n_blocks, " blocks of data (",
                      data.bytes.size(), " bytes)");
  }
  for (size_t i = 0; i < ids.size(); ++i) {
    if (ids[i] < 0 || ids[i] >= n_ids) {
      return make_error("import: ", states ? "state slot " : "block ", ids[i], " at ", i,
                        " is out of range [0, ", n_ids, ")");
    }
  }
  std::vector<uint8_t> msg;
  put_ids(msg, ids);
  put_u64(msg, rank_bytes.size());
  for (size_t n : rank_bytes) put_u64(msg, n);
  msg.insert(msg.end(), data.bytes.begin(), data.bytes.end());
  msg.push_back(uint8_t(states ? Op::kImportStates : Op::kImport));
  SLUICE_RETURN_IF_ERROR(drain());
  if (!comm_.post(msg).ok()) return fail();
  msg.pop_back();
  return agree_status(comm_, local_import(comm_, *local_, msg, states));
}

Status run_worker(MpiComm& comm, Executor& exec) {
  std::vector<uint8_t> msg;
  Logits out;
  std::vector<Batch> parts;
  std::vector<std::vector<uint8_t>> dummy;  // gathers answer only at rank 0
  while (true) {
    SLUICE_RETURN_IF_ERROR(comm.receive_post(msg, /*idle=*/true));
    if (msg.empty()) return make_error("an empty message from rank 0");
    const auto op = Op(msg.back());
    msg.pop_back();
    switch (op) {
      case Op::kStop:
        comm.finish_sends();
        return {};
      case Op::kExecute: {
        if (msg.size() < 4) return make_error("a step message without its micro-batch count");
        uint32_t n_micro = 0;
        std::memcpy(&n_micro, msg.data() + msg.size() - 4, 4);
        msg.resize(msg.size() - 4);
        SLUICE_ASSIGN_OR_RETURN(Batch batch, deserialize_batch(msg));
        // Rank 0 validated the same batch against the same capacity: an error here is a bug.
        SLUICE_RETURN_IF_ERROR(run_stage(comm, exec, batch, int(n_micro), parts, out));
        break;
      }
      case Op::kCopyBlocks: {
        SLUICE_ASSIGN_OR_RETURN(Batch copies, deserialize_batch(msg));
        SLUICE_RETURN_IF_ERROR(exec.copy_blocks(copies.block_copies));
        break;
      }
      case Op::kExport:
      case Op::kExportStates: {
        size_t at = 0;
        std::vector<int32_t> ids;
        if (!get_ids(msg, at, ids)) return make_error("a malformed KV export message");
        SLUICE_RETURN_IF_ERROR(
            comm.gather_bytes(local_export(exec, ids, op == Op::kExportStates), dummy));
        break;
      }
      case Op::kImport:
      case Op::kImportStates:
        // A refusal here is reported to rank 0, which fails the import; the worker goes on.
        SLUICE_RETURN_IF_ERROR(
            agree_status(comm, local_import(comm, exec, msg, op == Op::kImportStates)));
        break;
      default:
        return make_error("an unknown message (op ", int(op), ") from rank 0");
    }
    if (comm.failed()) return make_error(comm.error());
  }
}

}  // namespace sluice::parallel
