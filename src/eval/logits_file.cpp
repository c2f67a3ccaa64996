#include "eval/logits_file.h"

#include <cerrno>
#include <cstring>

#include "base/crc32c.h"
#include "base/fnv1a.h"

namespace sluice::eval {
namespace {

constexpr char kMagic[8] = {'S', 'L', 'P', 'P', 'L', 'L', 'G', '1'};
constexpr size_t kHeaderBytes = 52;  // before the header's checksum
constexpr uint32_t kMaxLabel = 4096;

template <class T>
void put(std::vector<uint8_t>& b, T v) {
  const auto* p = reinterpret_cast<const uint8_t*>(&v);
  b.insert(b.end(), p, p + sizeof v);
}

template <class T>
T get(const uint8_t* p) {
  T v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

size_t window_bytes(const LogitsFileHeader& h) {
  return size_t(h.plan.n_scored()) * size_t(h.n_vocab) * sizeof(float);
}

}  // namespace

uint64_t vocab_fingerprint(std::span<const std::string> token_texts) {
  uint64_t h = kFnv1aBasis;
  for (const std::string& t : token_texts) {
    h = fnv1a(t, h);
    h = fnv1a("", 1, h);
  }
  return h;
}

Result<LogitsWriter> LogitsWriter::create(const std::string& path, const LogitsFileHeader& header) {
  LogitsWriter w;
  w.path_ = path;
  w.header_ = header;
  w.header_.tokens.clear();  // kept only for the count
  if (header.label.size() > kMaxLabel) w.header_.label.resize(kMaxLabel);
  w.f_.reset(std::fopen(path.c_str(), "wb"));
  if (!w.f_) return make_error("cannot create '", path, "': ", std::strerror(errno));
  std::vector<uint8_t> b(kMagic, kMagic + 8);
  put<uint32_t>(b, uint32_t(header.n_vocab));
  put<uint32_t>(b, uint32_t(header.plan.n_ctx));
  put<uint32_t>(b, uint32_t(header.plan.stride));
  put<uint32_t>(b, uint32_t(header.plan.first_scored));
  put<uint32_t>(b, uint32_t(header.plan.n_windows));
  put<int32_t>(b, header.bos);
  put<uint64_t>(b, header.vocab_fingerprint);
  put<uint64_t>(b, uint64_t(header.tokens.size()));
  put<uint32_t>(b, uint32_t(w.header_.label.size()));
  put<uint32_t>(b, crc32c(b.data(), b.size()));
  const size_t body = b.size();
  b.insert(b.end(), w.header_.label.begin(), w.header_.label.end());
  const auto* tp = reinterpret_cast<const uint8_t*>(header.tokens.data());
  b.insert(b.end(), tp, tp + header.tokens.size() * sizeof(int32_t));
  put<uint32_t>(b, crc32c(b.data() + body, b.size() - body));
  if (std::fwrite(b.data(), 1, b.size(), w.f_.get()) != b.size()) {
    return make_error("cannot write '", path, "': ", std::strerror(errno));
  }
  return w;
}

Status LogitsWriter::write_window(std::span<const float> log_probs) {
  if (log_probs.size_bytes() != window_bytes(header_)) {
    return make_error("write_window: ", log_probs.size(), " values for a window of ",
                      header_.plan.n_scored(), " x ", header_.n_vocab);
  }
  if (n_written_ >= header_.plan.n_windows) {
    return make_error("write_window: all ", header_.plan.n_windows, " windows are written");
  }
  const uint32_t crc = crc32c(log_probs.data(), log_probs.size_bytes());
  if (std::fwrite(log_probs.data(), 1, log_probs.size_bytes(), f_.get()) !=
          log_probs.size_bytes() ||
      std::fwrite(&crc, 4, 1, f_.get()) != 1) {
    return make_error("cannot write '", path_, "': ", std::strerror(errno));
  }
  ++n_written_;
  return {};
}

Status LogitsWriter::close() {
  if (!f_) return {};
  if (n_written_ != header_.plan.n_windows) {
    return make_error("'", path_, "': ", n_written_, " of ", header_.plan.n_windows,
                      " windows written");
  }
  std::FILE* f = f_.release();
  if (std::fclose(f) != 0) return make_error("cannot write '", path_, "': ", std::strerror(errno));
  return {};
}

Result<LogitsReader> LogitsReader::open(const std::string& path) {
  LogitsReader r;
  r.path_ = path;
  r.f_.reset(std::fopen(path.c_str(), "rb"));
  if (!r.f_) return make_error("cannot open logits file '", path, "': ", std::strerror(errno));
  const std::string what =
      "'" + path + "' is not a logits file of `sluice perplexity --save-logits`";
  uint8_t h[kHeaderBytes + 4];
  if (std::fread(h, 1, sizeof h, r.f_.get()) != sizeof h || std::memcmp(h, kMagic, 8) != 0) {
    return make_error(what, " (no SLPPLLG1 header)");
  }
  if (get<uint32_t>(h + kHeaderBytes) != crc32c(h, kHeaderBytes)) {
    return make_error("'", path, "' is corrupt (header checksum)");
  }
  LogitsFileHeader& x = r.header_;
  x.n_vocab = int32_t(get<uint32_t>(h + 8));
  x.plan.n_ctx = int32_t(get<uint32_t>(h + 12));
  x.plan.stride = int32_t(get<uint32_t>(h + 16));
  x.plan.first_scored = int32_t(get<uint32_t>(h + 20));
  x.plan.n_windows = int32_t(get<uint32_t>(h + 24));
  x.bos = get<int32_t>(h + 28);
  x.vocab_fingerprint = get<uint64_t>(h + 32);
  const uint64_t n_tokens = get<uint64_t>(h + 40);
  const uint32_t n_label = get<uint32_t>(h + 48);
  const WindowPlan& p = x.plan;
  // The checksum matched: a header this inconsistent was written by something else.
  if (x.n_vocab < 1 || x.n_vocab > (1 << 24) || p.n_ctx < 3 || p.n_ctx > (1 << 24) ||
      p.stride < 1 || p.stride > p.n_ctx || p.first_scored < 1 || p.first_scored >= p.n_ctx ||
      p.n_windows < 1 || n_label > kMaxLabel || n_tokens > (uint64_t(1) << 40) ||
      uint64_t(p.start(p.n_windows - 1)) + uint64_t(p.n_ctx) > n_tokens) {
    return make_error(what, " (inconsistent header)");
  }
  // A window is under 2^50 bytes (n_vocab, n_ctx <= 2^24); all of them under 2^62, so the size
  // below cannot overflow. The file's size must be that before anything large is read.
  if (uint64_t(window_bytes(x)) + 4 > (uint64_t(1) << 62) / uint64_t(p.n_windows)) {
    return make_error(what, " (inconsistent header)");
  }
  const uint64_t expect = sizeof h + n_label + n_tokens * 4 + 4 +
                          uint64_t(p.n_windows) * (uint64_t(window_bytes(x)) + 4);
  if (std::fseek(r.f_.get(), 0, SEEK_END) != 0) return make_error("cannot read '", path, "'");
  const long size = std::ftell(r.f_.get());
  if (size < 0 || uint64_t(size) != expect) {
    return make_error("'", path, "' has ", size, " bytes; its header says ", expect,
                      uint64_t(size) < expect ? " (truncated?)" : "");
  }
  std::fseek(r.f_.get(), long(sizeof h), SEEK_SET);
  std::vector<uint8_t> body(n_label + n_tokens * 4 + 4);
  if (std::fread(body.data(), 1, body.size(), r.f_.get()) != body.size()) {
    return make_error("cannot read '", path, "'");
  }
  if (get<uint32_t>(body.data() + body.size() - 4) != crc32c(body.data(), body.size() - 4)) {
    return make_error("'", path, "' is corrupt (checksum of its tokens)");
  }
  x.label.assign(reinterpret_cast<const char*>(body.data()), n_label);
  x.tokens.resize(n_tokens);
  std::memcpy(x.tokens.data(), body.data() + n_label, n_tokens * 4);
  return r;
}

Status LogitsReader::read_window(std::vector<float>& out) {
  if (n_read_ >= header_.plan.n_windows) {
    return make_error("'", path_, "': all ", header_.plan.n_windows, " windows are read");
  }
  out.resize(window_bytes(header_) / sizeof(float));
  uint32_t crc = 0;
  if (std::fread(out.data(), 1, window_bytes(header_), f_.get()) != window_bytes(header_) ||
      std::fread(&crc, 4, 1, f_.get()) != 1) {
    return make_error("cannot read window ", n_read_, " of '", path_, "'");
  }
  if (crc != crc32c(out.data(), window_bytes(header_))) {
    return make_error("'", path_, "' is corrupt (checksum of window ", n_read_, ")");
  }
  ++n_read_;
  return {};
}

}  // namespace sluice::eval
