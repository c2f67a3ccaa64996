// `sluice vocab import TOKENIZER_JSON OUT.gguf [--name NAME]`: a Hugging Face tokenizer.json
// (and tokenizer_config.json beside it, when present) -> a vocab-only GGUF that `sluice tokenize`
// and every other command that takes a GGUF tokenizer read (src/tokenizer/hf_import.h).
#include <cstdio>
#include <memory>
#include <string>

#include "cli/commands.h"
#include "tokenizer/hf_import.h"
#include "tokenizer/tokenizer.h"

namespace sluice::cli {

namespace {

struct VocabImportArgs {
  std::string input;
  std::string output;
  std::string name;
};

int run_vocab_import(const VocabImportArgs& a) {
  Result<VocabSpec> spec = vocab_spec_from_hf_file(a.input);
  if (!spec.ok()) return report_error("vocab import", spec.message());
  if (!a.name.empty()) spec->name = a.name;
  const std::string model = spec->model, pre = spec->pre;
  const size_t n_tokens = spec->tokens.size(), n_merges = spec->merges.size();
  // Built once before writing, so a vocabulary sluice cannot use is refused, not written.
  Result<Vocab> vocab = Vocab::from_spec(*spec);
  if (!vocab.ok()) return report_error("vocab import", "'" + a.input + "': " + vocab.message());
  if (Status st = write_vocab_gguf(*spec, a.output); !st.ok()) {
    return report_error("vocab import", st.message());
  }
  std::printf("wrote '%s': model %s, pre %s, %zu tokens, %zu merges\n", a.output.c_str(),
              model.c_str(), pre.empty() ? "(none)" : pre.c_str(), n_tokens, n_merges);
  return 0;
}

}  // namespace

void register_vocab(CLI::App& app, int& exit_code) {
  CLI::App* cmd = app.add_subcommand("vocab", "Vocabulary tools");
  cmd->require_subcommand(1);
  CLI::App* import = cmd->add_subcommand(
      "import",
      "Write a vocab-only GGUF from a Hugging Face tokenizer.json (BPE: byte-level or "
      "SentencePiece-style)");
  auto args = std::make_shared<VocabImportArgs>();
  import->add_option("tokenizer_json", args->input, "tokenizer.json")->required();
  import->add_option("output", args->output, "GGUF file to write")->required();
  import->add_option("--name", args->name, "general.name to record");
  import->callback([args, &exit_code] { exit_code = run_vocab_import(*args);
});
}  // namespace sluice::cli

}  // namespace sluice::cli
