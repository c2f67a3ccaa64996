// `sluice quantize IN.gguf OUT.gguf TYPE`: re-encode a model's weights with llama.cpp's
// file-type recipes (Q8_0, Q4_0, Q4_K_M, Q6_K, ...), printing a per-tensor size table.
#include <cstdio>
#include <memory>

#include "cli/commands.h"
#include "cli/progress.h"
#include "model/convert.h"

namespace sluice::cli {

void register_quantize(CLI::App& app, int& exit_code) {
  struct Options {
    std::string in, out, type;
    int threads = 0;
    bool allow_requantize = false;
  };
  auto opt = std::make_shared<Options>();
  CLI::App* cmd = app.add_subcommand("quantize", "Quantize a GGUF model (F32/F16/BF16 in)");
  cmd->add_option("input", opt->in, "Input GGUF")->required();
  cmd->add_option("output", opt->out, "Output GGUF")->required();
  cmd->add_option("type", opt->type, "File type: " + file_type_names())->required();
  cmd->add_option("-t,--threads", opt->threads, "Threads (default: all cores)");
  cmd->add_flag("--allow-requantize", opt->allow_requantize,
                "Accept input tensors that are already quantized");
  cmd->callback([opt, &exit_code] {
    auto ft = parse_file_type(opt->type);
    if (!ft) {
      exit_code = report_error("quantize", "unknown type '" + opt->type +
                                               "' (expected one of: " + file_type_names() + ")");
      return;
    }
    QuantizeParams p;
    p.in_path = opt->in;
    p.out_path = opt->out;
    p.ftype = *ft;
    p.n_threads = opt->threads;
    p.allow_requantize = opt->allow_requantize;
    ProgressBar bar("quantize " + opt->type);
    uint64_t in_total = 0, out_total = 0;
    std::printf("%-36s %-20s %-6s -> %-6s %12s -> %12s\n", "tensor", "shape", "from", "to", "size",
                "size");
    ConvertCallbacks cb;
    cb.on_tensor = [&](const TensorConversion& c) {
      std::printf("%-36s %-20s %-6s -> %-6s %12s -> %12s\n", c.name.c_str(), c.shape.c_str(),
                  std::string(type_name(c.from)).c_str(), std::string(type_name(c.to)).c_str(),
                  human_bytes(double(c.bytes_from)).c_str(),
                  human_bytes(double(c.bytes_to)).c_str());
      std::fflush(stdout);
      in_total += c.bytes_from;
      out_total += c.bytes_to;
    };
    cb.progress = [&bar](uint64_t done, uint64_t total) { bar.update(done, total); };
    Status st = quantize_model(p, cb);
    if (!st.ok()) {
      exit_code = report_error("quantize", st.message());
      return;
    }
    std::printf("total: %s -> %s (%.2fx smaller), wrote %s\n",
                human_bytes(double(in_total)).c_str(), human_bytes(double(out_total)).c_str(),
                out_total ? double(in_total) / double(out_total) : 0.0, opt->out.c_str());
  });
}

}  // namespace sluice::cli
