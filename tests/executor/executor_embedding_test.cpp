// Embedding models through the executor (LogitsMode::kPooled): a tiny random bert (mean, cls,
// rank pooling) against an independent f64 reference written here (plain loops over the GGUF
// tensors dequantized to double: none of model/, kernels/ or the executor), and a tiny qwen3
// embedding model (last-token pooling) against model/'s f64 ReferenceForward. Cosine >= 0.9999
// on every matmul ISA this CPU runs (attention runs the process's ISA: run the binary under
// SLUICE_ISA=scalar|avx2|avx512 for the others). Then batching: N sequences in one step give
// each one's vector bit for bit (every row's arithmetic is independent of the batch: the
// matmuls are batch-invariant per row, the attention per sequence, pooling in token order).
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "embedding_test_util.h"
#include "executor/cpu_executor.h"
#include "executor_test_util.h"
#include "gguf/quants.h"
#include "model/model.h"
#include "model/reference_forward.h"

namespace sluice::test {
namespace {

// ---- The independent reference: bert in f64 ------------------------------------------------

// A tensor of the file dequantized to double, row-major [ne1][ne0].
std::vector<double> tensor_f64(const GgufFile& f, const std::string& name) {
  const GgufTensorInfo* t = f.find_tensor(name);
  EXPECT_NE(t, nullptr) << name;
  if (!t) return {};
  const int64_t ne0 = t->ne[0], rows = t->n_rows();
  std::vector<float> row(static_cast<size_t>(ne0));
  std::vector<double> out;
  out.reserve(size_t(ne0 * rows));
  const size_t rs = row_size(t->type, ne0);
  for (int64_t r = 0; r < rows; ++r) {
    EXPECT_TRUE(dequantize_row(t->type, t->data + size_t(r) * rs, row.data(), ne0).ok());
    out.insert(out.end(), row.begin(), row.end());
  }
  return out;
}

// y[o] = sum_i W[o][i] x[i] + b[o] (W [n_out][n_in]).
std::vector<double> linear(const std::vector<double>& w, const std::vector<double>& b,
                           const std::vector<double>& x, size_t n_out) {
  const size_t n_in = x.size();
  std::vector<double> y(n_out);
  for (size_t o = 0; o < n_out; ++o) {
    double s = b.empty() ? 0.0 : b[o];
    for (size_t i = 0; i < n_in; ++i) s += w[o * n_in + i] * x[i];
    y[o] = s;
  }
  return y;
}

void layer_norm64(std::vector<double>& x, const std::vector<double>& w,
                  const std::vector<double>& b, double eps) {
  double mean = 0, var = 0;
  for (double v : x) mean += v;
  mean /= double(x.size());
  for (double v : x) var += (v - mean) * (v - mean);
  var /= double(x.size());
  for (size_t i = 0; i < x.size(); ++i) x[i] = (x[i] - mean) / std::sqrt(var + eps) * w[i] + b[i];
}

// One sequence through bert: the pooled vector (mean, cls) or the rank head's outputs.
std::vector<double> bert_reference(const GgufFile& f, const std::vector<int32_t>& tokens,
                                   const std::string& pooling) {
  const int64_t d = *f.get_int("bert.embedding_length");
  const int64_t n_head = *f.get_int("bert.attention.head_count");
  const int64_t n_layer = *f.get_int("bert.block_count");
  const int64_t ff = *f.get_int("bert.feed_forward_length");
  const double eps = *f.get_float("bert.attention.layer_norm_epsilon");
  const int64_t hd = d / n_head;
  const size_t T = tokens.size();
  const std::vector<double> tok = tensor_f64(f, "token_embd.weight");
  const std::vector<double> pos = tensor_f64(f, "position_embd.weight");
  const std::vector<double> typ = tensor_f64(f, "token_types.weight");
  std::vector<std::vector<double>> x(T, std::vector<double>(size_t(d)));
  for (size_t t = 0; t < T; ++t) {
    for (int64_t i = 0; i < d; ++i) {
      x[t][size_t(i)] =
          tok[size_t(tokens[t] * d + i)] + pos[t * size_t(d) + size_t(i)] + typ[size_t(i)];
    }
    layer_norm64(x[t], tensor_f64(f, "token_embd_norm.weight"),
                 tensor_f64(f, "token_embd_norm.bias"), eps);
  }
  for (int64_t il = 0; il < n_layer; ++il) {
    const std::string b = "blk." + std::to_string(il) + ".";
    auto W = [&](const std::string& n) { return tensor_f64(f, b + n); };
    const auto wq = W("attn_q.weight"), bq = W("attn_q.bias"), wk = W("attn_k.weight"),
               bk = W("attn_k.bias"), wv = W("attn_v.weight"), bv = W("attn_v.bias"),
               wo = W("attn_output.weight"), bo = W("attn_output.bias");
    std::vector<std::vector<double>> q(T), k(T), v(T);
    for (size_t t = 0; t < T; ++t) {
      q[t] = linear(wq, bq, x[t], size_t(d));
      k[t] = linear(wk, bk, x[t], size_t(d));
      v[t] = linear(wv, bv, x[t], size_t(d));
    }
    for (size_t t = 0; t < T; ++t) {
      std::vector<double> att(size_t(d), 0.0);
      for (int64_t h = 0; h < n_head; ++h) {
        std::vector<double> s(T);
        double mx = -1e300;
        for (size_t u = 0; u < T; ++u) {  // every position: no causal mask
          double dot = 0;
          for (int64_t i = 0; i < hd; ++i)
            dot += q[t][size_t(h * hd + i)] * k[u][size_t(h * hd + i)];
          s[u] = dot / std::sqrt(double(hd));
          mx = std::max(mx, s[u]);
        }
        double sum = 0;
        for (double& e : s) sum += (e = std::exp(e - mx));
        for (size_t u = 0; u < T; ++u) {
          for (int64_t i = 0; i < hd; ++i)
            att[size_t(h * hd + i)] += s[u] / sum * v[u][size_t(h * hd + i)];
        }
      }
      std::vector<double> o = linear(wo, bo, att, size_t(d));
      for (int64_t i = 0; i < d; ++i) o[size_t(i)] += x[t][size_t(i)];
      layer_norm64(o, W("attn_output_norm.weight"), W("attn_output_norm.bias"), eps);
      std::vector<double> up = linear(W("ffn_up.weight"), W("ffn_up.bias"), o, size_t(ff));
      for (double& g : up) {
        g = 0.5 * g * (1.0 + std::tanh(std::sqrt(2.0 / M_PI) * (g + 0.044715 * g * g * g)));
      }
      std::vector<double> down = linear(W("ffn_down.weight"), W("ffn_down.bias"), up, size_t(d));
      for (int64_t i = 0; i < d; ++i) down[size_t(i)] += o[size_t(i)];
      layer_norm64(down, W("layer_output_norm.weight"), W("layer_output_norm.bias"), eps);
      x[t] = std::move(down);  // the next token's attention reads k, v of this layer: computed
    }
  }
  if (pooling == "mean") {
    std::vector<double> m(size_t(d), 0.0);
    for (const auto& r : x) {
      for (int64_t i = 0; i < d; ++i) m[size_t(i)] += r[size_t(i)] / double(T);
    }
    return m;
  }
  if (pooling == "cls") return x[0];
  // rank: cls (+ bias), tanh, cls.output (+ bias)
  std::vector<double> h =
      linear(tensor_f64(f, "cls.weight"), tensor_f64(f, "cls.bias"), x[0], size_t(d));
  for (double& e : h) e = std::tanh(e);
  const GgufTensorInfo* out = f.find_tensor("cls.output.weight");
  return linear(tensor_f64(f, "cls.output.weight"), tensor_f64(f, "cls.output.bias"), h,
                size_t(out->ne[1]));
}

double cosine(const std::vector<float>& a, const std::vector<double>& b) {
  double ab = 0, aa = 0, bb = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    ab += double(a[i]) * b[i];
    aa += double(a[i]) * double(a[i]);
    bb += b[i] * b[i];
  }
  return ab / std::sqrt(aa * bb);
}

std::vector<MatmulIsa> runnable_isas() {
  std::vector<MatmulIsa> v;
  for (MatmulIsa isa : {MatmulIsa::kScalar, MatmulIsa::kAvx2, MatmulIsa::kAvx512}) {
    if (cpu_runs_isa(isa)) v.push_back(isa);
  }
  return v;
}

// Pooled rows of `inputs`, all in one batch (or one batch each).
std::vector<std::vector<float>> run_pooled(CpuExecutor& exec,
                                           const std::vector<std::vector<int32_t>>& inputs,
                                           bool one_batch) {
  BlockFreeList blocks(exec.n_blocks());
  std::vector<std::vector<float>> out;
  auto run = [&](size_t i0, size_t i1) {
    Batch batch = batch_for(exec);
    std::vector<TestSequence> seqs(i1 - i0);
    for (size_t i = i0; i < i1; ++i) {
      add_step(batch, blocks, seqs[i - i0], inputs[i], LogitsMode::kPooled);
    }
    Logits logits;
    const Status st = exec.execute(batch, logits);
    EXPECT_TRUE(st.ok()) << st.message();
    EXPECT_EQ(logits.n_rows(), int32_t(i1 - i0));
    for (int32_t r = 0; r < logits.n_rows(); ++r) {
      out.emplace_back(logits.row(r), logits.row(r) + logits.n_vocab);
    }
    for (TestSequence& s : seqs) free_blocks(blocks, s);
  };
  if (one_batch) {
    run(0, inputs.size());
  } else {
    for (size_t i = 0; i < inputs.size(); ++i) run(i, i + 1);
  }
  return out;
}

const std::vector<std::vector<int32_t>> kInputs = {
    {101, 7592, 2088, 102},
    {101, 1996, 4248, 2829, 4419, 14523, 2058, 1996, 13971, 3899, 1012, 102},
    {101, 2023, 102},
    {101,  2157, 2000, 2113, 1010, 2339, 2024, 2057, 2182, 1029, 3398,
     1010, 1045, 2228, 2061, 1012, 2009, 2003, 2200, 2172, 102},
};

class BertEmbedding : public ::testing::TestWithParam<std::string> {};

TEST_P(BertEmbedding, MatchesTheF64ReferenceOnEveryIsa) {
  SLUICE_REQUIRE_SHARED(vocab, "testdata/tokenizer/ggml-vocab-bert-bge.gguf");
  const std::string pooling = GetParam();
  TempDir dir;
  const std::string path = dir.path("bert.gguf");
  write_embedding_model(pooling == "rank" ? "tiny-bert-rank" : "tiny-bert", vocab, path,
                        /*seed=*/7, /*weight_scale=*/5.0f);
  ModelOptions mo;
  mo.pooling = parse_pooling(pooling);
  auto model = Model::load(path, mo);
  ASSERT_TRUE(model.ok()) << model.message();
  auto file = GgufFile::open(path);
  ASSERT_TRUE(file.ok());
  std::vector<std::vector<double>> want;
  for (const auto& in : kInputs) want.push_back(bert_reference(*file, in, pooling));
  for (MatmulIsa isa : runnable_isas()) {
    SCOPED_TRACE(matmul_isa_name(isa));
    auto exec = CpuExecutor::create(*model, {.n_threads = 2, .n_blocks = 64, .matmul_isa = isa});
    ASSERT_TRUE(exec.ok()) << exec.message();
    const auto got = run_pooled(**exec, kInputs, /*one_batch=*/true);
    ASSERT_EQ(got.size(), kInputs.size());
    for (size_t i = 0; i < got.size(); ++i) {
      ASSERT_EQ(got[i].size(), want[i].size());
      if (pooling == "rank") {  // one score
        EXPECT_NEAR(got[i][0], want[i][0], 1e-3 * (1 + std::abs(want[i][0]))) << "input " << i;
      } else {
        EXPECT_GE(cosine(got[i], want[i]), 0.9999) << "input " << i;
      }
    }
    // The comparison can fail: different inputs give clearly different vectors (scores), and
    // the differences between inputs agree too.
    if (pooling == "rank") {
      EXPECT_GT(std::abs(want[0][0] - want[1][0]), 0.05);
    } else {
      EXPECT_LT(cosine(got[0], want[1]), 0.99);
      for (size_t i = 1; i < got.size(); ++i) {
        std::vector<float> dg(got[i].size());
        std::vector<double> dw(dg.size());
        for (size_t k = 0; k < dg.size(); ++k) {
          dg[k] = got[i][k] - got[0][k];
          dw[k] = want[i][k] - want[0][k];
        }
        EXPECT_GE(cosine(dg, dw), 0.999) << "input " << i << " - input 0";
      }
    }
    // Batching does not change a vector: bit for bit.
    const auto alone = run_pooled(**exec, kInputs, /*one_batch=*/false);
    for (size_t i = 0; i < got.size(); ++i) EXPECT_EQ(got[i], alone[i]) << "input " << i;
  }
}

TEST(BertEncoder, RefusesLogitsBatches) {
  SLUICE_REQUIRE_SHARED(vocab, "testdata/tokenizer/ggml-vocab-bert-bge.gguf");
  TempDir dir;
  const std::string path = dir.path("bert.gguf");
  write_embedding_model("tiny-bert", vocab, path);
  auto model = Model::load(path);
  ASSERT_TRUE(model.ok()) << model.message();
  auto exec = CpuExecutor::create(*model, {.n_threads = 1, .n_blocks = 16});
  ASSERT_TRUE(exec.ok()) << exec.message();
  BlockFreeList blocks((*exec)->n_blocks());
  Batch batch = batch_for(**exec);
  TestSequence seq;
  add_step(batch, blocks, seq, {101, 7592, 102}, LogitsMode::kLast);
  Logits out;
  const Status st = (*exec)->execute(batch, out);
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find("embeddings only"), std::string::npos) << st.message();
}

