// `sluice info MODEL.gguf`: what is in a GGUF file — architecture, hyperparameters, tokenizer,
// tensors, totals and a memory estimate. Text for people, --json for scripts and tests.
#include <cstdio>
#include <map>
#include <nlohmann/json.hpp>
#include <string>

#include "cli/commands.h"
#include "cli/model_arg.h"
#include "cli/model_cost.h"
#include "cli/progress.h"
#include "gguf/gguf.h"
#include "kernels/matmul_isa.h"

namespace sluice::cli {

std::string human_bytes(double b) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (b >= 1024.0 && u < 4) {
    b /= 1024.0;
    ++u;
  }
  char buf[32];
  std::snprintf(buf, sizeof buf, u == 0 ? "%.0f %s" : "%.2f %s", b, units[u]);
  return buf;
}

namespace {

std::string human_count(double n) {
  char buf[32];
  if (n >= 1e9) {
    std::snprintf(buf, sizeof buf, "%.2fB", n / 1e9);
  } else if (n >= 1e6) {
    std::snprintf(buf, sizeof buf, "%.2fM", n / 1e6);
  } else if (n >= 1e3) {
    std::snprintf(buf, sizeof buf, "%.2fK", n / 1e3);
  } else {
    std::snprintf(buf, sizeof buf, "%.0f", n);
  }
  return buf;
}

// Integer hyperparameter `<arch>.<name>`, or -1 when absent or not an integer. Some converters
// write per-layer arrays (e.g. head_count_kv); those report their first element.
int64_t hparam(const GgufFile& f, const std::string& arch, const std::string& name) {
  const std::string key = arch + "." + name;
  if (auto v = f.get_int(key); v.ok()) return *v;
  if (auto a = f.get_int_array(key); a.ok() && !a->empty()) return a->front();
  return -1;
}

nlohmann::ordered_json build_info(const GgufFile& f) {
  using json = nlohmann::ordered_json;
  json out;
  out["file"] = {{"path", f.path()},
                 {"size", f.file_size()},
                 {"version", f.version()},
                 {"alignment", f.alignment()},
                 {"data_offset", f.data_offset()},
                 {"n_kv", f.metadata().size()},
                 {"n_tensors", f.tensors().size()}};
  const std::string arch = f.get<std::string>("general.architecture").value_or("");
  out["architecture"] = arch;
  out["name"] = f.get<std::string>("general.name").value_or("");
  out["kernels"] = matmul_isa_name(matmul_isa_best());  // the ISA this process would run it on

  json hp = json::object();
  for (const char* key :
       {"context_length", "embedding_length", "block_count", "feed_forward_length",
        "attention.head_count", "attention.head_count_kv", "attention.key_length",
        "attention.value_length", "rope.dimension_count", "vocab_size", "expert_count",
        "expert_used_count", "attention.sliding_window", "attention.key_length_swa",
        "attention.value_length_swa", "rope.dimension_count_swa", "attention.shared_kv_layers",
        "embedding_length_per_layer_input"}) {
    int64_t v = hparam(f, arch, key);
    if (v >= 0) hp[key] = v;
  }
  // Per-layer arrays (gemma4: head_count_kv, sliding_window_pattern) in full.
  for (const char* key : {"attention.head_count_kv", "attention.sliding_window_pattern"}) {
    if (!f.get_int(arch + "." + key).ok()) {
      if (auto a = f.get_int_array(arch + "." + key); a.ok()) hp[key] = *a;
    }
  }
  for (const char* key :
       {"attention.layer_norm_rms_epsilon", "attention.layer_norm_epsilon", "rope.freq_base",
        "rope.freq_base_swa", "rope.scaling.factor", "final_logit_softcapping"}) {
    // Stored as f32: print the shortest decimal that reads back as the same float.
    if (auto v = f.get_float(arch + "." + key); v.ok()) {
      char buf[32];
      std::snprintf(buf, sizeof buf, "%.7g", *v);
      hp[key] = std::stod(buf);
    }
  }
  if (auto v = f.get<std::string>(arch + ".rope.scaling.type"); v.ok()) {
    hp["rope.scaling.type"] = *v;
  }
  out["hparams"] = hp;

  json tok = json::object();
  if (auto m = f.get<std::string>("tokenizer.ggml.model"); m.ok()) tok["model"] = *m;
  if (auto p = f.get<std::string>("tokenizer.ggml.pre"); p.ok()) tok["pre"] = *p;
  std::vector<std::string> tokens;
  if (auto t = f.get_array<std::string>("tokenizer.ggml.tokens"); t.ok()) tokens = std::move(*t);
  tok["n_tokens"] = tokens.size();
  if (const GgufValue* m = f.find("tokenizer.ggml.merges")) {
    if (const GgufArray* a = m->get_if<GgufArray>()) tok["n_merges"] = a->items.size();
  }
  for (const char* name : {"bos", "eos", "eot", "eom", "unknown", "padding", "seperator"}) {
    auto id = f.get_int(std::string("tokenizer.ggml.") + name + "_token_id");
    if (!id.ok()) continue;
    json t = {{"id", *id}};
    if (*id >= 0 && size_t(*id) < tokens.size()) {
      t["text"] = tokens[size_t(*id)];
    } else {
      t["id"] = -1;  // converters write 0xffffffff for "none"
    }
    tok[name] = t;
  }
  for (const char* name : {"add_bos_token", "add_eos_token", "add_space_prefix"}) {
    if (auto b = f.get<bool>(std::string("tokenizer.ggml.") + name); b.ok()) tok[name] = *b;
  }
  tok["chat_template"] = f.has("tokenizer.chat_template");
  out["tokenizer"] = tok;

  json tensors = json::array();
  std::map<std::string, std::pair<int64_t, uint64_t>> by_type;  // name -> (params, bytes)
  int64_t n_params = 0;
  uint64_t n_bytes = 0;
  for (const GgufTensorInfo& t : f.tensors()) {
    std::vector<int64_t> shape(t.ne, t.ne + std::max(t.n_dims, 1));
    tensors.push_back({{"name", t.name},
                       {"type", std::string(type_name(t.type))},
                       {"shape", shape},
                       {"bytes", t.n_bytes}});
    auto& [p, b] = by_type[std::string(type_name(t.type))];
    p += t.n_elements();
    b += t.n_bytes;
    n_params += t.n_elements();
    n_bytes += t.n_bytes;
  }
  json types = json::object();
  for (const auto& [name, pb] : by_type) types[name] = {{"params", pb.first}, {"bytes", pb.second}};
  out["totals"] = {{"params", n_params}, {"bytes", n_bytes}, {"by_type", types}};

  // KV cache per token at f16 (2 bytes per K and V value of every attention layer) and, for
  // hybrids, the recurrent state a sequence holds: from the planner's model cost of the file.
  // At the context: kv_bytes_per_sequence (sliding-window layers hold their window, in blocks of
  // the engine's default 16).
  json mem = {{"weights_bytes", n_bytes}};
  if (const Result<ModelCost> cost = model_cost_from_gguf(f);
      cost.ok() && (cost->kv_elems_per_token > 0 || cost->state_bytes_per_sequence > 0)) {
    const int64_t kv_per_token = int64_t(cost->kv_elems_per_token) * 2;
    const int64_t state = int64_t(cost->state_bytes_per_sequence);
    mem["kv_bytes_per_token_f16"] = kv_per_token;
    if (state > 0) mem["recurrent_state_bytes_per_sequence"] = state;
    const int64_t ctx = hparam(f, arch, "context_length");
    if (ctx > 0) {
      Precision f16;
      f16.kv_bits = 16;
      const int64_t kv_at_ctx = cost->kv_window > 0
                                    ? int64_t(kv_bytes_per_sequence(*cost, f16, double(ctx), 16))
                                    : kv_per_token * ctx;
      mem["context_length"] = ctx;
      mem["kv_bytes_at_context_f16"] = kv_at_ctx;
      mem["total_bytes_at_context"] = int64_t(n_bytes) + kv_at_ctx + state;
    }
  }
  out["memory"] = mem;
  out["tensors"] = tensors;
  return out;
}

void print_text(const GgufFile& f, const nlohmann::ordered_json& j, bool all_tensors) {
  std::printf("file:         %s (GGUF v%u, %s, %zu metadata keys, %zu tensors)\n", f.path().c_str(),
              f.version(), human_bytes(double(f.file_size())).c_str(), f.metadata().size(),
              f.tensors().size());
  std::printf("architecture: %s", j["architecture"].get<std::string>().c_str());
  if (!j["name"].get<std::string>().empty()) {
    std::printf(" (%s)", j["name"].get<std::string>().c_str());
  }
  std::printf("\nkernels:      %s\n", matmul_isa_description().c_str());
  std::printf("\nhyperparameters:\n");
  for (const auto& [k, v] : j["hparams"].items())
    std::printf("  %-40s %s\n", k.c_str(), v.dump().c_str());

  const auto& tok = j["tokenizer"];
  std::printf("\ntokenizer:\n");
  for (const auto& [k, v] : tok.items()) {
    if (v.is_object()) {
      std::string s = "id " + v["id"].dump();
      if (v.contains("text")) s += " " + v["text"].dump();
      std::printf("  %-40s %s\n", k.c_str(), s.c_str());
    } else {
      std::printf("  %-40s %s\n", k.c_str(),
                  v.is_string() ? v.get<std::string>().c_str() : v.dump().c_str());
    }
  }

  std::printf("\nmetadata:\n");
  for (const auto& [k, v] : f.metadata()) {
    if (k == "tokenizer.chat_template") {
      std::printf("  %-40s <%zu chars>\n", k.c_str(),
                  v.get_if<std::string>() ? v.get_if<std::string>()->size() : 0);
      continue;
    }
    std::printf("  %-40s %s\n", k.c_str(), format_value(v, 6).c_str());
  }

  const auto& tensors = j["tensors"];
  std::printf("\ntensors:\n  %-40s %-8s %-24s %12s\n", "name", "type", "shape", "bytes");
  size_t shown = 0;
  for (const auto& t : tensors) {
    if (!all_tensors && shown == 40 && tensors.size() > 44) {
      std::printf("  ... %zu more (--all-tensors to list them)\n", tensors.size() - shown);
      break;
    }
    std::printf("  %-40s %-8s %-24s %12s\n", t["name"].get<std::string>().c_str(),
                t["type"].get<std::string>().c_str(), t["shape"].dump().c_str(),
                human_bytes(t["bytes"].get<double>()).c_str());
    ++shown;
  }

  const auto& tot = j["totals"];
  std::printf("\ntotals: %s parameters, %s\n", human_count(tot["params"].get<double>()).c_str(),
              human_bytes(tot["bytes"].get<double>()).c_str());
  for (const auto& [name, pb] : tot["by_type"].items()) {
    std::printf("  %-8s %12s params %12s\n", name.c_str(),
                human_count(pb["params"].get<double>()).c_str(),
                human_bytes(pb["bytes"].get<double>()).c_str());
  }
  const auto& mem = j["memory"];
  std::printf("\nmemory estimate:\n  weights                            %s\n",
              human_bytes(mem["weights_bytes"].get<double>()).c_str());
  if (mem.contains("kv_bytes_per_token_f16")) {
    std::printf("  KV cache per token (f16)           %s\n",
                human_bytes(mem["kv_bytes_per_token_f16"].get<double>()).c_str());
  }
  if (mem.contains("recurrent_state_bytes_per_sequence")) {
    std::printf("  recurrent state per sequence (f32) %s\n",
                human_bytes(mem["recurrent_state_bytes_per_sequence"].get<double>()).c_str());
  }
  if (mem.contains("kv_bytes_at_context_f16")) {
    std::printf("  KV cache at context %-14s %s\n", mem["context_length"].dump().c_str(),
                human_bytes(mem["kv_bytes_at_context_f16"].get<double>()).c_str());
    std::printf("  weights + KV (+ state) at context  %s\n",
                human_bytes(mem["total_bytes_at_context"].get<double>()).c_str());
  }
}

}  // namespace

void register_info(CLI::App& app, int& exit_code) {
  struct Options {
    std::string model;
    bool json = false;
    bool all_tensors = false;
  };
  auto opt = std::make_shared<Options>();
  CLI::App* cmd = app.add_subcommand("info",
                                     "Show what a GGUF file holds: architecture, "
                                     "hyperparameters, tokenizer, tensors, memory");
  cmd->add_option("model", opt->model, "GGUF file or hf://OWNER/REPO/FILE.gguf")->required();
  cmd->add_flag("--json", opt->json, "Print one JSON object");
  cmd->add_flag("--all-tensors", opt->all_tensors, "List every tensor (text output)");
  cmd->callback([opt, &exit_code] {
    auto path = resolve_model_arg(opt->model);
    if (!path.ok()) {
      exit_code = report_error("info", path.message());
      return;
    }
    auto f = GgufFile::open(*path);
    if (!f.ok()) {
      exit_code = report_error("info", f.message());
      return;
    }
    nlohmann::ordered_json j = build_info(*f);
    if (opt->json) {
      std::printf("%s\n", j.dump(2).c_str());
    } else {
      print_text(*f, j, opt->all_tensors);
    }
  });
}

}  // namespace sluice::cli
