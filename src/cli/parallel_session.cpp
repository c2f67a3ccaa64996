#include "cli/parallel_session.h"

#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <thread>
#include <vector>

#include "base/log.h"
#include "cli/commands.h"
#include "cli/model_arg.h"
#include "model/shard.h"
#include "parallel/mpi_comm.h"
#include "parallel/sharded_executor.h"

namespace sluice::cli {
namespace {

std::vector<std::string> g_args;

// Ranks of this job on this host (they share its cores and memory).
int local_ranks(int fallback) {
  const char* v = std::getenv("OMPI_COMM_WORLD_LOCAL_SIZE");
  return v && std::atoi(v) > 0 ? std::atoi(v) : fallback;
}

// Options every rank derives the same way: threads per rank (all cores shared among this
// host's ranks unless --threads says), the KV budget per rank.
CpuExecutorOptions rank_executor_options(const EngineCliOptions& o, KvType kv_type,
                                         int32_t n_blocks, parallel::MpiComm& comm) {
  CpuExecutorOptions eo;
  const int hw = int(std::max(1u, std::thread::hardware_concurrency()));
  eo.n_threads = o.threads > 0 ? o.threads : std::max(1, hw / local_ranks(comm.world_size()));
  eo.block_size = o.block_size;
  eo.kv_type = kv_type;
  eo.n_blocks = n_blocks;
  eo.n_state_slots = o.max_seqs;
  eo.n_state_checkpoints = o.state_checkpoints > 0 ? o.state_checkpoints : -1;
  eo.collective = &comm;
  eo.stage_link = &comm;
  return eo;
}

// Rank 0 sizes the KV cache (every rank's share of the budget) and tells the others.
Result<int32_t> agree_on_blocks(parallel::MpiComm& comm, const Model& model,
                                const EngineCliOptions& o, KvType kv_type, std::string* desc) {
  std::vector<uint8_t> msg(4, 0);
  if (comm.rank() == 0) {
    // --kv-cache-gb is the whole job's budget; the default share of this host's memory is
    // split among its ranks. Either way at most max_seqs full contexts.
    const double gb = o.kv_cache_gb > 0 ? o.kv_cache_gb / comm.world_size() : 0;
    SLUICE_ASSIGN_OR_RETURN(KvPlan plan, plan_kv_cache(model.config(), o.block_size, kv_type, gb,
                                                       o.max_seqs, o.state_checkpoints));
    if (gb == 0) {
      const size_t per_block = kv_bytes_per_block(model.config(), o.block_size, kv_type);
      const double share =
          double(available_memory_bytes()) * kDefaultKvMemoryShare / local_ranks(comm.world_size());
      plan.n_blocks =
          std::max<int32_t>(1, int32_t(std::min<double>(plan.n_blocks, share / double(per_block))));
    }
    if (desc) {
      *desc = "KV cache: " + std::to_string(plan.n_blocks) + " blocks of " +
              std::to_string(o.block_size) + " tokens on each of " +
              std::to_string(comm.world_size()) + " ranks (" + plan.description + ")";
    }
    std::memcpy(msg.data(), &plan.n_blocks, 4);
  }
  SLUICE_RETURN_IF_ERROR(comm.broadcast(msg));
  int32_t n_blocks = 0;
  std::memcpy(&n_blocks, msg.data(), 4);
  return n_blocks;
}

Result<Model> load_shard(const std::string& path, const EngineCliOptions& o,
                         const parallel::MpiComm& comm) {
  ModelOptions mo;
  mo.n_ctx = o.ctx_size;
  mo.allow_context_beyond_trained = true;
  mo.tp_rank = comm.rank();
  mo.tp_size = o.tp;
  mo.pp_rank = comm.stage();
  mo.pp_size = o.pp;
  return Model::load(path, mo);
}

[[noreturn]] void relaunch(int n) {
  std::vector<std::string> args = {"mpirun"};
  if (::geteuid() == 0) args.push_back("--allow-run-as-root");
  // Ranks on this host only, as many as asked whatever the core count; no pinning (each
  // rank's pool spreads over the cores it is given).
  for (const char* a : {"--oversubscribe", "--bind-to", "none", "-np"}) args.push_back(a);
  args.push_back(std::to_string(n));
  char self[4096];
  const ssize_t len = ::readlink("/proc/self/exe", self, sizeof self - 1);
  args.push_back(len > 0 ? std::string(self, size_t(len)) : g_args.at(0));
  args.insert(args.end(), g_args.begin() + 1, g_args.end());
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  std::fflush(nullptr);
  ::execvp("mpirun", argv.data());
  std::fprintf(stderr,
               "sluice: error: %d ranks (--tp x --pp) need mpirun (Open MPI: apt install "
               "openmpi-bin): %s\n",
               n, std::strerror(errno));
  std::_Exit(127);
}

}  // namespace

void set_command_line(int argc, char** argv) {
  g_args.assign(argv, argv + argc);
}

CommSpec comm_spec(const parallel::MpiComm& comm, const ModelConfig& whole, int n_micro) {
  CommSpec c;
  c.tp = comm.size();
  c.pp = comm.n_stages();
  c.n_micro = n_micro;
  c.link_bytes_per_s = comm.link_bytes_per_s();
  c.link_latency_s = comm.link_latency_s();
  c.n_layer = whole.n_layer;
  c.n_embd = whole.n_embd;
  c.n_vocab = whole.n_vocab;
  return c;
}

bool interrupt_ranks() {
  parallel::MpiComm* c = parallel::MpiComm::current();
  if (!c || c->world_size() == 1) return false;
  c->interrupt();
  return true;
}

std::optional<int> take_rank(const std::string& command, const std::string& model_spec,
                             const EngineCliOptions& o) {
  if (o.tp < 1 || o.tp > 1024) return report_error(command, "--tp must be in 1..1024");
  if (o.pp < 1 || o.pp > 1024) return report_error(command, "--pp must be in 1..1024");
  if (o.pp_micro < 0) return report_error(command, "--pp-microbatches must not be negative");
  if (o.pp_depth < 0 || o.pp_depth > 64)
    return report_error(command, "--pp-depth must be in 0..64");
  if (o.tp * o.pp == 1) return std::nullopt;
  if (!parallel::launched_by_mpi()) relaunch(o.tp * o.pp);
  auto comm = parallel::MpiComm::init();
  if (!comm.ok()) return report_error(command, comm.message());
  parallel::MpiComm& c = **comm;
  if (Status st = c.set_layout(o.tp, o.pp); !st.ok()) return report_error(command, st.message());
  if (c.world_rank() == 0) return std::nullopt;
  // A worker outlives a SIGINT/SIGTERM that mpirun forwards to every rank: rank 0 takes it, fails
  // what runs with a clear error and stops the workers (or exits, which they notice within
  // 0.1 s). Were a worker to die of it, mpirun would kill rank 0 before its clients hear why.
  sigset_t stop;
  sigemptyset(&stop);
  sigaddset(&stop, SIGINT);
  sigaddset(&stop, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop, nullptr);
  // A worker: its shard until rank 0 says stop. Its errors name the rank.
  const std::string who = command + " (rank " + std::to_string(c.world_rank()) + ")";
  const Status st = [&]() -> Status {
    SLUICE_ASSIGN_OR_RETURN(std::string path, resolve_model_arg(model_spec));
    SLUICE_ASSIGN_OR_RETURN(Model model, load_shard(path, o, c));
    const KvType kv_type = o.kv_type == "f32" ? KvType::kF32 : KvType::kF16;
    SLUICE_ASSIGN_OR_RETURN(int32_t n_blocks, agree_on_blocks(c, model, o, kv_type, nullptr));
    const CpuExecutorOptions eo = rank_executor_options(o, kv_type, n_blocks, c);
    SLUICE_ASSIGN_OR_RETURN(auto exec, CpuExecutor::create(model, eo));
    SLUICE_RETURN_IF_ERROR(
        parallel::check_ranks_agree(c, parallel::rank_fingerprint(model, describe_options(eo))));
    return parallel::run_worker(c, *exec);
  }();
  if (!st.ok()) return report_error(who, st.message());
  parallel::MpiComm::finalize();
  return 0;
}

Status start_rank0(EngineSession& s, const EngineCliOptions& o, KvType kv_type) {
  SLUICE_ASSIGN_OR_RETURN(parallel::MpiComm * comm, parallel::MpiComm::init());
  std::string desc;
  SLUICE_ASSIGN_OR_RETURN(int32_t n_blocks, agree_on_blocks(*comm, s.model, o, kv_type, &desc));
  SLUICE_LOG(kInfo, desc);
  s.kv.n_blocks = n_blocks;
  s.kv.description = desc;
  const CpuExecutorOptions eo = rank_executor_options(o, kv_type, n_blocks, *comm);
  SLUICE_ASSIGN_OR_RETURN(auto exec, CpuExecutor::create(s.model, eo));
  SLUICE_RETURN_IF_ERROR(parallel::check_ranks_agree(
      *comm, parallel::rank_fingerprint(s.model, describe_options(eo))));
  SLUICE_LOG(kInfo, "tensor parallel: " + std::to_string(o.tp) +
                        " ranks, pipeline: " + std::to_string(o.pp) + " stages, " +
                        std::to_string(eo.n_threads) + " threads each");
  s.rank_threads = eo.n_threads;
  s.sharded =
      std::make_unique<parallel::ShardedExecutor>(*comm, std::move(exec), o.pp_micro, o.pp_depth);
  // The step cost model counts the whole model; the communication term the measured link.
  ModelOptions whole;
  whole.n_ctx = s.model.config().n_ctx;
  whole.allow_context_beyond_trained = true;
  SLUICE_ASSIGN_OR_RETURN(Model m, Model::load(s.model.file().path(), whole));
  s.whole_model = std::make_unique<Model>(std::move(m));
  s.comm = comm_spec(*comm, s.whole_model->config(), s.sharded->n_micro());
  if (o.pp > 1) {
    // Stages balanced by weight bytes (model/shard.h): the last also holds the output.
    const std::vector<double> bytes = layer_weight_bytes(s.whole_model->weights());
    const double out_bytes = output_weight_bytes(s.whole_model->weights());
    std::string stages;
    for (int st = 0; st < o.pp; ++st) {
      const Range r = stage_layers(bytes, out_bytes, st, o.pp);
      double gb = st + 1 == o.pp ? out_bytes : 0;
      for (int64_t l = r.begin; l < r.end; ++l) gb += bytes[size_t(l)];
      char buf[96];
      std::snprintf(buf, sizeof buf, "%slayers %lld-%lld%s (%.2f GB)", st ? ", " : "",
                    (long long)r.begin, (long long)r.end - 1, st + 1 == o.pp ? " + output" : "",
                    gb / 1e9);
      stages += buf;
    }
    SLUICE_LOG(kInfo, "pipeline stages: " + stages + " (weights of a tensor-parallel group)");
  }
  SLUICE_LOG(kInfo, "link between ranks 0 and 1: " +
                        std::to_string(comm->link_latency_s() * 1e6).substr(0, 5) + " us, " +
                        std::to_string(comm->link_bytes_per_s() / 1e9).substr(0, 5) + " GB/s");
  std::atexit([] { parallel::MpiComm::finalize(); });
  return {};
}

}  // namespace sluice::cli
