// libFuzzer target for the Hugging Face tokenizer.json importer (tokenizer/hf_import.h).
//   input: tokenizer.json text, optionally followed by a NUL byte and tokenizer_config.json text.
// Checks: the importer returns a spec or an error, never crashes or throws; an imported spec
// either builds a tokenizer or fails with an error, and that tokenizer encodes and decodes a
// fixed text with special tokens without crashing and with ids in range.
#include <cstdint>
#include <cstdlib>
#include <string_view>
#include <vector>

#include "tokenizer/hf_import.h"
#include "tokenizer/tokenizer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace sluice;
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  const size_t nul = input.find('\0');
  const std::string_view json = input.substr(0, nul);
  const std::string_view config = nul == std::string_view::npos ? "" : input.substr(nul + 1);
  Result<VocabSpec> spec = vocab_spec_from_hf_json(json, config);
  if (!spec.ok()) return 0;
  Result<Vocab> vocab = Vocab::from_spec(std::move(spec).value());
  if (!vocab.ok()) return 0;
  Result<Tokenizer> tok = Tokenizer::create(std::move(vocab).value());
  if (!tok.ok()) return 0;
  EncodeOptions opts;
  opts.parse_special = true;
  Result<std::vector<TokenId>> ids = tok->encode("ab ab<|im_end|> hi\n\n\xE2\x96\x81x 12", opts);
  if (!ids.ok()) return 0;
  for (TokenId id : *ids) {
    if (!tok->vocab().is_valid(id)) std::abort();
  }
  (void)tok->decode(*ids);
  return 0;
}
