// Bad models fail at load, before any compute, with one clear error naming the key or tensor.
// The broken files are a valid synthetic model rewritten with one defect.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>

#include "gguf/gguf.h"
#include "model/model.h"
#include "model/model_test_util.h"
#include "test_util.h"

namespace sluice {
namespace {

struct Defect {
  std::string drop_tensor;                // leave this tensor out
  std::string retype_tensor;              // re-declare this tensor...
  GgmlType new_type = GgmlType::F32;      // ...with this type
  std::vector<int64_t> new_shape;         // ...and/or this shape (empty: keep)
  std::function<void(GgufWriter&)> meta;  // metadata edits
};

class ModelErrors : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new test::TempDir();
    test::write_synthetic_model("tiny", FileType::ALL_F32, dir_->path("good.gguf"));
    test::write_synthetic_model("tiny-qwen2", FileType::ALL_F32, dir_->path("qwen2.gguf"));
    test::write_synthetic_model("tiny-qwen2moe", FileType::ALL_F32, dir_->path("moe.gguf"));
    test::write_synthetic_model("tiny-gemma2", FileType::ALL_F32, dir_->path("gemma2.gguf"));
  }
  static void TearDownTestSuite() {
    delete dir_;
    dir_ = nullptr;
  }

  // Loads `base` rewritten with `d`; returns the load error ("" if it loaded).
  // `base`: a file of this suite's directory, or an absolute path.
  static std::string load_with(const Defect& d, const std::string& base = "good.gguf") {
    auto f = GgufFile::open(base.front() == '/' ? base : dir_->path(base));
    EXPECT_TRUE(f.ok()) << f.message();
    GgufWriter w;
    for (const auto& [k, v] : f->metadata()) w.set(k, v);
    if (d.meta) d.meta(w);
    for (const GgufTensorInfo& t : f->tensors()) {
      if (t.name == d.drop_tensor) continue;
      std::vector<int64_t> ne(t.ne, t.ne + t.n_dims);
      GgmlType type = t.type;
      if (t.name == d.retype_tensor) {
        type = d.new_type;
        if (!d.new_shape.empty()) ne = d.new_shape;
      }
      EXPECT_TRUE(w.add_tensor(t.name, type, ne, static_cast<const void*>(t.data)).ok());
    }
    const std::string out = dir_->path("broken.gguf");
    const Status s = w.write(out);
    EXPECT_TRUE(s.ok()) << s.message();
    auto m = Model::load(out);
    return m.ok() ? std::string() : m.message();
  }

  // A copy of the GGUF at `src` whose tensor `name` has ne[dim] = value in its header.
  static std::string patched_copy(const std::string& src, const std::string& name, int dim,
                                  uint64_t value) {
    std::string bytes = test::read_file(src);
    // Tensor info: u64 name length, the name, u32 n_dims, u64 ne[n_dims], u32 type, u64 offset.
    std::string key(8, '\0');
    const uint64_t len = name.size();
    std::memcpy(key.data(), &len, 8);
    key += name;
    const size_t at = bytes.find(key);
    EXPECT_NE(at, std::string::npos) << name;
    std::memcpy(bytes.data() + at + key.size() + 4 + 8 * size_t(dim), &value, 8);
    const std::string out = dir_->path("patched.gguf");
    std::ofstream(out, std::ios::binary).write(bytes.data(), std::streamsize(bytes.size()));
    return out;
  }

  static test::TempDir* dir_;
};
test::TempDir* ModelErrors::dir_ = nullptr;

#define EXPECT_HAS(msg, part) \
  EXPECT_NE((msg).find(part), std::string::npos) << "message: " << (msg) << "\nwanted: " << (part)

TEST_F(ModelErrors, GoodFileLoads) {
  EXPECT_EQ(load_with({}), "");
}

TEST_F(ModelErrors, UnsupportedArchitecture) {
  Defect d;
  d.meta = [](GgufWriter& w) { w.set("general.architecture", "gpt2"); };
  const std::string msg = load_with(d);
  EXPECT_HAS(msg, "unsupported architecture 'gpt2'");
  EXPECT_HAS(msg, "llama, qwen2, qwen3, gemma");
}

