// libFuzzer target for the GGUF reader: any input either parses or yields an error, never a
// crash, leak or out-of-bounds read. A file that parses must survive a rewrite.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "gguf/gguf.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // Copy into an exact-size buffer so ASan sees any read past the end.
  std::vector<uint8_t> buf(data, data + size);
  auto f = sluice::GgufFile::parse(buf.data(), buf.size(), "fuzz.gguf");
  if (!f.ok()) return 0;
  size_t checksum = 0;
  for (const auto& [k, v] : f->metadata()) checksum += k.size() + sluice::format_value(v).size();
  for (const auto& t : f->tensors()) {
    if (t.n_bytes) checksum += t.data[0] + t.data[t.n_bytes - 1];
  }
  // write(read(x)) parses, and is a fixed point: write(read(write(read(x)))) == write(read(x)).
  // (Bytes, not values, are compared: NaN metadata never equals itself.)
  auto rewrite = [](const sluice::GgufFile& g) {
    sluice::GgufWriter w;
    if (!w.add_all(g).ok()) std::abort();
    auto bytes = w.write_to_buffer();
    if (!bytes.ok()) std::abort();
    return std::move(bytes).value();
  };
  const std::vector<uint8_t> once = rewrite(*f);
  auto again = sluice::GgufFile::parse(once.data(), once.size(), "rewrite.gguf");
  if (!again.ok() || again->tensors().size() != f->tensors().size()) std::abort();
  for (size_t i = 0; i < f->tensors().size(); ++i) {
    const auto& a = f->tensors()[i];
    const auto& b = again->tensors()[i];
    if (a.name != b.name || a.type != b.type || a.n_bytes != b.n_bytes ||
        (a.n_bytes && std::memcmp(a.data, b.data, a.n_bytes) != 0)) {
      std::abort();
    }
  }
  if (rewrite(*again) != once) std::abort();
  return checksum == 42 ? 1 : 0;
}