INSTANTIATE_TEST_SUITE_P(Pooling, BertEmbedding, ::testing::Values("mean", "cls", "rank"));

TEST(Qwen3Embedding, LastTokenMatchesTheF64ReferenceForward) {
  TempDir dir;
  const std::string path = dir.path("qwen3.gguf");
  write_embedding_model("tiny-qwen3-embed", "", path);
  auto model = Model::load(path);
  ASSERT_TRUE(model.ok()) << model.message();
  ASSERT_EQ(model->config().pooling, Pooling::kLast);
  const std::vector<std::vector<int32_t>> inputs = {
      {1, 40, 50, 60, 70}, {1, 300}, {1, 9, 8, 7, 6, 5, 4, 3, 2, 100, 200, 250}};
  std::vector<std::vector<double>> want;
  for (const auto& in : inputs) {
    auto ref = ReferenceForward::create(*model);
    ASSERT_TRUE(ref.ok());
    for (int32_t t : in) ASSERT_TRUE((*ref)->step(t).ok());
    want.push_back((*ref)->last_hidden());
  }
  for (MatmulIsa isa : runnable_isas()) {
    SCOPED_TRACE(matmul_isa_name(isa));
    auto exec = CpuExecutor::create(*model, {.n_threads = 2, .n_blocks = 64, .matmul_isa = isa});
    ASSERT_TRUE(exec.ok()) << exec.message();
    const auto got = run_pooled(**exec, inputs, /*one_batch=*/true);
    ASSERT_EQ(got.size(), inputs.size());
    for (size_t i = 0; i < got.size(); ++i) {
      ASSERT_EQ(got[i].size(), size_t(model->config().n_embd));
      EXPECT_GE(cosine(got[i], want[i]), 0.9999) << "input " << i;
    }
    EXPECT_LT(cosine(got[0], want[1]), 0.999);
    const auto alone = run_pooled(**exec, inputs, /*one_batch=*/false);
    for (size_t i = 0; i < got.size(); ++i) EXPECT_EQ(got[i], alone[i]) << "input " << i;
  }
}

