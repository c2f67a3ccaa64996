// Tiny embedding models for tests: synth's tiny-bert / tiny-bert-rank (with a real BERT WPM
// vocabulary) and tiny-qwen3-embed, f32 weights, random non-trivial norm weights.
#pragma once

#include <cstdio>
#include <string>

#include "model/convert.h"
#include "model/model_test_util.h"
#include "model/presets.h"

namespace sluice::test {

// Copies `in` to `out` with every 2-D blk.* and cls.* matrix (f32) times `scale`: synth's
// N(0, 0.02) weights leave the layers' contribution so small next to the embeddings that the
// first token's vector hardly depends on the input; scaled, every layer counts.
inline void scale_layer_weights(const std::string& in, const std::string& out, float scale) {
  rewrite_f32_tensors(
      in, out,
      [](const GgufTensorInfo& t) {
        const bool layer = t.name.rfind("blk.", 0) == 0 || t.name.rfind("cls.", 0) == 0;
        return layer && t.n_dims == 2 && t.type == GgmlType::F32;
      },
      [&](std::vector<float>& v) {
        for (float& x : v) x *= scale;
      });
}

// `vocab`: a GGUF whose tokenizer is copied ("" : synth's byte vocabulary). `weight_scale`:
// scale_layer_weights.
inline void write_embedding_model(const std::string& preset, const std::string& vocab,
                                  const std::string& path, uint64_t seed = 7,
                                  float weight_scale = 1.0f) {
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
  if (weight_scale == 1.0f) {
    randomize_norms(sp.out_path, path, seed);
  } else {
    randomize_norms(sp.out_path, path + ".norms", seed);
    scale_layer_weights(path + ".norms", path, weight_scale);
    std::remove((path + ".norms").c_str());
  }
  std::remove(sp.out_path.c_str());
}

}  // namespace sluice::test