TEST_F(ModelErrors, MissingTensor) {
  Defect d;
  d.drop_tensor = "blk.1.ffn_up.weight";
  EXPECT_HAS(load_with(d), "required tensor 'blk.1.ffn_up.weight' is missing");
}

TEST_F(ModelErrors, MissingBiasOfQwen2) {
  Defect d;
  d.drop_tensor = "blk.0.attn_k.bias";
  EXPECT_HAS(load_with(d, "qwen2.gguf"), "required tensor 'blk.0.attn_k.bias' is missing");
}

TEST_F(ModelErrors, WrongShape) {
  Defect d;
  d.retype_tensor = "blk.0.attn_k.weight";
  d.new_shape = {256, 64};
  const std::string msg = load_with(d);
  EXPECT_HAS(msg, "tensor 'blk.0.attn_k.weight' has shape [256, 64], expected [256, 128]");
}

TEST_F(ModelErrors, WrongShapeOfNorm) {
  Defect d;
  d.retype_tensor = "output_norm.weight";
  d.new_shape = {128};
  EXPECT_HAS(load_with(d), "tensor 'output_norm.weight' has shape [128], expected [256]");
}

TEST_F(ModelErrors, UnsupportedTensorType) {
  Defect d;
  d.retype_tensor = "blk.1.attn_q.weight";
  d.new_type = GgmlType::I32;
  EXPECT_HAS(load_with(d), "tensor 'blk.1.attn_q.weight' has type i32");
}

TEST_F(ModelErrors, VocabMismatch) {
  Defect d;
  d.meta = [](GgufWriter& w) {
    std::vector<std::string> tokens(500, "x");
    w.set("tokenizer.ggml.tokens", make_string_array(tokens));
  };
  EXPECT_HAS(load_with(d),
             "vocabulary mismatch: tensor 'token_embd.weight' has 512 rows but "
             "'tokenizer.ggml.tokens' has 500 tokens");
}

TEST_F(ModelErrors, VocabSizeKeyMismatch) {
  Defect d;
  d.meta = [](GgufWriter& w) { w.set("llama.vocab_size", uint32_t(1000)); };
  EXPECT_HAS(load_with(d), "'llama.vocab_size' is 1000");
}

TEST_F(ModelErrors, MissingMetadataKey) {
  Defect d;
  d.meta = [](GgufWriter& w) { w.remove("llama.block_count"); };
  EXPECT_HAS(load_with(d), "metadata key 'llama.block_count' not found");
}

// A block_count far beyond the file's tensors is refused before anything is sized by it (model_fuzz
// found a count that made reserving the layers exhaust memory).
TEST_F(ModelErrors, BlockCountBeyondTheTensors) {
  Defect d;
  d.meta = [](GgufWriter& w) { w.set("llama.block_count", uint32_t(100000000)); };
  EXPECT_HAS(load_with(d), "block_count 100000000 exceeds the");
}

TEST_F(ModelErrors, HeadCountsDoNotDivide) {
  Defect d;
  d.meta = [](GgufWriter& w) { w.set("llama.attention.head_count_kv", uint32_t(3)); };
  EXPECT_HAS(load_with(d), "is not a multiple of llama.attention.head_count_kv (3)");
}

// Head counts whose attention width (heads x key length) overflows an int (model_fuzz).
TEST_F(ModelErrors, AttentionWidthBeyond32Bits) {
  Defect d;
  d.meta = [](GgufWriter& w) {
    w.set("llama.attention.head_count", uint32_t(268435458));
    w.set("llama.attention.head_count_kv", uint32_t(268435458));
    w.set("llama.attention.key_length", uint32_t(16));
    w.set("llama.attention.value_length", uint32_t(16));
  };
  EXPECT_HAS(load_with(d),
             "llama.attention.head_count (268435458) x "
             "llama.attention.key_length (16) is beyond a 32-bit width");
}

