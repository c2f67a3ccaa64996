// `sluice bench MODEL`: prefill and decode tokens/s of the CPU executor, driven directly with
// Batches (no engine, no sampling), with bytes moved per token, achieved GB/s, MBU against the
// measured read bandwidth and MFU against the measured peak. `sluice bench --roofline` measures
// and caches this machine's ceilings (read bandwidth, f32 FMA, bf16 and int8 dot peaks). On a
// shared host the bandwidth drifts between runs, so each test also re-probes it before every
// repetition and reports MBU* against what was available alongside it; MBU divides by the best
// reading (the cache, those probes, or a test that streamed faster), never a stale low one.
//
//   prefill p:  one sequence, one Batch of p tokens (logits for the last), fresh KV each rep
//   decode:     after a prefill of p tokens, n steps of 1 token (b = 1)
//   batch b:    b sequences with prompts of the first -p length, then n steps of one Batch
//               holding all b
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "cli/engine_session.h"
#include "cli/model_arg.h"
#include "cli/parallel_session.h"
#include "executor/cpu_executor.h"
#include "executor/step_roofline.h"
#include "gguf/types.h"
#include "kernels/matmul_isa.h"
#include "perf/machine.h"

namespace sluice::cli {
namespace {

struct BenchOptions {
  bool roofline = false;
  std::string model;
  std::vector<int> threads;
  std::vector<int> prompts = {512};
  int n_decode = 64;
  std::vector<int> batches = {1};
  int reps = 3;
  std::string format = "md";
  std::string roofline_file;
  bool probe = true;                 // probe the read bandwidth alongside each test (MBU*)
  int tp = 1, pp = 1, pp_micro = 0;  // tensor / pipeline parallel ranks (cli/parallel_session.h)
  int pp_depth = 0;
};

// The context every test fits in.
int bench_ctx(const BenchOptions& o) {
  return std::max(*std::max_element(o.prompts.begin(), o.prompts.end()), 16) + o.n_decode + 1;
}

// --tp / --pp: the engine options every rank derives its shard and KV cache from.
EngineCliOptions dist_options(const BenchOptions& o) {
  EngineCliOptions eo;
  eo.tp = o.tp;
  eo.pp = o.pp;
  eo.pp_micro = o.pp_micro;
  eo.pp_depth = o.pp_depth;
  eo.threads = o.threads.empty() ? 0 : o.threads.front();
  eo.ctx_size = bench_ctx(o);
  eo.max_seqs = *std::max_element(o.batches.begin(), o.batches.end()) + 1;
  eo.spec = "none";
  return eo;
}

struct Stat {
  double mean = 0, sd = 0, best = 0;
};

Stat stats(const std::vector<double>& v) {
  Stat s;
  for (double x : v) s.mean += x;
  s.mean /= double(v.size());
  for (double x : v) s.sd += (x - s.mean) * (x - s.mean);
  s.sd = v.size() > 1 ? std::sqrt(s.sd / double(v.size() - 1)) : 0;
  s.best = *std::max_element(v.begin(), v.end());
  return s;
}

struct Row {
  std::string test;  // "pp512", "tg64", "tg64 b16"
  int threads = 0;
  Stat tps;
  double bytes_per_token = 0;  // weights + K/V read per token
  double gbps = 0;             // at the mean rate
  double best_gbps = 0;        // at the best repetition's rate: what this test streamed
  double mbu = 0;              // gbps / mbu_gbps
  double mbu_gbps = 0;         // the read bandwidth MBU divides by (the best reading, below)
  std::string mbu_origin;      // where mbu_gbps comes from (MachineRoofline::read_origin)
  double probe_gbps = 0;       // read bandwidth probed alongside this test's repetitions
  double mbu_probe = 0;        // gbps / max(probe_gbps, best_gbps)
  double mfu = 0;              // prefill: FLOP/s / peak
  double roofline = 0;         // the planner's time for these exact batches / measured time
  double expert_reads = -1;    // MoE decode: (layer, expert) FFNs run per step, mean
  int batch = 1;               // decode sequences per step
  int n_layer = 0, n_used = 0, n_expert = 0;  // MoE: the model's layers and experts
  // --tp / --pp: seconds a step spent in messages between ranks (rank 0's, waits included)
  // and the link model's prediction (-1: one process).
  double comm_s = -1, comm_pred_s = -1;
};

class Runner {
 public:
  Runner(Executor& exec, StepRoofline* roof) : exec_(exec), roof_(roof) {}

  // Adds sequence `s`: the new tokens `toks` after `n_computed` computed ones, its block table
  // per K/V group grown (every block kept) and its recurrent state slot `s`, if any.
  void add(std::vector<std::vector<int32_t>>& tables, int32_t s, int32_t n_computed,
           const std::vector<int32_t>& toks) {
    const ExecutorCapacity cap = exec_.capacity();
    tables.resize(size_t(cap.n_kv_groups()));
    for (std::vector<int32_t>& t : tables) {
      blocks_->allocate_for(n_computed + int32_t(toks.size()), cap.block_size, t);
    }
    batch_.add_sequence(toks, n_computed, tables, LogitsMode::kLast,
                        cap.n_state_slots > 0 ? s : -1);
  }

