// The reference model's log-probabilities at every scored position of a perplexity run
// (`sluice perplexity --save-logits`), read back by a run of another model on the same text
// (`--kl-divergence`). A file names the text (its tokens), the vocabulary and the windows, so a
// run against the wrong one is refused, and checksums each part, so a damaged file is.
//
// Layout, little-endian:
//
//   0   "SLPPLLG1"                      magic and version
//   8   u32 n_vocab, u32 n_ctx, u32 stride, u32 first_scored, u32 n_windows, i32 bos (-1: none)
//   32  u64 vocab fingerprint           FNV-1a of every token's text, each followed by a NUL
//   40  u64 n_tokens, u32 label bytes   the tokenized text, a label naming the model
//   52  u32 crc32c of bytes [0, 52)
//   56  label, i32 tokens[n_tokens], u32 crc32c of the label and tokens
//       then per window: f32 log_probs[n_ctx - first_scored][n_vocab], u32 crc32c of them
//
// Rows are log-softmax of the model's logits, f32 (exact; llama.cpp stores 16-bit quantized
// log-probabilities, half the size: n_windows * n_scored * n_vocab * 4 bytes here).
#pragma once

#include <cstdint>
#include <cstdio>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "base/status.h"
#include "eval/perplexity.h"

namespace sluice::eval {

struct LogitsFileHeader {
  int32_t n_vocab = 0;
  WindowPlan plan;
  int32_t bos = -1;
  uint64_t vocab_fingerprint = 0;
  std::vector<int32_t> tokens;  // the whole tokenized text
  std::string label;            // e.g. the model file's name
};

// FNV-1a over the token texts (each followed by a NUL), for LogitsFileHeader::vocab_fingerprint.
uint64_t vocab_fingerprint(std::span<const std::string> token_texts);

// Closes the logits file (the writer's and the reader's handle).
struct FileCloser {
  void operator()(std::FILE* f) const { std::fclose(f); }
};

class LogitsWriter {
 public:
  // Creates `path` and writes the header; windows follow in order.
  static Result<LogitsWriter> create(const std::string& path, const LogitsFileHeader& header);
  // One window's log-probabilities: [n_scored, n_vocab].
  Status write_window(std::span<const float> log_probs);
  // After the last window; fails when fewer windows were written than the header says.
  Status close();

 private:
  std::string path_;
  std::unique_ptr<std::FILE, FileCloser> f_;
  LogitsFileHeader header_;
  int32_t n_written_ = 0;
};

class LogitsReader {
 public:
  // Opens `path` and checks its header, checksums of the header and tokens, and that its size
  // is what the header says.
  static Result<LogitsReader> open(const std::string& path);
  const LogitsFileHeader& header() const { return header_; }
  // The next window's log-probabilities into `out` ([n_scored, n_vocab]); checks its checksum.
  Status read_window(std::vector<float>& out);

 private:
  std::string path_;
  std::unique_ptr<std::FILE, FileCloser> f_;
  LogitsFileHeader header_;
  int32_t n_read_ = 0;
};

}  // namespace sluice::eval