TEST_F(ModelErrors, UnsupportedRopeScaling) {
  Defect d;
  d.meta = [](GgufWriter& w) { w.set("llama.rope.scaling.type", "longrope"); };
  EXPECT_HAS(load_with(d), "'llama.rope.scaling.type' = 'longrope' is not supported");
  EXPECT_HAS(load_with(d), "(supported: none, linear, yarn)");
  Defect yarn;  // YaRN needs its factor
  yarn.meta = [](GgufWriter& w) { w.set("llama.rope.scaling.type", "yarn"); };
  EXPECT_HAS(load_with(yarn), "metadata key 'llama.rope.scaling.factor' not found");
}

// gpt-oss (the tiny model of ../shared/testdata/models/arch) with one defect: sinks of the
// wrong length, MXFP4 experts whose rows are not whole blocks or whose slabs miss an expert,
// a missing expert bias, no window.
TEST_F(ModelErrors, GptOssSinksExpertsAndWindow) {
  SLUICE_REQUIRE_SHARED(path, "testdata/models/arch/gpt-oss.gguf");
  EXPECT_EQ(load_with({}, path), "");
  Defect sinks;
  sinks.retype_tensor = "blk.1.attn_sinks.weight";
  sinks.new_shape = {5};
  EXPECT_HAS(load_with(sinks, path),
             "tensor 'blk.1.attn_sinks.weight' has shape [5], expected [4]");
  // An MXFP4 tensor whose shape does not match its bytes (the writer refuses such shapes, so
  // the header of a copy is patched): rows of 48 values (one and a half blocks), or 17 experts'
  // slabs in the bytes of 16.
  const std::string rows = patched_copy(path, "blk.0.ffn_up_exps.weight", 0, 48);
  EXPECT_HAS(Model::load(rows).message(),
             "tensor 'blk.0.ffn_up_exps.weight' of type mxfp4 has row length 48, not a multiple "
             "of the block size 32");
  const std::string slabs17 = patched_copy(path, "blk.0.ffn_up_exps.weight", 2, 17);
  const std::string msg17 = Model::load(slabs17).message();
  EXPECT_HAS(msg17, "blk.0.ffn_up_exps.weight");
  EXPECT_TRUE(msg17.find("overlaps tensor") != std::string::npos ||
              msg17.find("extends past the end") != std::string::npos)
      << msg17;
  Defect slabs;
  slabs.retype_tensor = "blk.2.ffn_down_exps.weight";
  slabs.new_type = GgmlType::MXFP4;
  slabs.new_shape = {64, 64, 15};
  EXPECT_HAS(load_with(slabs, path),
             "tensor 'blk.2.ffn_down_exps.weight' has shape [64, 64, 15], expected [64, 64, 16]");
  Defect bias;
  bias.drop_tensor = "blk.3.ffn_gate_exps.bias";
  EXPECT_HAS(load_with(bias, path), "required tensor 'blk.3.ffn_gate_exps.bias' is missing");
  Defect window;
  window.meta = [](GgufWriter& w) { w.set("gpt-oss.attention.sliding_window", uint32_t(0)); };
  EXPECT_HAS(load_with(window, path), "gpt-oss.attention.sliding_window is missing or 0");
}

TEST_F(ModelErrors, NotAFile) {
  auto m = Model::load(dir_->path("nope.gguf"));
  ASSERT_FALSE(m.ok());
  EXPECT_HAS(m.message(), "failed to load model");
  EXPECT_HAS(m.message(), "nope.gguf");
}

TEST_F(ModelErrors, MoeExpertCountsAndTensors) {
  Defect more;
  more.meta = [](GgufWriter& w) { w.set("qwen2moe.expert_used_count", uint32_t(7)); };
  EXPECT_HAS(load_with(more, "moe.gguf"),
             "qwen2moe.expert_used_count (7) exceeds qwen2moe.expert_count (6)");
  Defect none;
  none.meta = [](GgufWriter& w) { w.set("qwen2moe.expert_count", uint32_t(0)); };
  EXPECT_HAS(load_with(none, "moe.gguf"), "qwen2moe.expert_count is missing or 0");
  Defect drop;
  drop.drop_tensor = "blk.1.ffn_down_exps.weight";
  EXPECT_HAS(load_with(drop, "moe.gguf"),
             "required tensor 'blk.1.ffn_down_exps.weight' is missing");
  Defect shape;  // 5 experts' slabs where the metadata says 6
  shape.retype_tensor = "blk.0.ffn_up_exps.weight";
  shape.new_shape = {256, 64, 5};
  EXPECT_HAS(load_with(shape, "moe.gguf"),
             "tensor 'blk.0.ffn_up_exps.weight' has shape [256, 64, 5], expected [256, 64, 6]");
}