TEST(Embedding, PooledBatchesAreChecked) {
  TempDir dir;
  const std::string path = dir.path("qwen3.gguf");
  write_embedding_model("tiny-qwen3-embed", "", path);
  auto model = Model::load(path);
  ASSERT_TRUE(model.ok()) << model.message();
  auto exec = CpuExecutor::create(*model, {.n_threads = 1, .n_blocks = 16});
  ASSERT_TRUE(exec.ok());
  BlockFreeList blocks((*exec)->n_blocks());
  // Pooled and logits sequences in one batch: refused.
  Batch mixed = batch_for(**exec);
  TestSequence a, b;
  add_step(mixed, blocks, a, {1, 2, 3}, LogitsMode::kPooled);
  add_step(mixed, blocks, b, {1, 2}, LogitsMode::kLast);
  Logits out;
  Status st = (*exec)->execute(mixed, out);
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find("mixes pooled"), std::string::npos) << st.message();
  // A pooled sequence must be whole in its step.
  Batch chunk = batch_for(**exec);
  TestSequence c;
  add_step(chunk, blocks, c, {1, 2, 3}, LogitsMode::kLast);
  ASSERT_TRUE((*exec)->execute(chunk, out).ok());
  Batch rest = batch_for(**exec);
  add_step(rest, blocks, c, {4, 5}, LogitsMode::kPooled);
  st = (*exec)->execute(rest, out);
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find("one step"), std::string::npos) << st.message();
}

}  // namespace
}  // namespace sluice::test
