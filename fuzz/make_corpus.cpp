// Writes the seed corpus for gguf_fuzz: tiny valid GGUF files made by our writer, covering
// every value type, nested arrays, alignment and several tensor types; with --models, the seeds
// of model_fuzz: micro synthetic models (1-2 layers, width 32) of every architecture family.
// Usage: make_corpus [--models] OUT_DIR
#include <cstdio>
#include <string>
#include <vector>

#include "gguf/gguf.h"
#include "model/convert.h"
#include "model/presets.h"

using namespace sluice;

namespace {

bool write(const GgufWriter& w, const std::string& path) {
  Status st = w.write(path);
  if (!st.ok()) std::fprintf(stderr, "%s\n", st.message().c_str());
  return st.ok();
}

}  // namespace

// One micro model per family: every hyperparameter path of the loader, a few KB each.
bool write_models(const std::string& dir) {
  bool ok = true;
  const char* archs[] = {"llama",  "qwen2", "qwen3",   "gemma",    "gemma2",
                         "gemma3", "phi3",  "mixtral", "qwen2moe", "qwen3moe"};
  for (const char* name : archs) {
    ModelPreset p;
    p.name = name;
    p.arch = name;
    p.n_layer = std::string(name) == "gemma3" ? 6 : 2;
    p.n_embd = 32;
    p.n_ff = 32;
    p.n_head = 2;
    p.n_kv_head = 1;
    p.head_dim = 16;
    p.n_vocab = 259;
    p.n_ctx = 64;
    p.tied_embeddings = true;
    const std::string a = name;
    if (a == "qwen2" || a == "qwen2moe") p.qkv_bias = true;
    if (a == "qwen3" || a == "qwen3moe" || a == "gemma3") p.qk_norm = true;
    if (a == "gemma2" || a == "gemma3" || a == "phi3") p.sliding_window = 4;
    if (a == "gemma2") p.attn_softcap = p.final_softcap = 30.0f;
    if (a == "mixtral") p.arch = "llama";
    if (a == "mixtral" || a == "qwen2moe" || a == "qwen3moe") {
      p.n_expert = 4;
      p.n_expert_used = 2;
      p.n_ff_exp = 32;
    }
    if (a == "qwen2moe") p.n_ff_shexp = 32;
    SynthParams sp;
    sp.preset = &p;
    sp.ftype = FileType::MOSTLY_Q8_0;
    sp.n_threads = 1;
    sp.out_path = dir + "/model_" + a + ".gguf";
    const Status st = synthesize_model(sp);
    if (!st.ok()) std::fprintf(stderr, "%s: %s\n", name, st.message().c_str());
    ok &= st.ok();
  }
  return ok;
}

int main(int argc, char** argv) {
  const bool models = argc == 3 && std::string(argv[1]) == "--models";
  if (argc != 2 && !models) {
    std::fprintf(stderr, "usage: make_corpus [--models] OUT_DIR\n");
    return 2;
  }
  if (models) return write_models(argv[2]) ? 0 : 1;
  const std::string dir = argv[1];
  bool ok = true;
  {
    GgufWriter w;
    w.set("general.architecture", "llama");
    ok &= write(w, dir + "/kv_only.gguf");
  }
  {
    GgufWriter w;
    w.set("u8", uint8_t(1));
    w.set("i8", int8_t(-1));
    w.set("u16", uint16_t(2));
    w.set("i16", int16_t(-2));
    w.set("u32", uint32_t(3));
    w.set("i32", int32_t(-3));
    w.set("f32", 0.5f);
    w.set("bool", true);
    w.set("str", "text");
    w.set("u64", uint64_t(4));
    w.set("i64", int64_t(-4));
    w.set("f64", 0.25);
    w.set("strs", make_string_array({"a", "bc"}));
    GgufArray nested;
    nested.elem_type = GgufType::ARRAY;
    nested.items.emplace_back(make_array(GgufType::INT32, std::vector<int32_t>{1, 2}));
    w.set("nested", nested);
    ok &= write(w, dir + "/every_type.gguf");
  }
  {
    GgufWriter w;
    w.set("general.architecture", "llama");
    w.set("general.alignment", uint32_t(64));
    std::vector<uint8_t> bytes(34 * 4, 7);
    ok &= w.add_tensor("f32", GgmlType::F32, {4, 2}, bytes.data()).ok();
    ok &= w.add_tensor("f16", GgmlType::F16, {3}, bytes.data()).ok();
    ok &= w.add_tensor("q8", GgmlType::Q8_0, {32, 2}, bytes.data()).ok();
    std::vector<uint8_t> q4k(144, 1);  // must outlive w.write()
    ok &= w.add_tensor("q4k", GgmlType::Q4_K, {256}, q4k.data()).ok();
    ok &= write(w, dir + "/tensors.gguf");
  }
  return ok ? 0 : 1;
}
