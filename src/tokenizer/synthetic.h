// A small synthetic SPM vocabulary, for runs without a model file: the simulator (`sluice sim`)
// and the engine tests' fake executor.
#pragma once

#include <cstdint>

#include "base/status.h"
#include "tokenizer/tokenizer.h"

namespace sluice {

// n_vocab >= 4 tokens: <unk> (0), <s> (1, BOS), </s> (2, end of generation), then the words
// "▁w3" ... "▁w<n-1>" (each detokenizes to " w<id>").
Result<Tokenizer> make_synthetic_tokenizer(int32_t n_vocab);

// The first id of an ordinary (word) token: ids [kSyntheticFirstWord, n_vocab) are words.
inline constexpr int32_t kSyntheticFirstWord = 3;

}  // namespace sluice