// A window larger than the trained context: refused where windowed and global layers alternate
// (it is what tells them apart); on a model windowed on every layer it means no window.
TEST_F(ModelErrors, AWindowLargerThanTheContext) {
  Defect wide;
  wide.meta = [](GgufWriter& w) { w.set("gemma2.attention.sliding_window", uint32_t(1) << 20); };
  EXPECT_HAS(load_with(wide, "gemma2.gguf"),
             "gemma2.attention.sliding_window 1048576 is larger than the trained context of");
  Defect uniform;
  uniform.meta = [](GgufWriter& w) { w.set("llama.attention.sliding_window", uint32_t(1) << 20); };
  EXPECT_EQ(load_with(uniform), "");
  auto m = Model::load(dir_->path("broken.gguf"));
  ASSERT_TRUE(m.ok()) << m.message();
  ASSERT_EQ(m->config().arch_name, "llama");  // the key above is the one it reads
  EXPECT_EQ(m->config().sliding_window, 0);
  EXPECT_FALSE(m->config().any_window());
}

TEST_F(ModelErrors, Gemma2NeedsItsWindowAndPostNorms) {
  Defect window;
  window.meta = [](GgufWriter& w) { w.set("gemma2.attention.sliding_window", uint32_t(0)); };
  EXPECT_HAS(load_with(window, "gemma2.gguf"), "gemma2.attention.sliding_window is missing or 0");
  Defect norm;
  norm.drop_tensor = "blk.1.post_ffw_norm.weight";
  EXPECT_HAS(load_with(norm, "gemma2.gguf"),
             "required tensor 'blk.1.post_ffw_norm.weight' is missing");
  Defect cap;
  cap.meta = [](GgufWriter& w) { w.set("gemma2.attn_logit_softcapping", -1.0f); };
  EXPECT_HAS(load_with(cap, "gemma2.gguf"), "must be a finite number >= 0");
}

// qwen35 (the shared tiny hybrid, copied): Gated DeltaNet tensors, the attention interval and
// the recurrent-layer list are checked, each error naming the tensor or key.
TEST_F(ModelErrors, Qwen35RecurrentLayers) {
  SLUICE_REQUIRE_SHARED(src, "testdata/models/arch/qwen35.gguf");
  std::filesystem::copy_file(src, dir_->path("qwen35.gguf"),
                             std::filesystem::copy_options::overwrite_existing);
  EXPECT_EQ(load_with({}, "qwen35.gguf"), "");
  Defect conv;
  conv.drop_tensor = "blk.0.ssm_conv1d.weight";
  EXPECT_HAS(load_with(conv, "qwen35.gguf"),
             "required tensor 'blk.0.ssm_conv1d.weight' is missing");
  Defect a;
  a.retype_tensor = "blk.1.ssm_a";
  a.new_shape = {5};
  EXPECT_HAS(load_with(a, "qwen35.gguf"), "tensor 'blk.1.ssm_a' has shape [5], expected [4]");
  Defect qkv;
  qkv.retype_tensor = "blk.2.attn_qkv.weight";
  qkv.new_shape = {64, 256};
  EXPECT_HAS(load_with(qkv, "qwen35.gguf"),
             "tensor 'blk.2.attn_qkv.weight' has shape [64, 256], expected [64, 512]");
  Defect interval;
  interval.meta = [](GgufWriter& w) { w.set("qwen35.full_attention_interval", uint32_t(3)); };
  EXPECT_HAS(load_with(interval, "qwen35.gguf"),
             "qwen35.full_attention_interval (3) does not divide the 8 layers");
  Defect list;
  list.meta = [](GgufWriter& w) {
    w.set("qwen35.attention.recurrent_layers",
          make_array(GgufType::INT32, std::vector<int32_t>{1, 1, 1, 0, 1}));
  };
  EXPECT_HAS(load_with(list, "qwen35.gguf"),
             "qwen35.attention.recurrent_layers has 5 entries for 8 layers");
  Defect inner;
  inner.meta = [](GgufWriter& w) { w.set("qwen35.ssm.inner_size", uint32_t(100)); };
  EXPECT_HAS(load_with(inner, "qwen35.gguf"), "qwen35.ssm.inner_size (100) is not");
}

