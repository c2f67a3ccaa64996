// Tiny embedding models for tests: synth's tiny-bert / tiny-bert-rank (with a real BERT WPM
// vocabulary) and tiny-qwen3-embed, f32 weights, random non-trivial norm weights.
#pragma once

#include <cstdio>
#include <string>

#include "model/convert.h"
#include "model/model_test_util.h"
#include "model/presets.h"

namespace sluice::test {

// `vocab`: a GGUF whose tokenizer is copied ("" : synth's byte vocabulary).
inline void write_embedding_model(const std::string& preset, const std::string& vocab,
                                  const std::string& path, uint64_t seed = 7) {
  SynthParams sp;
  sp.preset = find_preset(preset);
  ASSERT_NE(sp.preset, nullptr) << preset;
  sp.ftype = FileType::ALL_F32;
  sp.vocab_path = vocab;
  sp.seed = seed;
  sp.n_threads = 2;
  sp.out_path = path + ".raw";
  const Status s = synthesize_model(sp);
  ASSERT_TRUE(s.ok()) << s.message();
  randomize_norms(sp.out_path, path, seed);
  std::remove(sp.out_path.c_str());
}

}  // namespace sluice::test
