// `--tp N` for the commands that run a model (run, serve, bench throughput): how a process
// takes its place among the tensor-parallel ranks (docs/distributed.md).
//
//   sluice serve m.gguf --tp 2           not under mpirun: re-executes itself as
//                                        `mpirun -np 2 sluice serve m.gguf --tp 2`
//   mpirun -np 2 sluice serve m.gguf --tp 2   (a hostfile for several hosts) uses the ranks
//                                        it is given: rank 0 runs the command (engine, server),
//                                        the others run their shard until rank 0 stops
#pragma once

#include <optional>
#include <string>

#include "cli/engine_session.h"

namespace sluice::cli {

// main() records the command line for the re-execution under mpirun.
void set_command_line(int argc, char** argv);

// Call first in a command that runs a model. nullopt: this process goes on with the command
// (one process, or rank 0). Otherwise this process was a worker rank (or the launcher of
// mpirun) and has finished: the exit code to return. Errors are printed.
std::optional<int> take_rank(const std::string& command, const std::string& model_spec,
                             const EngineCliOptions& o);

// Rank 0 of a --tp / --pp job got SIGTERM/SIGINT: mpirun forwards it to every rank (a
// worker ends at once) and tears the job down when a rank dies, so nothing can finish: the wait
// in progress and every later one fail, failing the requests in flight with that error. False
// (nothing done) in a one-process run.
bool interrupt_ranks();

// The communication term of the step cost model for `comm`'s layout and measured link.
CommSpec comm_spec(const parallel::MpiComm& comm, const ModelConfig& whole, int n_micro);

// Rank 0's part of open_engine_session, once s.model holds shard 0: sizes the KV cache for
// every rank, agrees with the workers on the model and options, and puts a ShardedExecutor
// into `s`.
Status start_rank0(EngineSession& s, const EngineCliOptions& o, KvType kv_type);

}  // namespace sluice::cli