// gemma4 (the shared tiny model, copied): the pattern and per-layer KV head arrays must have a
// value per layer, every per-layer input tensor and the K/V projections of the layers that
// store K/V must be there; errors name the key or tensor.
TEST_F(ModelErrors, Gemma4PerLayerKeysAndTensors) {
  SLUICE_REQUIRE_SHARED(src, "testdata/models/arch/gemma4.gguf");
  std::filesystem::copy_file(src, dir_->path("gemma4.gguf"),
                             std::filesystem::copy_options::overwrite_existing);
  EXPECT_EQ(load_with({}, "gemma4.gguf"), "");
  Defect pattern;
  pattern.meta = [](GgufWriter& w) {
    w.set("gemma4.attention.sliding_window_pattern",
          make_array(GgufType::BOOL, std::vector<bool>{true, true, true}));
  };
  EXPECT_HAS(load_with(pattern, "gemma4.gguf"),
             "gemma4.attention.sliding_window_pattern has 3 entries for 10 layers");
  Defect no_pattern;
  no_pattern.meta = [](GgufWriter& w) {
    w.set("gemma4.attention.sliding_window_pattern", uint32_t(4));
  };
  EXPECT_HAS(load_with(no_pattern, "gemma4.gguf"),
             "metadata key 'gemma4.attention.sliding_window_pattern' has type");
  Defect kv_heads;
  kv_heads.meta = [](GgufWriter& w) {
    w.set("gemma4.attention.head_count_kv",
          make_array(GgufType::INT32, std::vector<int32_t>{2, 2, 2, 2}));
  };
  EXPECT_HAS(load_with(kv_heads, "gemma4.gguf"),
             "gemma4.attention.head_count_kv has 4 entries for 10 layers");
  for (const char* name :
       {"blk.3.inp_gate.weight", "blk.7.proj.weight", "blk.0.post_norm.weight",
        "per_layer_token_embd.weight", "per_layer_model_proj.weight", "per_layer_proj_norm.weight",
        "blk.4.attn_k.weight", "blk.2.attn_k_norm.weight", "blk.9.attn_q_norm.weight"}) {
    Defect missing;
    missing.drop_tensor = name;
    EXPECT_HAS(load_with(missing, "gemma4.gguf"),
               std::string("required tensor '") + name + "' is missing");
  }
  Defect ple;
  ple.retype_tensor = "per_layer_token_embd.weight";
  ple.new_type = GgmlType::F16;
  ple.new_shape = {72, 32000};
  EXPECT_HAS(load_with(ple, "gemma4.gguf"),
             "tensor 'per_layer_token_embd.weight' has shape [72, 32000], expected [80, n_vocab]");
  Defect swa_head;
  swa_head.retype_tensor = "blk.1.attn_q_norm.weight";
  swa_head.new_shape = {64};
  EXPECT_HAS(load_with(swa_head, "gemma4.gguf"),
             "tensor 'blk.1.attn_q_norm.weight' has shape [64], expected [32]");
  Defect shared;
  shared.meta = [](GgufWriter& w) { w.set("gemma4.attention.shared_kv_layers", uint32_t(9)); };
  EXPECT_HAS(load_with(shared, "gemma4.gguf"),
             "gemma4.attention.shared_kv_layers = 9 leaves 1 layers with K/V of their own");
  ModelOptions tp;
  tp.tp_size = 2;
  auto m = Model::load(dir_->path("gemma4.gguf"), tp);
  ASSERT_FALSE(m.ok());
  EXPECT_HAS(m.message(), "tensor parallel: gemma4");
}

}  // namespace
}  // namespace sluice
