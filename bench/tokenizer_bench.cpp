// Tokenizer throughput. Needs ../shared (vocabularies and English text); benchmarks skip
// themselves when it is absent.
//   BM_EncodeEnglish/<vocab>   ~1 MiB of English markdown (shared/seeds/*.md, repeated)
//   BM_EncodeRepeated/<vocab>  1 MiB of one character (linear-time check)
//   BM_EncodeRandomBytes       1 MiB of random bytes (invalid UTF-8) with llama-bpe
//   BM_Decode / BM_StreamDecode  ids of the English text back to text
// Reported bytes_per_second is input bytes for encode, output bytes for decode.
#include <benchmark/benchmark.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <random>
#include <sstream>
#include <string>

#include "tokenizer/detokenize.h"
#include "tokenizer/tokenizer.h"

namespace sluice {
namespace {

std::string shared_dir() {
  if (const char* env = std::getenv("SLUICE_SHARED"); env && *env) return env;
  for (const char* d : {"../shared", "../../shared", "../../../shared", "/work/shared"}) {
    if (std::filesystem::is_directory(std::string(d) + "/testdata/tokenizer")) return d;
  }
  return {};
}

const Tokenizer* get_tokenizer(const std::string& name) {
  static std::map<std::string, std::unique_ptr<Tokenizer>> cache;
  auto it = cache.find(name);
  if (it != cache.end()) return it->second.get();
  std::unique_ptr<Tokenizer> tok;
  const std::string dir = shared_dir();
  if (!dir.empty()) {
    Result<Tokenizer> r = Tokenizer::load(dir + "/testdata/tokenizer/ggml-vocab-" + name + ".gguf");
    if (r.ok()) tok = std::make_unique<Tokenizer>(std::move(r).value());
  }
  return cache.emplace(name, std::move(tok)).first->second.get();
}

// ~1 MiB of English: the markdown documents in shared/seeds, repeated.
const std::string& english_text() {
  static const std::string text = [] {
    std::string all;
    const std::string dir = shared_dir();
    if (dir.empty() || !std::filesystem::is_directory(dir + "/seeds")) return all;
    std::string corpus;
    for (const auto& e : std::filesystem::directory_iterator(dir + "/seeds")) {
      std::ifstream f(e.path(), std::ios::binary);
      std::ostringstream ss;
      ss << f.rdbuf();
      corpus += ss.str();
    }
    if (corpus.empty()) return all;
    while (all.size() < (1u << 20)) all += corpus;
    all.resize(1u << 20);
    return all;
  }();
  return text;
}

void encode_bench(benchmark::State& state, const std::string& vocab, const std::string& text) {
  const Tokenizer* tok = get_tokenizer(vocab);
  if (!tok || text.empty()) {
    state.SkipWithError("../shared test data not found");
    return;
  }
  EncodeOptions opts;
  opts.add_special = false;
  std::vector<TokenId> ids;
  for (auto _ : state) {
    ids.clear();
    Status st = tok->encode_into(text, opts, ids);
    if (!st.ok()) state.SkipWithError(st.message().c_str());
    benchmark::DoNotOptimize(ids.data());
  }
  state.SetBytesProcessed(int64_t(state.iterations()) * int64_t(text.size()));
  state.counters["tokens"] = double(ids.size());
}

void BM_EncodeEnglish(benchmark::State& state, const char* vocab) {
  encode_bench(state, vocab, english_text());
}
BENCHMARK_CAPTURE(BM_EncodeEnglish, llama_bpe, "llama-bpe")->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_EncodeEnglish, gpt_2, "gpt-2")->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_EncodeEnglish, deepseek_llm, "deepseek-llm")->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_EncodeEnglish, llama_spm, "llama-spm")->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_EncodeEnglish, bert_bge, "bert-bge")->Unit(benchmark::kMillisecond);

void BM_EncodeRepeated(benchmark::State& state, const char* vocab) {
  encode_bench(state, vocab, std::string(size_t(state.range(0)), 'a'));
}
BENCHMARK_CAPTURE(BM_EncodeRepeated, llama_bpe, "llama-bpe")
    ->Arg(1 << 19)
    ->Arg(1 << 20)
    ->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_EncodeRepeated, llama_spm, "llama-spm")
    ->Arg(1 << 19)
    ->Arg(1 << 20)
    ->Unit(benchmark::kMillisecond);

void BM_EncodeRandomBytes(benchmark::State& state) {
  std::mt19937 rng(42);
  std::string text(size_t(state.range(0)), '\0');
  for (char& c : text) c = char(rng() & 0xFF);
  encode_bench(state, "llama-bpe", text);
}
BENCHMARK(BM_EncodeRandomBytes)->Arg(1 << 19)->Arg(1 << 20)->Unit(benchmark::kMillisecond);

void BM_Decode(benchmark::State& state) {
  const Tokenizer* tok = get_tokenizer("llama-bpe");
  if (!tok || english_text().empty()) {
    state.SkipWithError("../shared test data not found");
    return;
  }
  EncodeOptions eo;
  eo.add_special = false;
  const std::vector<TokenId> ids = *tok->encode(english_text(), eo);
  DecodeOptions opts;
  opts.clean_spaces = false;
  size_t bytes = 0;
  for (auto _ : state) {
    std::string s = tok->decode(ids, opts);
    bytes = s.size();
    benchmark::DoNotOptimize(s.data());
  }
  state.SetBytesProcessed(int64_t(state.iterations()) * int64_t(bytes));
}
BENCHMARK(BM_Decode)->Unit(benchmark::kMillisecond);

void BM_StreamDecode(benchmark::State& state) {
  const Tokenizer* tok = get_tokenizer("llama-bpe");
  if (!tok || english_text().empty()) {
    state.SkipWithError("../shared test data not found");
    return;
  }
  EncodeOptions eo;
  eo.add_special = false;
  const std::vector<TokenId> ids = *tok->encode(english_text(), eo);
  size_t bytes = 0;
  for (auto _ : state) {
    StreamingDecoder dec(*tok);
    bytes = 0;
    for (TokenId id : ids) bytes += dec.push(id).size();
    bytes += dec.flush().size();
  }
  state.SetBytesProcessed(int64_t(state.iterations()) * int64_t(bytes));
}
BENCHMARK(BM_StreamDecode)->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace sluice

BENCHMARK_MAIN();
