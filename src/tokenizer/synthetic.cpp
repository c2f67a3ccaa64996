#include "tokenizer/synthetic.h"

#include <string>
#include <utility>

namespace sluice {

Result<Tokenizer> make_synthetic_tokenizer(int32_t n_vocab) {
  if (n_vocab <= kSyntheticFirstWord) {
    return make_error("synthetic vocabulary: ", n_vocab, " tokens (needs at least ",
                      kSyntheticFirstWord + 1, ")");
  }
  VocabSpec s;
  s.model = "llama";
  s.tokens = {"<unk>", "<s>", "</s>"};
  s.token_types = {int32_t(GgufTokenType::kUnknown), int32_t(GgufTokenType::kControl),
                   int32_t(GgufTokenType::kControl)};
  for (int32_t i = kSyntheticFirstWord; i < n_vocab; ++i) {
    s.tokens.push_back("\xe2\x96\x81w" + std::to_string(i));
    s.token_types.push_back(int32_t(GgufTokenType::kNormal));
  }
  s.unk_id = 0;
  s.bos_id = 1;
  s.eos_id = 2;
  SLUICE_ASSIGN_OR_RETURN(Vocab v, Vocab::from_spec(std::move(s)));
  return Tokenizer::create(std::move(v));
}

}  // namespace sluice
