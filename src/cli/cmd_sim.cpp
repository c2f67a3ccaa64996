// `sluice sim`: a serving deployment on virtual hardware (sim/simulator.h). The production
// engine, scheduler and KV manager of every replica run over a simulated executor whose virtual
// clock advances by the roofline cost of each batch; the report is `sluice bench serve`'s.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "base/cache_layout.h"
#include "cli/commands.h"
#include "cli/engine_session.h"
#include "cli/model_arg.h"
#include "cli/model_cost.h"
#include "cli/workload_args.h"
#include "executor/kv_sizing.h"
#include "executor/sim_executor.h"
#include "loadgen/dataset.h"
#include "loadgen/report.h"
#include "loadgen/runner.h"
#include "model/model.h"
#include "perf/hardware.h"
#include "perf/machine.h"
#include "perf/planner.h"
#include "sim/calibration.h"
#include "sim/simulator.h"
#include "tokenizer/synthetic.h"
#include "tokenizer/tokenizer.h"

namespace sluice::cli {
namespace {

// Token ids of the simulated vocabulary: ordinary words [3, kSimVocab). Real ids are folded into
// it (prefix structure kept: distinct 16-token blocks stay distinct with overwhelming odds).
constexpr int32_t kSimVocab = 4096;

int32_t fold_id(int32_t id) {
  return kSyntheticFirstWord + int32_t(uint32_t(id) % uint32_t(kSimVocab - kSyntheticFirstWord));
}

struct Options {
  std::string model;
  std::string hw = "this";
  std::string roofline;     // --hw this: the `sluice bench --roofline` cache
  std::string calibration;  // JSON (sim/calibration.h); default for --hw this: the cached one
  bool ideal = false;       // no calibration: the bare roofline
  int tp = 1, pp = 1, pp_micro = 0;
  int pp_depth = 0;  // steps in flight with --pp (0: one per stage)
  int replicas = 1;
  int prefill_replicas = 0, decode_replicas = 0;
  double kv_link_gbps = 50, kv_link_latency_us = 10;
  std::string router = "cache_aware";
  router::PolicyConfig policy;
  int weight_bits = -1, kv_bits = 16, act_bits = -1;
  double mem_util = 0.9;
  double kv_cache_gb = 0;
  double link_gbps = 0, link_latency_us = 5;
  int ctx_size = 0;
  int max_seqs = 64, max_batch_tokens = 2048, prefill_chunk = 512, block_size = 16;
  bool no_prefix_cache = false;
  WorkloadOptions w;  // as `sluice bench serve`
  std::string find;
  int max_chips = 64;
  double slo_attainment = 90;
  double tie_gap_us = 100;
  bool calibrate = false;
  int threads = 0;
};

bool looks_like_file(const std::string& m) {
  return m.find('/') != std::string::npos || m.find(".gguf") != std::string::npos ||
         std::filesystem::exists(m);
}

// What one replica is: its cost model (one chip), KV capacity and calibration.
struct Deployment {
  StepCostModel cost;       // cost.hw: ONE chip
  double weight_bytes = 0;  // the whole model's
  double kv_bytes_per_token = 0;
  int32_t n_ctx = 0;
  SimCalibration calibration;
  std::optional<Tokenizer> tokenizer;  // the model file's (exact synthetic prompt lengths)
  bool local = false;
  std::string description;
};

Result<Deployment> build_deployment(const Options& o) {
  Deployment d;
  HardwareSpec chip;
  std::optional<MachineRoofline> machine;
  if (o.hw == "this" || o.hw == "local") {
    d.local = true;
    const std::string path = o.roofline.empty() ? default_roofline_path() : o.roofline;
    auto r = load_roofline(path);
    if (!r.ok()) {
      return make_error("--hw this needs this machine's measured roofline (", r.message(),
                        "): run `sluice bench --roofline` first");
    }
    machine = *r;
    chip = hardware_from_roofline(*r, double(available_memory_bytes()));
  } else if (const HardwareSpec* hw = find_hardware(o.hw)) {
    chip = *hw;
  } else {
    return make_error("unknown hardware '", o.hw, "': use 'this' or one of ", hardware_names());
  }

  SLUICE_ASSIGN_OR_RETURN(const ModelShape* shape, find_model_shape(o.model));
  if (shape) {
    d.cost.model = model_cost(*shape);
    d.cost.precision.weight_bits = o.weight_bits < 0 ? 16 : o.weight_bits;
    d.cost.precision.act_bits = o.act_bits < 0 ? 16 : o.act_bits;
    d.cost.comm.n_layer = shape->n_layer;
    d.cost.comm.n_embd = shape->n_embd;
    d.cost.comm.n_vocab = shape->n_vocab;
    d.n_ctx = o.ctx_size > 0 ? o.ctx_size : 32768;
  } else if (looks_like_file(o.model)) {
    SLUICE_ASSIGN_OR_RETURN(const std::string path, resolve_model_arg(o.model));
    ModelOptions mo;
    mo.n_ctx = o.ctx_size;
    // As `sluice run/serve -c` (engine_session.cpp): a longer context than the file states is
    // allowed, with the loader's warning. --calibrate needs more than 256 tokens.
    mo.allow_context_beyond_trained = true;
    SLUICE_ASSIGN_OR_RETURN(Model model, Model::load(path, mo));
    const KvType kv_type = o.kv_bits == 32 ? KvType::kF32 : KvType::kF16;
    // The engine's own step cost model for this file (what `sluice serve` compares against).
    MachineRoofline m = machine.value_or(MachineRoofline{});
    d.cost = make_step_cost_model(model, m, kv_type);
    if (!d.local) d.cost.precision.act_bits = o.act_bits < 0 ? 16 : o.act_bits;
    if (o.weight_bits > 0) d.cost.precision.weight_bits = o.weight_bits;
    const ModelConfig& c = model.config();
    d.cost.comm.n_layer = c.n_layer;
    d.cost.comm.n_embd = c.n_embd;
    d.cost.comm.n_vocab = c.n_vocab;
    d.n_ctx = c.n_ctx;
    SLUICE_ASSIGN_OR_RETURN(Tokenizer t, Tokenizer::load(path));
    d.tokenizer.emplace(std::move(t));
  } else {
    return make_error("unknown model '", o.model, "': give a .gguf path or one of ",
                      model_shape_names());
  }
  if (d.local && d.cost.hw.hbm_bytes_per_s <= 0) {
    // A preset model on this machine: its bandwidth and peaks as measured.
    d.cost.hw = chip;
    if (d.cost.precision.act_bits == 16 && machine && machine->peak_gflops_bf16 <= 0) {
      d.cost.hw.flops_bf16 = machine->peak_gflops_f32 * 1e9;
    }
  } else if (!d.local) {
    d.cost.hw = chip;
  }
  d.cost.hw.memory_bytes = chip.memory_bytes;
  if (o.kv_bits != 16 && o.kv_bits != 8 && o.kv_bits != 4 && o.kv_bits != 32) {
    return make_error("--kv-bits must be 16, 8 or 4");
  }
  if (shape) d.cost.precision.kv_bits = o.kv_bits;
  d.weight_bytes = weight_bytes(d.cost.model, d.cost.precision);
  d.kv_bytes_per_token = kv_bytes_per_token(d.cost.model, d.cost.precision);

  // Calibration: the file given, else (this machine) the cached fit, else the bare roofline.
  if (!o.ideal) {
    std::string cal = o.calibration;
    if (cal.empty() && d.local && std::filesystem::exists(sim::default_calibration_path())) {
      cal = sim::default_calibration_path();
    }
    if (!cal.empty()) {
      SLUICE_ASSIGN_OR_RETURN(d.calibration, sim::load_calibration(cal));
    }
  }
  return d;
}

// One layout of the service: tp x pp chips per replica, `replicas` of them.
struct Layout {
  int tp = 1, pp = 1, replicas = 1;
  int prefill = 0, decode = 0;  // disaggregated (then replicas is unused)
  bool disaggregated() const { return prefill > 0; }
  int chips() const { return tp * pp * (disaggregated() ? prefill + decode : replicas); }
  std::string name() const {
    std::string s = disaggregated()
                        ? std::to_string(prefill) + "P + " + std::to_string(decode) + "D"
                        : std::to_string(replicas);
    return s + " x tp" + std::to_string(tp) + (pp > 1 ? " pp" + std::to_string(pp) : "");
  }
};

Result<sim::ServiceConfig> service_config(const Options& o, const Deployment& d, const Layout& l) {
  sim::ServiceConfig sc;
  sc.replicas = l.replicas;
  sc.prefill_replicas = l.prefill;
  sc.decode_replicas = l.decode;
  sc.kv_link_bytes_per_s = o.kv_link_gbps * 1e9;
  sc.kv_link_latency_s = o.kv_link_latency_us * 1e-6;
  sc.kv_bytes_per_token = d.kv_bytes_per_token;
  SimExecutorConfig& ex = sc.executor;
  ex.cost = d.cost;
  ex.calibration = d.calibration;
  CommSpec& comm = ex.cost.comm;
  comm.tp = l.tp;
  comm.pp = l.pp;
  // As `sluice serve --pp` runs: one step in flight per stage, one micro-batch each.
  ex.pipeline_depth = o.pp_depth > 0 ? o.pp_depth : l.pp;
  comm.n_micro = o.pp_micro > 0 ? o.pp_micro : ex.pipeline_depth > 1 ? 1 : l.pp;
  if (l.tp > 1 || l.pp > 1) {
    comm.link_bytes_per_s = o.link_gbps > 0 ? o.link_gbps * 1e9 : d.cost.hw.link_bytes_per_s;
    comm.link_latency_s = o.link_latency_us * 1e-6;
    if (comm.link_bytes_per_s <= 0) {
      return make_error("--tp/--pp on '", o.hw, "' needs the link between chips: --link-gbps");
    }
  }
  // KV blocks: a given budget, else what the replica's chips hold beside the weights. A block
  // holds every layer's K/V for block_size tokens, or, with windowed layers, one K/V group's
  // (base/cache_layout.h, as the engine lays them out): the engine then releases a windowed
  // group's blocks outside its window, so a sequence holds kv_bytes_per_sequence.
  double kv_block_bytes = d.kv_bytes_per_token * o.block_size;
  double blocks_per_context = std::ceil(double(d.n_ctx) / o.block_size);
  if (const ModelCost& m = d.cost.model; m.kv_window > 0 && m.n_kv_layers > 0) {
    std::vector<int32_t> windows(size_t(m.n_kv_layers_windowed), m.kv_window);
    windows.resize(size_t(m.n_kv_layers), 0);
    const KvCacheLayout layout = KvCacheLayout::from_windows(windows);
    if (l.disaggregated() && !layout.single_group()) {
      return make_error("this model keeps its K/V in ", layout.n_groups(),
                        " groups of blocks (windowed and global layers); disaggregated serving "
                        "moves models of one group only (as sluice serve --role)");
    }
    ex.capacity.kv_group_windows = layout.group_window;
    kv_block_bytes = d.kv_bytes_per_token / m.n_kv_layers * layout.layers_per_group * o.block_size;
    blocks_per_context = double(layout.blocks_held(d.n_ctx, o.block_size));
  }
  double kv_bytes = 0;
  if (o.kv_cache_gb > 0) {
    kv_bytes = o.kv_cache_gb * double(1ull << 30);
  } else if (d.local) {
    kv_bytes = kDefaultKvMemoryShare * d.cost.hw.memory_bytes;
  } else {
    kv_bytes = double(l.tp * l.pp) * d.cost.hw.memory_bytes * o.mem_util - d.weight_bytes;
  }
  if (kv_bytes < kv_block_bytes * 2) {
    return make_error("the weights (", d.weight_bytes / 1e9,
                      " GB) leave no room for a KV cache on ", l.tp * l.pp, " x ", d.cost.hw.name);
  }
  const double blocks = std::min(kv_bytes / kv_block_bytes, 4e6);
  // As sluice serve: no more than max_seqs full contexts.
  const double cap = double(o.max_seqs) * blocks_per_context;
  ex.capacity.n_blocks = int32_t(std::min(blocks, std::max(cap, 1.0)));
  ex.capacity.block_size = o.block_size;
  ex.capacity.n_vocab = kSimVocab;
  ex.capacity.n_ctx = d.n_ctx;
  sc.engine.n_ctx = d.n_ctx;
  sc.engine.scheduler.max_seqs = o.max_seqs;
  sc.engine.scheduler.max_batch_tokens = o.max_batch_tokens;
  sc.engine.scheduler.prefill_chunk = o.prefill_chunk;
  sc.engine.enable_prefix_cache = !o.no_prefix_cache;
  sc.tie_gap_s = o.tie_gap_us * 1e-6;
  return sc;
}

// The workload as work items (arrivals for `rate`), and a description for the report.
struct Workload {
  std::vector<sim::WorkItem> items;
  std::string description;
  bool exact = false;
};

Result<Workload> build_workload(const Options& opts, const Deployment& d, double rate) {
  const WorkloadOptions& o = opts.w;
  Workload w;
  if (o.dataset == "synthetic") {
    const loadgen::SyntheticParams p = synthetic_params(o);
    const Tokenizer* tok = d.tokenizer ? &*d.tokenizer : nullptr;
    if (tok) {
      // The very prompts `sluice bench serve --tokenizer` sends, tokenized as the server does.
      SLUICE_ASSIGN_OR_RETURN(loadgen::Dataset ds, loadgen::make_synthetic(p, tok));
      w.description = ds.description;
      for (const loadgen::RequestSpec& r : ds.requests) {
        sim::WorkItem it;
        EncodeOptions eo;  // as the server tokenizes a completion prompt
        eo.parse_special = true;
        SLUICE_ASSIGN_OR_RETURN(std::vector<int32_t> ids, tok->encode(r.prompt, eo));
        it.prompt.reserve(ids.size());
        for (int32_t id : ids) it.prompt.push_back(fold_id(id));
        it.output_tokens = int32_t(r.output_tokens);
        w.items.push_back(std::move(it));
      }
    } else {
      std::mt19937_64 rng(o.seed);
      std::uniform_int_distribution<int32_t> word(kSyntheticFirstWord, kSimVocab - 1);
      std::vector<int32_t> prefix(size_t(std::max(o.prefix_len, 0)));
      for (int32_t& t : prefix) t = word(rng);
      for (int i = 0; i < o.num_prompts; ++i) {
        sim::WorkItem it;
        const int64_t in = std::max<int64_t>(loadgen::draw_length(o.input_len, o.range_ratio, rng),
                                             int64_t(prefix.size()) + 1);
        it.output_tokens = int32_t(loadgen::draw_length(o.output_len, o.range_ratio, rng));
        it.prompt = prefix;
        while (int64_t(it.prompt.size()) < in) it.prompt.push_back(word(rng));
        w.items.push_back(std::move(it));
      }
      w.description = "synthetic ids: " + std::to_string(o.input_len) + " in / " +
                      std::to_string(o.output_len) + " out tokens";
    }
    w.exact = true;
    const std::vector<double> t =
        loadgen::arrival_schedule(w.items.size(), rate, o.burstiness, o.seed);
    for (size_t i = 0; i < w.items.size(); ++i) w.items[i].arrival_s = t[i];
    return w;
  }
  loadgen::Dataset ds;
  if (o.mooncake()) {
    SLUICE_ASSIGN_OR_RETURN(ds, loadgen::load_mooncake(mooncake_params(o, kSimVocab), nullptr));
  } else if (o.multiturn()) {
    SLUICE_ASSIGN_OR_RETURN(ds,
                            loadgen::make_multiturn(multiturn_params(o, rate, kSimVocab), nullptr));
  } else {
    return make_error("--dataset must be synthetic, mooncake:FILE or multiturn (got '", o.dataset,
                      "')");
  }
  w.description = ds.description;
  w.exact = true;
  for (loadgen::RequestSpec& r : ds.requests) {
    sim::WorkItem it;
    it.arrival_s = r.arrival_s;
    it.prompt = std::move(r.prompt_ids);
    it.output_tokens = int32_t(std::max<int64_t>(r.output_tokens, 1));
    w.items.push_back(std::move(it));
  }
  return w;
}

struct SimRun {
  loadgen::RunResult run;
  sim::ServiceReport report;
};

Result<SimRun> run_once(const Options& o, const Deployment& d, const Layout& l, double rate,
                        const loadgen::Slo& slo) {
  SLUICE_ASSIGN_OR_RETURN(sim::ServiceConfig sc, service_config(o, d, l));
  SLUICE_ASSIGN_OR_RETURN(Workload w, build_workload(o, d, rate));
  SLUICE_ASSIGN_OR_RETURN(Tokenizer tok, make_synthetic_tokenizer(kSimVocab));
  const int first_pool = l.disaggregated() ? l.prefill : l.replicas;
  std::unique_ptr<sim::RoutePicker> picker = sim::make_router_picker(o.policy, first_pool);
  // Disaggregated: prefilled requests go to the decode replica with the least load.
  router::PolicyConfig decode_policy = o.policy;
  decode_policy.policy = router::Policy::kLeastLoad;
  std::unique_ptr<sim::RoutePicker> decode_picker =
      l.disaggregated() ? sim::make_router_picker(decode_policy, l.decode) : nullptr;
  const size_t n = w.items.size();
  SimRun r;
  SLUICE_ASSIGN_OR_RETURN(
      r.report, sim::simulate_service(sc, tok, std::move(w.items), *picker, decode_picker.get()));
  r.run.records = r.report.records;
  r.run.summary = loadgen::summarize(r.run.records, slo);
  loadgen::RunInfo& info = r.run.info;
  info.url = "sim: " + l.name() + " of " + d.cost.hw.name + ", router " + picker->name();
  info.endpoint = "completions";
  info.model = o.model;
  info.dataset = w.description;
  info.exact_token_counts = w.exact;
  info.num_prompts = int(n);
  info.rate = rate;
  // As bench serve: a trace's own times, or multiturn's conversations/s.
  if (o.w.mooncake()) info.rate = loadgen::kInfiniteRate;
  info.dataset_arrivals = o.w.dataset != "synthetic";
  info.burstiness = o.w.burstiness;
  info.seed = o.w.seed;
  loadgen::ServerCounters pc;
  pc.queried_blocks = double(r.report.prefix.queried_blocks);
  pc.hit_blocks = double(r.report.prefix.hit_blocks);
  pc.hit_tokens = double(r.report.prefix.hit_tokens);
  pc.prompt_tokens = double(r.report.prompt_tokens);
  for (const sim::ReplicaReport& rr : r.report.replicas) {
    pc.prompt_tokens_computed += double(rr.prompt_tokens_computed);
  }
  r.run.counters = pc;
  return r;
}

std::string sim_details(const Deployment& d, const SimRun& r) {
  const sim::ServiceReport& s = r.report;
  std::string out;
  char buf[512];
  std::snprintf(buf, sizeof buf,
                "Simulated %.1f s of service in %.2f s of wall time (%llu engine steps)\n"
                "Prefix cache hit rate: %.1f%% of queried blocks (%llu hit tokens of %llu prompt "
                "tokens)\n"
                "Calibration: %s (MBU %.2f, MFU %.2f, %.3f ms/step, %.1f us/seq, %.1f us/row)\n",
                s.virtual_s, s.wall_s, (unsigned long long)s.steps, 100 * s.prefix.hit_ratio(),
                (unsigned long long)s.prefix.hit_tokens, (unsigned long long)s.prompt_tokens,
                d.calibration.source.c_str(), d.calibration.mem_efficiency,
                d.calibration.compute_efficiency, d.calibration.step_overhead_s * 1e3,
                d.calibration.per_seq_s * 1e6, d.calibration.per_row_s * 1e6);
  out += buf;
  if (s.kv_transfers > 0) {
    std::snprintf(buf, sizeof buf, "KV transfers: %llu prompts, %.2f GB over the link\n",
                  (unsigned long long)s.kv_transfers, s.kv_transfer_bytes / 1e9);
    out += buf;
  }
  out +=
      "| replica | role | requests | steps | busy % | prefix hit % | preemptions | KV blocks |\n";
  out += "|---|---|---|---|---|---|---|---|\n";
  for (size_t i = 0; i < s.replicas.size(); ++i) {
    const sim::ReplicaReport& rr = s.replicas[i];
    std::snprintf(buf, sizeof buf, "| %zu | %s | %lld | %llu | %.1f | %.1f | %llu | %lld |\n", i,
                  rr.role.c_str(), (long long)rr.requests, (unsigned long long)rr.steps,
                  s.virtual_s > 0 ? 100 * rr.busy_s / s.virtual_s : 0.0,
                  100.0 * rr.prefix.hit_ratio(), (unsigned long long)rr.preemptions,
                  (long long)rr.kv_blocks_total);
    out += buf;
  }
  return out;
}

// --find min-chips: the layouts by chip count, the first meeting the SLO at the rate.
Status find_min_chips(const Options& o, const Deployment& d, double rate, const loadgen::Slo& slo) {
  if (!slo.any()) return make_error("--find min-chips needs --slo-ttft-ms and/or --slo-tpot-ms");
  // Colocated: tp x replicas. With --prefill-replicas/--decode-replicas given, disaggregated
  // splits P + D too.
  const bool disagg = o.prefill_replicas > 0 || o.decode_replicas > 0;
  std::vector<Layout> layouts;
  for (int tp = 1; tp <= o.max_chips; tp *= 2) {
    for (int rep = 1; tp * rep <= o.max_chips; ++rep) {
      layouts.push_back({tp, 1, rep, 0, 0});
      if (!disagg) continue;
      for (int p = 1; p < rep; ++p) layouts.push_back({tp, 1, 0, p, rep - p});
    }
  }
  std::stable_sort(layouts.begin(), layouts.end(), [](const Layout& a, const Layout& b) {
    return a.chips() != b.chips() ? a.chips() < b.chips() : a.tp < b.tp;
  });
  std::printf(
      "| chips | layout | fits | SLO met %% | TTFT p99 ms | TPOT p99 ms | output tok/s |\n");
  std::printf("|---|---|---|---|---|---|---|\n");
  for (const Layout& l : layouts) {
    const std::string name_s = l.name();
    const char* name = name_s.c_str();
    Result<SimRun> r = run_once(o, d, l, rate, slo);
    if (!r.ok()) {
      std::printf("| %d | %s | no: %s | | | | |\n", l.chips(), name, r.message().c_str());
      std::fflush(stdout);
      continue;
    }
    const loadgen::RunSummary& s = r->run.summary;
    std::printf("| %d | %s | yes | %.1f | %.1f | %.2f | %.1f |\n", l.chips(), name, s.good_percent,
                s.ttft_ms.p99, s.tpot_ms.p99, s.output_throughput);
    std::fflush(stdout);
    if (s.good_percent >= o.slo_attainment) {
      std::printf(
          "\nCheapest layout meeting the SLO for %.0f%% of requests at %s req/s: %d chips "
          "(%s of %s)\n",
          o.slo_attainment, loadgen::rate_label(rate).c_str(), l.chips(), name,
          d.cost.hw.name.c_str());
      return {};
    }
  }
  return make_error("no layout of at most ", o.max_chips,
                    " chips meets the SLO (raise --max-chips)");
}

// --calibrate: real engine steps of the model on this machine, fitted and cached.
Status calibrate(const Options& o) {
  if (!looks_like_file(o.model)) return make_error("--calibrate needs a GGUF model file");
  if (o.hw != "this" && o.hw != "local") return make_error("--calibrate measures --hw this");
  // The bare roofline: a fit starts from no calibration, and --calibration names the file the
  // fit is written to, not one to read (it need not exist yet).
  Options bare = o;
  bare.ideal = true;
  SLUICE_ASSIGN_OR_RETURN(Deployment d, build_deployment(bare));
  EngineCliOptions eo;
  eo.threads = o.threads;
  eo.ctx_size = o.ctx_size;
  eo.kv_cache_gb = o.kv_cache_gb;
  eo.max_seqs = o.max_seqs;
  eo.max_batch_tokens = o.max_batch_tokens;
  eo.prefill_chunk = o.prefill_chunk;
  eo.block_size = o.block_size;
  eo.no_prefix_cache = true;
  SLUICE_ASSIGN_OR_RETURN(std::unique_ptr<EngineSession> session, open_engine_session(o.model, eo));
  sim::RecordingExecutor rec(session->exec());
  EngineConfig ec;
  ec.n_ctx = session->model.config().n_ctx;
  ec.scheduler.max_seqs = o.max_seqs;
  ec.scheduler.max_batch_tokens = o.max_batch_tokens;
  ec.scheduler.prefill_chunk = o.prefill_chunk;
  ec.enable_prefix_cache = false;
  SLUICE_ASSIGN_OR_RETURN(std::unique_ptr<Engine> engine,
                          Engine::create(session->tokenizer, rec, ec));
  std::fprintf(stderr,
               "sluice sim: timing real engine steps of %s (decode batches 1..%d, prefill "
               "chunks to %d tokens)\n",
               o.model.c_str(), o.max_seqs, o.max_batch_tokens);
  SLUICE_ASSIGN_OR_RETURN(
      std::vector<sim::StepSample> samples,
      sim::measure_engine_steps(*engine, rec, d.cost, o.max_seqs, o.max_batch_tokens,
                                std::min(session->model.config().n_vocab, 32000)));
  SLUICE_ASSIGN_OR_RETURN(SimCalibration c, sim::fit_calibration(samples));
  c.source = "fitted on " + std::to_string(samples.size()) + " steps of " +
             std::filesystem::path(o.model).filename().string();
  const std::string path = o.calibration.empty() ? sim::default_calibration_path() : o.calibration;
  SLUICE_RETURN_IF_ERROR(sim::save_calibration(c, path));
  std::printf(
      "| seqs | new tokens | roofline bound | measured ms | modelled ms | error %% |\n"
      "|---|---|---|---|---|---|\n");
  for (const sim::StepSample& s : samples) {
    const double m = sim::calibrated_seconds(c, s);
    std::printf("| %d | %d | %s | %.2f | %.2f | %+.1f |\n", s.n_seqs, s.n_tokens,
                s.flops_s > s.bytes_s ? "compute" : "memory", s.measured_s * 1e3, m * 1e3,
                100 * (m / s.measured_s - 1));
  }
  std::printf(
      "\nCalibration (%s): %s, MBU %.3f, MFU %.3f, %.3f ms per step, %.1f us per "
      "sequence; RMS step error %.1f%%\nSaved to %s\n",
      c.source.c_str(), c.additive ? "additive" : "overlapped", c.mem_efficiency,
      c.compute_efficiency, c.step_overhead_s * 1e3, c.per_seq_s * 1e6,
      100 * sim::rms_relative_error(c, samples), path.c_str());
  return {};
}

Status run_sim(const Options& o) {
  if (o.calibrate) return calibrate(o);
  SLUICE_ASSIGN_OR_RETURN(Deployment d, build_deployment(o));
  const loadgen::Slo slo = workload_slo(o.w);
  SLUICE_ASSIGN_OR_RETURN(const std::vector<double> rates, workload_rates(o.w));
  Options opts = o;
  SLUICE_ASSIGN_OR_RETURN(opts.policy.policy, router::parse_policy(o.router));
  if (!o.find.empty()) {
    if (o.find != "min-chips") return make_error("--find takes 'min-chips'");
    return find_min_chips(opts, d, rates.front(), slo);
  }
  const Layout l{o.tp, o.pp, o.replicas, o.prefill_replicas, o.decode_replicas};
  if ((l.prefill > 0) != (l.decode > 0)) {
    return make_error("--prefill-replicas and --decode-replicas go together");
  }
  std::vector<loadgen::RunResult> runs;
  std::string details;
  for (double rate : rates) {
    SLUICE_ASSIGN_OR_RETURN(SimRun r, run_once(opts, d, l, rate, slo));
    details += "\n### rate " + loadgen::rate_label(rate) + "\n" + sim_details(d, r);
    runs.push_back(std::move(r.run));
  }
  SLUICE_RETURN_IF_ERROR(write_reports(o.w, runs, details));
  return {};
}

}  // namespace

void register_sim(CLI::App& app, int& exit_code) {
  auto o = std::make_shared<Options>();
  CLI::App* cmd = app.add_subcommand(
      "sim",
      "Simulate a serving deployment on virtual hardware: the real engine and scheduler, step "
      "times from the roofline; reports as `bench serve`");
  cmd->add_option("--model", o->model, "GGUF path or preset: " + model_shape_names())->required();
  cmd->add_option("--hw", o->hw, "this (the measured roofline) or " + hardware_names())
      ->capture_default_str();
  cmd->add_option("--roofline", o->roofline, "Roofline cache for --hw this");
  cmd->add_option("--calibration", o->calibration,
                  "Calibration JSON (default for --hw this: `sluice sim --calibrate`'s cache)");
  cmd->add_flag("--ideal", o->ideal, "No calibration: the bare roofline");
  cmd->add_flag("--calibrate", o->calibrate,
                "Time real engine steps of --model (a GGUF) here, fit the calibration, cache it");
  cmd->add_option("-t,--threads", o->threads, "--calibrate: threads (0: all cores)");
  cmd->add_option("--tp", o->tp, "Tensor-parallel chips per replica")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  cmd->add_option("--pp", o->pp, "Pipeline stages per replica")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  cmd->add_option("--pp-microbatches", o->pp_micro,
                  "Micro-batches per step (0: 1 with steps in flight, else one per stage)")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--pp-depth", o->pp_depth,
                  "Steps in flight with --pp, each over its own requests (0: --pp; 1: one at a "
                  "time)")
      ->check(CLI::Range(0, 64));
  cmd->add_option("--replicas", o->replicas, "Replicas behind the router")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  cmd->add_option("--prefill-replicas", o->prefill_replicas,
                  "Disaggregated: replicas that prefill (with --decode-replicas)");
  cmd->add_option("--decode-replicas", o->decode_replicas,
                  "Disaggregated: replicas that decode, importing the prompts' K/V");
  cmd->add_option("--kv-link-gbps", o->kv_link_gbps, "Disaggregated: KV transfer link, GB/s")
      ->capture_default_str();
  cmd->add_option("--kv-link-latency-us", o->kv_link_latency_us, "Disaggregated: per transfer")
      ->capture_default_str();
  cmd->add_option("--router", o->router, "cache_aware, least_load or round_robin (sluice router's)")
      ->capture_default_str();
  cmd->add_option("--cache-threshold", o->policy.cache_threshold,
                  "cache_aware: prefix match / prompt needed to route by affinity")
      ->capture_default_str();
  cmd->add_option("--balance-abs-threshold", o->policy.balance_abs_threshold,
                  "cache_aware: load imbalance (max - min) that routes to the least loaded")
      ->capture_default_str();
  cmd->add_option("--balance-rel-threshold", o->policy.balance_rel_threshold,
                  "cache_aware: ... when also max > this x min")
      ->capture_default_str();
  cmd->add_option("--weight-bits", o->weight_bits, "16, 8 or 4 (default: 16, or as stored)");
  cmd->add_option("--kv-bits", o->kv_bits, "KV element bits")->capture_default_str();
  cmd->add_option("--act-bits", o->act_bits, "16 (bf16 FLOPs) or 8 (int8)");
  cmd->add_option("--mem-util", o->mem_util, "Share of chip memory for weights + KV")
      ->capture_default_str()
      ->check(CLI::Range(0.05, 1.0));
  cmd->add_option("--kv-cache-gb", o->kv_cache_gb, "KV cache per replica (GiB; default: fit)");
  cmd->add_option("--link-gbps", o->link_gbps, "Link between chips, GB/s (default: the preset's)");
  cmd->add_option("--link-latency-us", o->link_latency_us, "Per message")->capture_default_str();
  cmd->add_option("-c,--ctx-size", o->ctx_size, "Context length (0: the model's; presets 32768)");
  cmd->add_option("--max-seqs", o->max_seqs, "Requests running at once per replica")
      ->capture_default_str();
  cmd->add_option("--max-batch-tokens", o->max_batch_tokens, "Tokens per step")
      ->capture_default_str();
  cmd->add_option("--prefill-chunk", o->prefill_chunk, "Prompt tokens of one request per step")
      ->capture_default_str();
  cmd->add_option("--block-size", o->block_size, "Tokens per KV block")->capture_default_str();
  cmd->add_flag("--no-prefix-cache", o->no_prefix_cache, "Do not reuse KV of repeated prefixes");
  cmd->add_option("--tie-gap-us", o->tie_gap_us,
                  "Requests arriving at the same instant reach the server this far apart")
      ->capture_default_str();
  add_workload_options(cmd, o->w, "synthetic, mooncake:FILE or multiturn");
  cmd->add_option("--find", o->find, "min-chips: the cheapest layout meeting the SLO at --rate");
  cmd->add_option("--max-chips", o->max_chips, "Largest layout --find tries")
      ->capture_default_str();
  cmd->add_option("--slo-attainment", o->slo_attainment, "Percent of requests within the SLO")
      ->capture_default_str();
  cmd->callback([o, &exit_code] {
    if (Status s = run_sim(*o); !s.ok()) exit_code = report_error("sim", s.message());
  });
}

}  // namespace sluice::cli
