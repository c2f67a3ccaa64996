// Writes the seed corpus for gguf_fuzz: tiny valid GGUF files made by our writer, covering
// every value type, nested arrays, alignment and several tensor types.
// Usage: make_corpus OUT_DIR
#include <cstdio>
#include <string>
#include <vector>

#include "gguf/gguf.h"

using namespace sluice;

namespace {

bool write(const GgufWriter& w, const std::string& path) {
  Status st = w.write(path);
  if (!st.ok()) std::fprintf(stderr, "%s\n", st.message().c_str());
  return st.ok();
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: make_corpus OUT_DIR\n");
    return 2;
  }
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
