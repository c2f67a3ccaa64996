// Hugging Face `tokenizer.json` -> sluice's vocabulary form (the `tokenizer.ggml.*` keys a
// GGUF holds), so a tokenizer can be built, or a vocab-only GGUF written, from a model's
// tokenizer.json without Python. Two BPE flavours are understood:
//
//   byte-level (GPT-2 alphabet; Qwen, gpt-oss, Llama 3): tokenizer.ggml.model = "gpt2", the
//     merges as they are, and tokenizer.ggml.pre found by comparing the Split regexes with the
//     pre-tokenizers sluice knows (pretokenize.h);
//   SentencePiece-style (byte_fallback, ' ' -> '▁'; Gemma 3): model = "llama" (SPM), with
//     scores derived from the merges: a token's score is minus the rank of the first merge that
//     makes it, so SPM's "highest-scoring bigram first" picks what BPE's "lowest rank first"
//     picks.
//
// Token types follow llama.cpp's converter (convert_hf_to_gguf.py get_vocab_base): added
// tokens that are special, or look special (<|...|>, <unused..>, <mask>), are control
// tokens; other added tokens are user-defined; "<0xNN>" in an SPM vocabulary are byte tokens.
// One deliberate difference: an SPM-style added token that is in the model's own vocabulary
// and contains '▁' ("▁▁", Gemma's space runs) stays a normal token with its '▁' text, since
// Hugging Face matches it only literally and BPE makes it from spaces; llama.cpp's converter
// turns it into a user-defined "  " that would match raw spaces first.
//
// Bos/eos/pad/unk and add_bos/add_eos come from tokenizer_config.json when given (as
// gguf-py's SpecialVocab reads them). Normalizers llama.cpp ignores too (NFC) are accepted
// and not applied: text that NFC changes can tokenize differently from Hugging Face.
#pragma once

#include <string>
#include <string_view>

#include "base/status.h"
#include "tokenizer/vocab.h"

namespace sluice {

// Parses tokenizer.json text (and tokenizer_config.json text, empty if none).
Result<VocabSpec> vocab_spec_from_hf_json(std::string_view tokenizer_json,
                                          std::string_view tokenizer_config_json = {});

// Reads `path` (a tokenizer.json) and, when present, tokenizer_config.json next to it.
Result<VocabSpec> vocab_spec_from_hf_file(const std::string& path);

// Writes a vocab-only GGUF (tokenizer.ggml.* and general.name) that Vocab::from_gguf reads
// back to the same spec, laid out as llama.cpp's converter writes these keys.
Status write_vocab_gguf(const VocabSpec& spec, const std::string& path);

}  // namespace sluice