  // Seconds for prefill of p tokens (fresh KV) and then n decode steps of `b` sequences, and
  // the roofline's seconds for the same batches.
  double predicted_prefill = 0, predicted_decode = 0;
  // MoE: the (layer, expert) FFNs the decode steps ran, and the steps.
  int64_t decode_expert_reads = 0, decode_steps = 0;
  // Tensor / pipeline parallel: communication seconds of the prefill step and of all decode
  // steps, measured and predicted.
  double comm_prefill = 0, comm_decode = 0, comm_pred_prefill = 0, comm_pred_decode = 0;
  Status run(int p, int n, int b, double& prefill_s, double& decode_s) {
    predicted_prefill = predicted_decode = 0;
    decode_expert_reads = decode_steps = 0;
    comm_prefill = comm_decode = comm_pred_prefill = comm_pred_decode = 0;
    const ExecutorCapacity cap = exec_.capacity();
    blocks_ = std::make_unique<BlockFreeList>(cap.n_blocks);
    const int n_vocab = cap.n_vocab;
    std::vector<std::vector<std::vector<int32_t>>> tables(static_cast<size_t>(b));
    std::vector<int32_t> ctx(static_cast<size_t>(b));
    batch_.clear();
    batch_.block_size = cap.block_size;
    batch_.n_kv_groups = cap.n_kv_groups();
    using clock = std::chrono::steady_clock;
    auto t0 = clock::now();
    for (int s = 0; s < b; ++s) {
      std::vector<int32_t> prompt(static_cast<size_t>(p));
      for (int i = 0; i < p; ++i) prompt[size_t(i)] = (1 + 37 * i + 101 * s) % n_vocab;
      add(tables[size_t(s)], s, 0, prompt);
      ctx[size_t(s)] = p;
    }
    SLUICE_RETURN_IF_ERROR(exec_.execute(batch_, out_));
    // The roofline of what ran (MoE: the experts it read), computed after the clock's span.
    const Batch prefill_batch = batch_;
    const int64_t prefill_reads = exec_.last_step_expert_reads();
    comm_prefill = exec_.last_step_comm().seconds;
    auto t1 = clock::now();
    // A pipelined executor (--pp) runs `depth` steps at once, each over its own group of the b
    // sequences (as the engine does): step k of group g + 1 enters stage 0 while step k of
    // group g is in stage 1.
    const int groups = std::clamp(exec_.pipeline_depth(), 1, b);
    std::deque<Batch> in_flight;  // submitted, oldest first
    const auto account = [&](const Batch& batch) {
      const int64_t reads = exec_.last_step_expert_reads();
      comm_decode += exec_.last_step_comm().seconds;
      if (roof_) {
        predicted_decode += roof_->predict(batch, nullptr, reads);
        comm_pred_decode += roof_->predict_comm(batch);
      }
      decode_expert_reads += std::max<int64_t>(reads, 0);
      ++decode_steps;
    };
    for (int step = 0; step < n; ++step) {
      for (int g = 0; g < groups; ++g) {
        batch_.clear();
        for (int s = g * b / groups; s < (g + 1) * b / groups; ++s) {
          const int32_t tok = (7 + 13 * step + s) % n_vocab;
          add(tables[size_t(s)], s, ctx[size_t(s)], {tok});
          ++ctx[size_t(s)];
        }
        if (groups == 1) {
          SLUICE_RETURN_IF_ERROR(exec_.execute(batch_, out_));
          account(batch_);
          continue;
        }
        if (int(in_flight.size()) == groups) {
          SLUICE_RETURN_IF_ERROR(exec_.collect(out_));
          account(in_flight.front());
          in_flight.pop_front();
        }
        SLUICE_RETURN_IF_ERROR(exec_.submit(batch_));
        in_flight.push_back(batch_);
      }
    }
    for (; !in_flight.empty(); in_flight.pop_front()) {
      SLUICE_RETURN_IF_ERROR(exec_.collect(out_));
      account(in_flight.front());
    }
    auto t2 = clock::now();
    if (roof_) {
      predicted_prefill = roof_->predict(prefill_batch, nullptr, prefill_reads);
      comm_pred_prefill = roof_->predict_comm(prefill_batch);
    }
    prefill_s = std::chrono::duration<double>(t1 - t0).count();
    decode_s = std::chrono::duration<double>(t2 - t1).count();
    return {};
  }

