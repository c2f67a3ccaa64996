#include "dist/sharded_executor.h"

#include <chrono>
#include <cstdio>
#include <cstring>
#include <thread>

#include "base/log.h"

namespace sluice::dist {
namespace {

// The last byte of every message rank 0 broadcasts.
enum class Op : uint8_t { kExecute = 1, kCopyBlocks = 2, kStop = 3 };

uint64_t fnv1a(const uint8_t* p, size_t n, uint64_t h = 1469598103934665603ull) {
  for (size_t i = 0; i < n; ++i) h = (h ^ p[i]) * 1099511628211ull;
  return h;
}

void put_copies(std::span<const BlockCopy> copies, std::vector<uint8_t>& msg) {
  msg.resize(copies.size() * 8);
  for (size_t i = 0; i < copies.size(); ++i) {
    const int32_t v[2] = {copies[i].src, copies[i].dst};
    std::memcpy(msg.data() + i * 8, v, 8);
  }
}

std::vector<BlockCopy> get_copies(std::span<const uint8_t> msg) {
  std::vector<BlockCopy> copies(msg.size() / 8);
  for (size_t i = 0; i < copies.size(); ++i) {
    int32_t v[2];
    std::memcpy(v, msg.data() + i * 8, 8);
    copies[i] = {v[0], v[1]};
  }
  return copies;
}

}  // namespace

std::string rank_fingerprint(const Model& model, const CpuExecutorOptions& o) {
  // The header, metadata and tensor directory and the first 64 KiB of tensor data: a
  // re-quantized or re-converted file differs there.
  const GgufFile& f = model.file();
  const size_t n = std::min<size_t>(f.file_size(), f.data_offset() + (size_t(1) << 16));
  char buf[256];
  std::snprintf(
      buf, sizeof buf,
      "model %zu bytes, hash %016llx; --tp %d --pp %d; blocks %d of %d tokens, kv %s, isa %d",
      f.file_size(), (unsigned long long)fnv1a(f.bytes(), n), model.shard().tp_size,
      model.shard().pp_size, o.n_blocks, o.block_size, o.kv_type == KvType::kF32 ? "f32" : "f16",
      int(o.matmul_isa));
  return buf;
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

Status run_step(MpiComm& comm, CpuExecutor& exec, const Batch& batch, int n_micro, Logits& out,
                StepBuffers& buf) {
  if (comm.n_stages() == 1) return exec.execute(batch, out);
  std::vector<Batch>& parts = buf.parts;
  Logits& part_out = buf.part_out;
  split_batch(batch, n_micro, parts);
  const bool sends_logits = comm.last_stage() && comm.rank() == 0;
  for (const Batch& part : parts) {
    SLUICE_RETURN_IF_ERROR(exec.execute(part, part_out));
    if (comm.failed()) break;
    if (sends_logits) comm.send_logits(part_out.values.data(), int64_t(part_out.values.size()));
  }
  if (comm.world_rank() == 0 && !comm.failed()) {
    out.values.clear();
    out.seq_index.clear();
    out.token_index.clear();
    out.n_vocab = exec.capacity().n_vocab;
    int32_t seq0 = 0, tok0 = 0;
    for (const Batch& part : parts) {
      set_logit_rows(part, part_out);
      part_out.n_vocab = out.n_vocab;
      part_out.values.resize(size_t(part_out.n_rows()) * size_t(out.n_vocab));
      comm.recv_logits(part_out.values.data(), int64_t(part_out.values.size()));
      append_logits(part_out, seq0, tok0, out);
      seq0 += part.n_seqs();
      tok0 += part.n_tokens();
    }
  }
  comm.finish_sends();
  return {};
}

ShardedExecutor::ShardedExecutor(MpiComm& comm, std::unique_ptr<CpuExecutor> local, int n_micro)
    : comm_(comm),
      local_(std::move(local)),
      n_micro_(comm.n_stages() == 1 ? 1
               : n_micro > 0        ? n_micro
                                    : comm.n_stages()) {}

ShardedExecutor::~ShardedExecutor() {
  if (comm_.failed()) return;
  std::vector<uint8_t> stop{uint8_t(Op::kStop)};
  (void)comm_.broadcast(stop);
}

Status ShardedExecutor::fail() {
  const std::string msg = "MPI ranks: " + comm_.error();
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
  if (comm_.failed()) return fail();
  SLUICE_RETURN_IF_ERROR(validate_batch(batch, capacity()));
  serialize_batch(batch, msg_);
  const uint32_t n_micro = uint32_t(n_micro_);
  msg_.insert(msg_.end(), reinterpret_cast<const uint8_t*>(&n_micro),
              reinterpret_cast<const uint8_t*>(&n_micro) + 4);
  msg_.push_back(uint8_t(Op::kExecute));
  const MpiComm::Stats before = comm_.stats();
  if (!comm_.broadcast(msg_).ok()) return fail();
  const Status st = run_step(comm_, *local_, batch, n_micro_, out, step_buf_);
  if (comm_.failed()) return fail();
  const MpiComm::Stats& after = comm_.stats();
  last_comm_ = {after.n_ops - before.n_ops, after.bytes - before.bytes,
                after.seconds - before.seconds};
  return st;
}

Status ShardedExecutor::copy_blocks(std::span<const BlockCopy> copies) {
  if (comm_.failed()) return fail();
  SLUICE_RETURN_IF_ERROR(validate_block_copies(copies, capacity().n_blocks));
  put_copies(copies, msg_);
  msg_.push_back(uint8_t(Op::kCopyBlocks));
  if (!comm_.broadcast(msg_).ok()) return fail();
  return local_->copy_blocks(copies);
}

Result<KvBlockData> ShardedExecutor::export_blocks(std::span<const int32_t>) const {
  return make_error("KV export from a tensor-parallel executor is not supported yet");
}

Status ShardedExecutor::import_blocks(std::span<const int32_t>, const KvBlockData&) {
  return make_error("KV import into a tensor-parallel executor is not supported yet");
}

Status run_worker(MpiComm& comm, CpuExecutor& exec) {
  std::vector<uint8_t> msg;
  Logits out;
  StepBuffers buf;
  while (true) {
    SLUICE_RETURN_IF_ERROR(comm.broadcast(msg, /*idle=*/true));
    if (msg.empty()) return make_error("an empty message from rank 0");
    const auto op = Op(msg.back());
    msg.pop_back();
    switch (op) {
      case Op::kStop:
        return {};
      case Op::kExecute: {
        if (msg.size() < 4) return make_error("a step message without its micro-batch count");
        uint32_t n_micro = 0;
        std::memcpy(&n_micro, msg.data() + msg.size() - 4, 4);
        msg.resize(msg.size() - 4);
        SLUICE_ASSIGN_OR_RETURN(Batch batch, deserialize_batch(msg));
        // Rank 0 validated the same batch against the same capacity: an error here is a bug.
        SLUICE_RETURN_IF_ERROR(run_step(comm, exec, batch, int(n_micro), out, buf));
        break;
      }
      case Op::kCopyBlocks:
        SLUICE_RETURN_IF_ERROR(exec.copy_blocks(get_copies(msg)));
        break;
      default:
        return make_error("an unknown message (op ", int(op), ") from rank 0");
    }
    if (comm.failed()) return make_error(comm.error());
  }
}

}  // namespace sluice::dist
