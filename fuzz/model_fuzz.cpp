// libFuzzer target for the model loader beyond the GGUF parse: metadata to ModelConfig (every
// architecture family's rules, windows, soft-caps, experts, LongRoPE) and tensor binding (shapes,
// types, fused row views, 3-D expert slabs). Any input either loads or yields an error, never a
// crash or an out-of-bounds read; a model that loads has views that lie inside its tensors.
// Seeds: micro synthetic models of each family (make_corpus --models).
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <vector>

#include "gguf/gguf.h"
#include "gguf/quants.h"
#include "model/config.h"
#include "model/weights.h"

namespace {

// The first and last byte of every row of `m`: inside the parsed buffer (ASan checks).
size_t touch(const sluice::WeightMatrix& m) {
  if (!m.data || m.n_rows <= 0) return 0;
  const auto* p = static_cast<const uint8_t*>(m.data);
  const size_t bytes = sluice::row_size(m.type, m.n_cols) * size_t(m.n_rows);
  return bytes ? size_t(p[0]) + p[bytes - 1] : 0;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::vector<uint8_t> buf(data, data + size);
  auto f = sluice::GgufFile::parse(buf.data(), buf.size(), "fuzz.gguf");
  if (!f.ok()) return 0;
  auto c = sluice::read_model_config(*f, {});
  if (!c.ok()) return 0;
  auto w = sluice::bind_weights(*f, *c);
  if (!w.ok()) return 0;
  if (int(w->layers.size()) != c->n_layer) std::abort();
  size_t sum = touch(w->token_embd) + touch(w->output);
  for (const sluice::LayerWeights& l : w->layers) {
    for (const sluice::WeightMatrix* m :
         {&l.wq, &l.wk, &l.wv, &l.wo, &l.w_gate, &l.w_up, &l.w_down})
      sum += touch(*m);
    if (c->is_moe() && int(l.moe.gate.size()) != c->n_expert) std::abort();
    for (size_t e = 0; e < l.moe.gate.size(); ++e) {
      sum += touch(l.moe.gate[e]) + touch(l.moe.up[e]) + touch(l.moe.down[e]);
    }
    sum += touch(l.moe.router) + touch(l.moe.sh_down);
  }
  // Every layer's window and rope choice is defined.
  for (int il = 0; il < c->n_layer; ++il) sum += size_t(c->layer_window(il));
  return sum == 42 ? 1 : 0;
}