 private:
  Executor& exec_;
  StepRoofline* roof_;
  std::unique_ptr<BlockFreeList> blocks_;
  Batch batch_;
  Logits out_;
};

// The read bandwidth probed before each repetition of a test and after the last one (null
// probe: not measured), and the test's MBU against their mean.
class Probed {
 public:
  Probed(const BandwidthProbe* probe, int threads) : probe_(probe), threads_(threads) {}
  void sample() {
    const double g = probe_ ? probe_->measure(threads_) : 0;
    if (g > 0) gbps_.push_back(g);  // 0: the probe's buffer could not be allocated
  }
  void set(Row& r) const {
    if (gbps_.empty()) return;
    r.probe_gbps = stats(gbps_).mean;
    r.mbu_probe = r.gbps / std::max(r.probe_gbps, r.best_gbps);
  }
  double best() const { return gbps_.empty() ? 0 : stats(gbps_).best; }

 private:
  const BandwidthProbe* probe_;
  int threads_;
  std::vector<double> gbps_;
};

// Seconds from ISO-8601 UTC time a to b (a huge number when either does not parse).
double seconds_between(const std::string& a, const std::string& b) {
  auto parse = [](const std::string& t, std::time_t& out) {
    std::tm tm{};
    if (!strptime(t.c_str(), "%Y-%m-%dT%H:%M:%SZ", &tm)) return false;
    out = timegm(&tm);
    return true;
  };
  std::time_t ta = 0, tb = 0;
  if (!parse(a, ta) || !parse(b, tb)) return 1e18;
  return std::difftime(tb, ta);
}

std::string fixed1(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f", v);
  return buf;
}

struct BandwidthReading {
  double gbps = 0;
  std::string origin;
};

// Raises the cached reading for `n_cores` threads (all: read_gbps, 1: read_gbps_1t) to `gbps`
// in `r` and at `path`. by: the test that streamed it ("": the probe alongside the tests).
void save_reading(MachineRoofline& r, const std::string& path, int n_cores, double gbps,
                  const std::string& by) {
  if (n_cores == 1) r.read_gbps_1t = std::max(r.read_gbps_1t, gbps);
  if (n_cores == r.threads && gbps > r.read_gbps) {
    if (by.empty()) {
      r.read_gbps = r.probe_read_gbps = gbps;
      r.read_source = "probe";
      r.read_at = now_iso8601_utc();
    } else {
      raise_read_gbps(r, gbps, by);
    }
  }
  if (const Status st = save_roofline(r, path); !st.ok()) {
    std::fprintf(stderr, "note: %s\n", st.message().c_str());
  }
}

Status run_bench(const BenchOptions& o, std::vector<Row>& rows, std::string& desc) {
  SLUICE_ASSIGN_OR_RETURN(std::string path, resolve_model_arg(o.model));
  const int max_b = *std::max_element(o.batches.begin(), o.batches.end());
  const int n_ctx = bench_ctx(o);
  // The whole model: what one process runs, and with --tp / --pp (the ranks' shards run) its
  // shape and weights' bytes for the cost model, the session's copy (weights never read).
  const bool dist = o.tp * o.pp > 1;
  std::unique_ptr<EngineSession> session;
  std::optional<Model> own_model;
  if (dist) {
    SLUICE_ASSIGN_OR_RETURN(session, open_engine_session(path, dist_options(o)));
  } else {
    SLUICE_ASSIGN_OR_RETURN(Model m, Model::load(path, {n_ctx, true}));
    own_model.emplace(std::move(m));
  }
  const Model& model = dist ? *session->whole_model : *own_model;
  const ModelConfig& c = model.config();

  const MatmulIsa isa = matmul_isa_best();
  const std::string isa_name = matmul_isa_name(isa);
  const std::string roof_path = o.roofline_file.empty() ? default_roofline_path() : o.roofline_file;
  auto roof = load_roofline(roof_path);
  MachineRoofline r;
  if (roof.ok()) {
    r = *roof;
  } else {
    std::fprintf(stderr, "no cached roofline (%s); measuring (about 10 s)...\n",
                 roof.message().c_str());
    r = measure_machine_roofline(0, isa_name);
    (void)save_roofline(r, roof_path);
  }
  if (!r.simd.empty() && r.simd != isa_name) {
    std::fprintf(stderr,
                 "note: the cached roofline (%s) holds %s peaks; these kernels are %s, so MFU "
                 "divides by another ISA's peak (run `sluice bench --roofline` under this ISA)\n",
                 roof_path.c_str(), r.simd.c_str(), isa_name.c_str());
  }
  // The planner's view of the loaded model: matmul bytes as stored and parameters.
  const StepCostModel model_cost = make_step_cost_model(model, r, KvType::kF16);
  const double wbytes = model_cost.model.stored_weight_bytes;
  const double params = model_cost.model.n_params;
  // Multiply-adds per token: every parameter of a dense model, the active ones of an MoE.
  const double active_params = model_cost.model.n_params_active;
  const ModelWeights& mw = model.weights();
  const GgmlType wtype = mw.layers.empty() ? GgmlType::F32
                         : c.is_moe()      ? mw.layers[0].moe.gate[0].type
                                           : mw.layers[0].w_gate.type;
  // MoE: the weights a decode step reads are the shared ones (attention, routers, shared
  // experts, output) plus the experts it ran, counted by the executor.
  const double expert_bytes = model_cost.expert_layer_bytes;
  const double shared_bytes = wbytes - expert_bytes * c.n_expert * c.n_layer;
  auto decode_wbytes = [&](const Runner& run) {
    if (!c.is_moe() || run.decode_steps == 0) return wbytes;
    return shared_bytes + expert_bytes * double(run.decode_expert_reads) / double(run.decode_steps);
  };
  // The peak the prefill arithmetic runs on.
  double peak = r.peak_gflops_f32;
  const char* peak_name = "f32 FMA";
  if (matmul_uses_int8_acts(wtype) && r.peak_gops_int8 > 0 && isa != MatmulIsa::kScalar) {
    peak = r.peak_gops_int8;
    peak_name = isa == MatmulIsa::kAvx512 ? "int8 VNNI" : "int8 maddubs";
  } else if (wtype == GgmlType::BF16 && r.peak_gflops_bf16 > 0) {
    peak = r.peak_gflops_bf16;
    peak_name = "bf16 dot";
  }
  char buf[512];
  std::snprintf(buf, sizeof buf,
                "%s: %s, %.2f GB of matmul weights (%.2f B params), kernels %s; roofline %.1f GB/s "
                "(1 thread %.1f), peak %s %.0f G/s",
                path.c_str(), std::string(type_name(wtype)).c_str(), wbytes / 1e9, params / 1e9,
                matmul_isa_description().c_str(), r.read_gbps, r.read_gbps_1t, peak_name, peak);
  desc = buf;
  if (dist) {
    std::snprintf(buf, sizeof buf,
                  "; --tp %d --pp %d (%d micro-batches a step), %d threads a rank; link between "
                  "ranks 0 and 1: %.2f GB/s, %.1f us a message",
                  o.tp, o.pp, session->sharded->n_micro(), session->rank_threads,
                  session->comm.link_bytes_per_s / 1e9, session->comm.link_latency_s * 1e6);
    desc += buf;
  }
  if (c.is_moe()) {
    std::snprintf(buf, sizeof buf,
                  "; MoE: %d of %d experts a token, %.2f GB shared + %.1f MB per (layer, expert), "
                  "MB/token counts the experts each step ran",
                  c.n_expert_used, c.n_expert, shared_bytes / 1e9, expert_bytes / 1e6);
    desc += buf;
  }

  std::unique_ptr<BandwidthProbe> probe_buf;
  if (o.probe) probe_buf = std::make_unique<BandwidthProbe>(0, isa_name);
  const BandwidthProbe* probe = probe_buf.get();

  // K/V bytes read per decode token at context L (f16 cache): 2 (K and V) x layers x kv_dim x 2.
  const double kv_per_pos = 2.0 * c.n_layer * c.kv_dim() * 2.0;
  const bool has_b1 = std::find(o.batches.begin(), o.batches.end(), 1) != o.batches.end();
  std::vector<int> threads = o.threads;
  if (threads.empty() || dist) threads.assign(1, dist ? session->rank_threads : 0);
  for (int t : threads) {
    std::unique_ptr<CpuExecutor> own;
    if (!dist) {
      CpuExecutorOptions eo;
      eo.n_threads = t;
      eo.n_blocks = int(c.kv_cache_layout().n_groups()) * (max_b * ((n_ctx + 15) / 16 + 1) + 4);
      eo.n_state_slots = max_b;
      SLUICE_ASSIGN_OR_RETURN(own, CpuExecutor::create(model, eo));
    }
    Executor& exec = dist ? session->exec() : *own;
    // The ceilings of the cores used: bandwidth as measured with 1 or all threads, peaks pro
    // rata. Ranks on this host share its cores and memory: all of them count.
    const int nt = dist ? t : own->n_threads();
    const int n_cores = dist ? std::min(r.threads, nt * o.tp * o.pp) : nt;
    const double cached_bw = n_cores == 1 ? r.read_gbps_1t : r.read_gbps;
    // The roofline column's bandwidth: the cache, or the probe now where that reads higher (a
    // stale low cache would put the roofline above 100%).
    const double start_probe = probe ? probe->measure(nt) : 0;
    const double bw = std::max(cached_bw, start_probe);
    const double share = double(n_cores) / r.threads;
    StepCostModel cost = model_cost;
    cost.hw.hbm_bytes_per_s = bw * 1e9;
    cost.hw.flops_bf16 *= share;
    cost.hw.ops_int8 *= share;
    if (dist) cost.comm = session->comm;
    StepRoofline roof(cost);
    Runner runner(exec, &roof);
    const size_t first_row = rows.size();
    double probe_best = 0;  // the best probe reading alongside these tests
    double ps = 0, ds = 0;
    SLUICE_RETURN_IF_ERROR(runner.run(8, 2, 1, ps, ds));  // warm-up: pages in the weights
    for (int p : o.prompts) {
      std::vector<double> pp, tg;
      double pred_p = 0, pred_d = 0, meas_p = 0, meas_d = 0, read_bytes = 0;
      double comm_p = 0, comm_pp = 0, comm_d = 0, comm_pd = 0, decode_steps = 0;
      Probed probed(probe, nt);
      for (int rep = 0; rep < o.reps; ++rep) {
        probed.sample();
        SLUICE_RETURN_IF_ERROR(runner.run(p, has_b1 ? o.n_decode : 0, 1, ps, ds));
        pp.push_back(p / ps);
        pred_p += runner.predicted_prefill;
        meas_p += ps;
        comm_p += runner.comm_prefill;
        comm_pp += runner.comm_pred_prefill;
        comm_d += runner.comm_decode;
        comm_pd += runner.comm_pred_decode;
        decode_steps += double(runner.decode_steps);
        if (has_b1 && o.n_decode > 0 && ds > 0) {
          tg.push_back(o.n_decode / ds);
          pred_d += runner.predicted_decode;
          meas_d += ds;
          read_bytes += decode_wbytes(runner);
        }
      }
      probed.sample();
      Row pr;
      pr.test = "pp" + std::to_string(p);
      pr.threads = nt;
      pr.tps = stats(pp);
      pr.bytes_per_token = wbytes / p;
      pr.gbps = pr.tps.mean * pr.bytes_per_token / 1e9;
      pr.best_gbps = pr.tps.best * pr.bytes_per_token / 1e9;
      probed.set(pr);
      probe_best = std::max(probe_best, probed.best());
      // The FLOPs done: the output projection (in active_params once; the embedding lookup is
      // not) runs for the one logits row only. Counting it for all p tokens overstated MFU by
      // V * D / params, 21% on Llama-3.2-1B, which put F16 prefill above 100%.
      const double out_params = double(c.n_vocab) * c.n_embd;
      const double flops = 2.0 * (active_params - out_params) * p + 2.0 * out_params +
                           2.0 * c.n_layer * double(p) * p * c.q_dim();
      pr.mfu = flops / (p / pr.tps.mean) / 1e9 / (peak * share);
      pr.roofline = pred_p / meas_p;
      if (dist) {
        pr.comm_s = comm_p / o.reps;
        pr.comm_pred_s = comm_pp / o.reps;
      }
      rows.push_back(pr);
      if (!tg.empty()) {
        Row dr;
        dr.test = "tg" + std::to_string(o.n_decode) + " @" + std::to_string(p);
        dr.threads = nt;
        dr.tps = stats(tg);
        dr.bytes_per_token = read_bytes / double(tg.size()) + kv_per_pos * (p + o.n_decode / 2.0);
        if (c.is_moe()) {
          dr.expert_reads = (read_bytes / double(tg.size()) - shared_bytes) / expert_bytes;
          dr.n_layer = c.n_layer;
          dr.n_used = c.n_expert_used;
          dr.n_expert = c.n_expert;
        }
        dr.gbps = dr.tps.mean * dr.bytes_per_token / 1e9;
        dr.best_gbps = dr.tps.best * dr.bytes_per_token / 1e9;
        probed.set(dr);
        dr.roofline = pred_d / meas_d;
        if (dist && decode_steps > 0) {
          dr.comm_s = comm_d / decode_steps;
          dr.comm_pred_s = comm_pd / decode_steps;
        }
        rows.push_back(dr);
      }
    }
    // Batched decode: b sequences with prompts of the first -p length, decoding together.
    const int bp = o.prompts.front();
    for (int b : o.batches) {
      if (b == 1 || o.n_decode == 0) continue;
      std::vector<double> tg;
      double pred = 0, meas = 0, read_bytes = 0, comm = 0, comm_pred = 0, steps = 0;
      Probed probed(probe, nt);
      for (int rep = 0; rep < o.reps; ++rep) {
        probed.sample();
        SLUICE_RETURN_IF_ERROR(runner.run(bp, o.n_decode, b, ps, ds));
        tg.push_back(double(b) * o.n_decode / ds);
        pred += runner.predicted_decode;
        meas += ds;
        comm += runner.comm_decode;
        comm_pred += runner.comm_pred_decode;
        steps += double(runner.decode_steps);
        read_bytes += decode_wbytes(runner);
      }
      probed.sample();
      Row br;
      br.test =
          "tg" + std::to_string(o.n_decode) + " b" + std::to_string(b) + " @" + std::to_string(bp);
      br.threads = nt;
      br.tps = stats(tg);
      const double step_wbytes = read_bytes / double(tg.size());
      br.bytes_per_token = (step_wbytes + b * kv_per_pos * (bp + o.n_decode / 2.0)) / b;
      br.batch = b;
      if (c.is_moe()) {
        br.expert_reads = (step_wbytes - shared_bytes) / expert_bytes;
        br.n_layer = c.n_layer;
        br.n_used = c.n_expert_used;
        br.n_expert = c.n_expert;
      }
      br.gbps = br.tps.mean * br.bytes_per_token / 1e9;
      br.best_gbps = br.tps.best * br.bytes_per_token / 1e9;
      probed.set(br);
      probe_best = std::max(probe_best, probed.best());
      br.roofline = pred / meas;
      if (dist && steps > 0) {
        br.comm_s = comm / steps;
        br.comm_pred_s = comm_pred / steps;
      }
      rows.push_back(br);
    }
    // MBU divides by the best reading: the cache, a probe alongside, or a test that streamed
    // faster (bytes / its best repetition's time), so MBU <= 100% and a stale low cache never
    // shows. A raise is saved unless the model fits in the caches or ranks share the host.
    BandwidthReading reading{cached_bw, n_cores == 1 && r.threads != 1
                                            ? "the probe (1 thread) at " + r.measured_at
                                            : r.read_origin()};
    probe_best = std::max(probe_best, start_probe);
    const bool dram = wbytes >= std::max(256.0 * (1 << 20), 8.0 * double(last_level_cache_bytes()));
    if (probe_best > reading.gbps) {
      reading = {probe_best, "the probe alongside these tests at " + now_iso8601_utc()};
    }
    std::string by;
    for (size_t i = first_row; i < rows.size(); ++i) {
      if (rows[i].best_gbps > reading.gbps) {
        by = "bench " + rows[i].test + " (" + std::to_string(nt) + " threads)";
        reading = {rows[i].best_gbps, "raised by " + by + " at " + now_iso8601_utc() +
                                          " (the cache read " + fixed1(cached_bw) + " GB/s)"};
      }
    }
    if (!dram && reading.gbps > cached_bw) {
      reading.origin += "; the model fits in the caches: not saved";
    }
    for (size_t i = first_row; i < rows.size(); ++i) {
      rows[i].mbu_gbps = reading.gbps;
      rows[i].mbu_origin = reading.origin;
      rows[i].mbu = rows[i].gbps / reading.gbps;
    }
    if (reading.gbps > cached_bw && dram && !dist) {
      save_reading(r, roof_path, n_cores, reading.gbps, by);
    }
  }
  return {};
}

void print_rows(const BenchOptions& o, const std::string& desc, const std::vector<Row>& rows) {
  if (o.format == "json") {
    std::printf("{\"model\": \"%s\", \"results\": [\n", desc.c_str());
    for (size_t i = 0; i < rows.size(); ++i) {
      const Row& r = rows[i];
      std::printf(
          "  {\"test\": \"%s\", \"threads\": %d, \"tok_s\": %.3f, \"tok_s_sd\": %.3f, "
          "\"tok_s_best\": %.3f, \"bytes_per_token\": %.0f, \"gb_s\": %.2f, \"mbu\": %.3f, "
          "\"gb_s_best\": %.2f, \"mbu_gb_s\": %.2f, \"mbu_origin\": \"%s\", \"probe_gb_s\": %.2f, "
          "\"mbu_probe\": %.3f, \"mfu\": %.3f, \"roofline\": %.3f",
          r.test.c_str(), r.threads, r.tps.mean, r.tps.sd, r.tps.best, r.bytes_per_token, r.gbps,
          r.mbu, r.best_gbps, r.mbu_gbps, r.mbu_origin.c_str(), r.probe_gbps, r.mbu_probe, r.mfu,
          r.roofline);
      // MoE decode rows: the (layer, expert) FFNs each step ran, against a token-by-token run.
      if (r.expert_reads >= 0) {
        std::printf(", \"expert_reads_per_layer\": %.3f, \"ungrouped_reads_per_layer\": %d",
                    r.expert_reads / std::max(1, r.n_layer), r.batch * r.n_used);
      }
      if (r.comm_s >= 0) {
        std::printf(", \"comm_ms_per_step\": %.4f, \"comm_predicted_ms_per_step\": %.4f",
                    r.comm_s * 1e3, r.comm_pred_s * 1e3);
      }
      std::printf("}%s\n", i + 1 < rows.size() ? "," : "");
    }
    std::printf("]}\n");
    return;
  }
  std::printf("%s\n\n", desc.c_str());
  const bool comm = !rows.empty() && rows.front().comm_s >= 0;
  std::printf(
      "| test | threads | tok/s | best | MB/token | GB/s | MBU | probe GB/s | MBU* | MFU | "
      "roofline |%s\n",
      comm ? " comm ms/step | predicted |" : "");
  std::printf("|---|---|---|---|---|---|---|---|---|---|---|%s\n", comm ? "---|---|" : "");
  for (const Row& r : rows) {
    char mfu[32] = "", probe[32] = "", mbu_probe[32] = "";
    if (r.mfu > 0) std::snprintf(mfu, sizeof mfu, "%.1f%%", 100 * r.mfu);
    if (r.probe_gbps > 0) {
      std::snprintf(probe, sizeof probe, "%.1f", r.probe_gbps);
      std::snprintf(mbu_probe, sizeof mbu_probe, "%.1f%%", 100 * r.mbu_probe);
    }
    std::printf("| %s | %d | %.2f ± %.2f | %.2f | %.1f | %.1f | %.1f%% | %s | %s | %s | %.1f%% |",
                r.test.c_str(), r.threads, r.tps.mean, r.tps.sd, r.tps.best,
                r.bytes_per_token / 1e6, r.gbps, 100 * r.mbu, probe, mbu_probe, mfu,
                100 * r.roofline);
    if (comm) std::printf(" %.3f | %.3f |", r.comm_s * 1e3, r.comm_pred_s * 1e3);
    std::printf("\n");
  }
  bool first_moe = true;
  for (const Row& r : rows) {
    if (r.expert_reads < 0) continue;
    const double layers = std::max(1.0, double(r.n_layer));
    std::printf(
        "%s%s: %.2f expert FFNs run per layer per step (each reads its expert once); ungrouped "
        "(every token reading its own): %d; every expert: %d\n",
        first_moe ? "\n" : "", r.test.c_str(), r.expert_reads / layers, r.batch * r.n_used,
        r.n_expert);
    first_moe = false;
  }
  if (std::any_of(rows.begin(), rows.end(), [](const Row& r) { return r.mfu > 1.0; })) {
    std::printf(
        "\nMFU above 100%%: the cached peak (%s) is below what this run reached; it was measured "
        "while the cores were busy with other work. Rerun `sluice bench --roofline` on a quiet "
        "host.\n",
        (o.roofline_file.empty() ? default_roofline_path() : o.roofline_file).c_str());
  }
  std::printf("\n");
  for (size_t i = 0; i < rows.size(); ++i) {
    if (i > 0 && rows[i].threads == rows[i - 1].threads) continue;
    std::printf("MBU (%d threads) divides by %.1f GB/s: %s\n", rows[i].threads, rows[i].mbu_gbps,
                rows[i].mbu_origin.c_str());
  }
  std::printf(
      "MBU: against the best reading of the read bandwidth: the cache (`--roofline`), the probe "
      "alongside these tests, or a test that streamed faster (bytes / its best repetition), so "
      "it never passes 100%%. MBU*: against the read bandwidth probed before each repetition and "
      "after the last (probe GB/s, their mean; the test's own best if higher)%s.%s\n",
      o.probe ? "" : "; --no-probe: not measured",
      comm ? " comm ms/step: rank 0's time in messages between ranks a step (waits for slower "
             "ranks included); predicted: the link model (docs/distributed.md)."
           : "");
}

}  // namespace

void register_bench(CLI::App& app, int& exit_code) {
  auto opt = std::make_shared<BenchOptions>();
  CLI::App* cmd = app.add_subcommand(
      "bench",
      "Benchmark a model's prefill/decode on the CPU executor; --roofline measures this machine");
  cmd->add_option("model", opt->model, "GGUF model (path or hf:// spec)");
  cmd->add_flag(
      "--roofline", opt->roofline,
      "Measure read bandwidth and peak FLOP/s; cache them for MBU/MFU and `plan --hw local`");
  cmd->add_option("-t,--threads", opt->threads,
                  "Thread counts, comma separated (default: all cores; --roofline uses the first)")
      ->delimiter(',');
  cmd->add_option("-p,--prompt", opt->prompts, "Prompt lengths to prefill (default 512)")
      ->delimiter(',');
  cmd->add_option("-n,--n-decode", opt->n_decode, "Decode steps after each prefill (default 64)");
  cmd->add_option("-b,--batch", opt->batches, "Sequences decoding together (default 1)")
      ->delimiter(',');
  cmd->add_option("-r,--reps", opt->reps, "Repetitions (default 3)");
  cmd->add_flag(
      "!--no-probe", opt->probe,
      "Do not probe the read bandwidth alongside each test (no MBU* column, 512 MiB less memory)");
  cmd->add_option("--output-format", opt->format, "md or json")
      ->check(CLI::IsMember({"md", "json"}));
  cmd->add_option("--tp", opt->tp, "Tensor-parallel ranks (MPI; see `sluice run --help`)");
  cmd->add_option("--pp", opt->pp, "Pipeline stages (MPI)");
  cmd->add_option("--pp-microbatches", opt->pp_micro,
                  "Micro-batches per step with --pp (0: 1 with steps in flight, else --pp)");
  cmd->add_option(
      "--pp-depth", opt->pp_depth,
      "Decode steps in flight with --pp, each over b/depth of the sequences (0: --pp; 1: "
      "one step of all b at a time)");
  cmd->add_option("--roofline-file", opt->roofline_file,
                  "The cached ceilings: written by --roofline, read for MBU/MFU (default: " +
                      default_roofline_path() + ")");
  cmd->callback([cmd, opt, &exit_code] {
    for (const CLI::App* sub : cmd->get_subcommands()) {
      if (sub->parsed()) return;  // e.g. `bench throughput` runs its own callback
    }
    if (!opt->roofline) {
      if (opt->model.empty()) {
        exit_code = report_error("bench", "give a MODEL to benchmark, or --roofline");
        return;
      }
      if (opt->reps < 1 || opt->n_decode < 0 || opt->prompts.empty() || opt->batches.empty() ||
          *std::min_element(opt->prompts.begin(), opt->prompts.end()) < 1 ||
          *std::min_element(opt->batches.begin(), opt->batches.end()) < 1) {
        exit_code = report_error("bench", "-p and -b need values >= 1, -r >= 1, -n >= 0");
        return;
      }
      if (auto code = take_rank("bench", opt->model, dist_options(*opt))) {
        exit_code = *code;  // a worker rank (or mpirun's launcher) has finished
        return;
      }
      std::vector<Row> rows;
      std::string desc;
      const Status st = run_bench(*opt, rows, desc);
      if (!st.ok()) {
        exit_code = report_error("bench", st.message());
        return;
      }
      print_rows(*opt, desc, rows);
      return;
    }
    std::fprintf(stderr, "measuring (about 10 s)...\n");
    MachineRoofline r = measure_machine_roofline(opt->threads.empty() ? 0 : opt->threads[0],
                                                 matmul_isa_name(matmul_isa_best()));
    const std::string path =
        opt->roofline_file.empty() ? default_roofline_path() : opt->roofline_file;
    std::printf("cpu:                 %s\n", r.cpu.c_str());
    std::printf(
        "read bandwidth:      %.1f GB/s (1 thread), %.1f GB/s (%d threads): the probe, "
        "read as decode reads (%s)\n",
        r.read_gbps_1t, r.read_gbps, r.threads, r.simd.c_str());
    if (r.stream_read_gbps > 0) {
      std::printf(
          "STREAM-style read:   %.1f GB/s (%d threads, 1 GiB, no software prefetch); the "
          "probe's passes between its passes: %.1f GB/s (%+.1f%%)\n",
          r.stream_read_gbps, r.threads, r.stream_probe_gbps,
          100 * (r.stream_probe_gbps / r.stream_read_gbps - 1));
    }
    // Keep the best recent reading: on a shared host a probe can read low for minutes, and a
    // lower one within the hour (same CPU, threads and ISA) is the noise, not the machine.
    if (auto old = load_roofline(path); old.ok() && old->format >= 2 && old->cpu == r.cpu &&
                                        old->threads == r.threads && old->simd == r.simd &&
                                        old->read_gbps > r.read_gbps &&
                                        seconds_between(old->read_at, r.measured_at) < 3600) {
      std::printf("kept:                %.1f GB/s, the best reading within the hour (%s)\n",
                  old->read_gbps, old->read_origin().c_str());
      r.read_gbps = old->read_gbps;
      r.read_source = old->read_source;
      r.read_at = old->read_at;
      r.read_by = old->read_by;
    }
    std::printf("peak f32 FMA:        %.1f GFLOP/s\n", r.peak_gflops_f32);
    std::printf("peak bf16 dot:       %.1f GFLOP/s%s\n", r.peak_gflops_bf16,
                r.peak_gflops_bf16 > 0 ? ""
                : r.simd != "avx512"   ? " (none on these kernels)"
                                       : " (no AVX512-BF16)");
    std::printf("peak int8 dot:       %.1f GOP/s%s\n", r.peak_gops_int8,
                r.peak_gops_int8 <= 0 ? " (no AVX2)"
                : r.simd == "avx512" && __builtin_cpu_supports("avx512vnni")
                    ? " (AVX512-VNNI vpdpbusd)"
                : cpu_has_avx_vnni() ? " (AVX-VNNI vpdpbusd)"
                                     : " (AVX2 vpmaddubsw + vpmaddwd)");
    std::printf("ridge (f32):         %.1f FLOP/byte\n", r.peak_gflops_f32 / r.read_gbps);
    Status st = save_roofline(r, path);
    if (!st.ok()) {
      exit_code = report_error("bench", st.message());
      return;
    }
    std::printf("saved:               %s\n", path.c_str());
  });
}

}  // namespace sluice::cli
