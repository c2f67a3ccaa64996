// `sluice synth`: a model with a real architecture's shapes and seeded random weights, for
// benchmarks and tests.
#include <cstdio>
#include <memory>

#include "cli/commands.h"
#include "cli/progress.h"
#include "model/convert.h"

namespace sluice::cli {

void register_synth(CLI::App& app, int& exit_code) {
  struct Options {
    std::string preset = "tiny";
    std::string type = "f16";
    std::string vocab;
    uint64_t seed = 42;
    int threads = 0;
    std::string out;
  };
  auto opt = std::make_shared<Options>();
  CLI::App* cmd = app.add_subcommand(
      "synth", "Write a synthetic model: real architecture shapes, random N(0, 0.02) weights");
  cmd->add_option("--preset", opt->preset, "Architecture: " + preset_names())
      ->capture_default_str();
  cmd->add_option("--type", opt->type, "Weight type / file type: " + file_type_names())
      ->capture_default_str();
  cmd->add_option("--vocab-from", opt->vocab, "Copy tokenizer metadata from this GGUF");
  cmd->add_option("--seed", opt->seed, "Random seed")->capture_default_str();
  cmd->add_option("-t,--threads", opt->threads, "Threads (default: all cores)");
  cmd->add_option("-o,--output", opt->out, "Output GGUF path")->required();
  cmd->callback([opt, &exit_code] {
    SynthParams p;
    p.preset = find_preset(opt->preset);
    if (!p.preset) {
      exit_code = report_error("synth", "unknown preset '" + opt->preset +
                                            "' (expected one of: " + preset_names() + ")");
      return;
    }
    auto ft = parse_file_type(opt->type);
    if (!ft) {
      exit_code = report_error(
          "synth", "unknown type '" + opt->type + "' (expected one of: " + file_type_names() + ")");
      return;
    }
    p.ftype = *ft;
    p.vocab_path = opt->vocab;
    p.seed = opt->seed;
    p.n_threads = opt->threads;
    p.out_path = opt->out;
    ProgressBar bar("synth " + opt->preset + " " + opt->type);
    ConvertCallbacks cb;
    cb.progress = [&bar](uint64_t done, uint64_t total) { bar.update(done, total); };
    uint64_t total = 0;
    cb.on_tensor = [&total](const TensorConversion& c) { total += c.bytes_to; };
    Status st = synthesize_model(p, cb);
    if (!st.ok()) {
      exit_code = report_error("synth", st.message());
      return;
    }
    std::printf("wrote %s: %s preset, %s, %s of tensor data\n", opt->out.c_str(),
                opt->preset.c_str(), std::string(file_type_name(p.ftype)).c_str(),
                human_bytes(double(total)).c_str());
  });
}

}  // namespace sluice::cli
