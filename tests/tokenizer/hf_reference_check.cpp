// The C++ half of tokenizer_hf_reference (hf_reference_test.mjs): imports a Hugging Face
// tokenizer.json (hf_import.h), tokenizes every text of a cases file and compares with the ids
// the reference JS tokenizer produced; decodes back where the reference round-trips.
//
//   tokenizer_hf_check TOKENIZER_JSON CASES_JSON SCRATCH_DIR
//
// CASES_JSON: {"cases": [{"text": "...", "ids": [..], "lossless": true}, ...]}. The vocabulary
// also goes through a vocab-only GGUF in SCRATCH_DIR (write_vocab_gguf, Tokenizer::load), whose
// tokenizer must give the same ids. Prints each mismatch; exit 0 iff all match.
#include <chrono>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "tokenizer/hf_import.h"
#include "tokenizer/tokenizer.h"

namespace {

using sluice::TokenId;

std::string show(const std::vector<TokenId>& ids) {
  std::string s;
  for (TokenId id : ids) s += " " + std::to_string(id);
  return s;
}

std::string escaped(const std::string& text) {
  return nlohmann::json(text).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

int fail(const std::string& why) {
  std::fprintf(stderr, "FAIL: %s\n", why.c_str());
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 4) return fail("usage: tokenizer_hf_check TOKENIZER_JSON CASES_JSON SCRATCH_DIR");
  const std::string tokenizer_path = argv[1], cases_path = argv[2], scratch = argv[3];
  const auto t0 = std::chrono::steady_clock::now();

  sluice::Result<sluice::VocabSpec> spec = sluice::vocab_spec_from_hf_file(tokenizer_path);
  if (!spec.ok()) return fail(spec.message());
  const std::string gguf_path = scratch + "/vocab.gguf";
  if (sluice::Status st = sluice::write_vocab_gguf(*spec, gguf_path); !st.ok()) {
    return fail(st.message());
  }
  const std::string pre = spec->pre, model = spec->model;
  sluice::Result<sluice::Vocab> vocab = sluice::Vocab::from_spec(std::move(spec).value());
  if (!vocab.ok()) return fail(vocab.message());
  sluice::Result<sluice::Tokenizer> tok = sluice::Tokenizer::create(std::move(vocab).value());
  if (!tok.ok()) return fail(tok.message());
  sluice::Result<sluice::Tokenizer> tok_gguf = sluice::Tokenizer::load(gguf_path);
  if (!tok_gguf.ok()) return fail(tok_gguf.message());
  const double import_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();

  std::ifstream in(cases_path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  const nlohmann::json cases = nlohmann::json::parse(ss.str(), nullptr, false);
  if (cases.is_discarded() || !cases.contains("cases")) return fail("bad cases file " + cases_path);

  sluice::EncodeOptions enc;
  enc.add_special = false;
  enc.parse_special = true;  // Hugging Face matches added tokens in the text
  sluice::DecodeOptions dec;
  dec.render_special = true;
  dec.clean_spaces = false;
  size_t n = 0, n_bad = 0, n_tokens = 0, n_round_trips = 0;
  for (const nlohmann::json& c : cases["cases"]) {
    ++n;
    const std::string text = c["text"].get<std::string>();
    const std::vector<TokenId> want = c["ids"].get<std::vector<TokenId>>();
    n_tokens += want.size();
    sluice::Result<std::vector<TokenId>> got = tok->encode(text, enc);
    if (!got.ok()) return fail("encode " + escaped(text) + ": " + got.message());
    if (*got != want) {
      if (++n_bad <= 20) {
        std::fprintf(stderr, "mismatch %s\n  reference:%s\n  sluice:   %s\n", escaped(text).c_str(),
                     show(want).c_str(), show(*got).c_str());
      }
      continue;
    }
    sluice::Result<std::vector<TokenId>> via_gguf = tok_gguf->encode(text, enc);
    if (!via_gguf.ok() || *via_gguf != *got) {
      ++n_bad;
      std::fprintf(stderr, "the vocab-only GGUF tokenizes %s differently\n", escaped(text).c_str());
      continue;
    }
    if (c.value("lossless", false)) {
      ++n_round_trips;
      const std::string back = tok->decode(*got, dec);
      if (back != text) {
        ++n_bad;
        std::fprintf(stderr, "round trip %s -> %s\n", escaped(text).c_str(), escaped(back).c_str());
      }
    }
  }
  const double total_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf(
      "%s (model %s, pre %s): %zu texts, %zu tokens, %zu decoded back, %zu mismatches; "
      "import %.2f s, total %.2f s\n",
      tokenizer_path.c_str(), model.c_str(), pre.c_str(), n, n_tokens, n_round_trips, n_bad,
      import_s, total_s);
  return n_bad == 0 ? 0 : 1;
}
