// K/V moved between engines (disaggregated prefill/decode, the simulator's P/D mode): a prompt
// computed by one engine, exported and imported into another, gives the same greedy output as
// computing it there, and the importer computes only the tail.
#include <gtest/gtest.h>

#include "engine/engine.h"
#include "engine/engine_test_util.h"
#include "executor/cpu_executor.h"
#include "test_util.h"

namespace sluice {
namespace {

TEST(EngineImport, ImportedPrefixGivesTheSameGreedyOutputAndSkipsItsBlocks) {
  SLUICE_REQUIRE_SHARED(path, "testdata/models/stories260K.gguf");
  auto a = load(path, 512, 64);
  auto b = load(path, 512, 64);
  auto c = load(path, 512, 64);
  ASSERT_TRUE(a && b && c);
  auto ids = a->tokenizer.encode(
      "Once upon a time, there was a little girl named Lily. She loved to play outside in the "
      "park with her friends. One day, she saw a big red ball under a tree. She ran to get it, "
      "but a dog took it first. Lily was sad, so her mom said they could look for another one.");
  ASSERT_TRUE(ids.ok());
  const std::vector<int32_t> prompt = *ids;
  ASSERT_GE(prompt.size(), 50u);

  // Reference: the whole request on a fresh engine.
  auto ref_engine = Engine::create(c->tokenizer, *c->executor, {});
  ASSERT_TRUE(ref_engine.ok());
  const auto want = run_all(**ref_engine, {prompt}, {greedy(24)}, {0});

  // "Prefill worker": computes the prompt (one token), then exports its full blocks.
  auto pa = Engine::create(a->tokenizer, *a->executor, {});
  ASSERT_TRUE(pa.ok());
  run_all(**pa, {prompt}, {greedy(1)}, {0});
  auto data = (*pa)->export_prefix(prompt);
  ASSERT_TRUE(data.ok()) << data.message();
  EXPECT_EQ(data->n_blocks, int32_t(prompt.size() / 16));

  // "Decode worker": imports, then runs the request; only the tail is computed.
  auto db = Engine::create(b->tokenizer, *b->executor, {});
  ASSERT_TRUE(db.ok());
  auto cached = (*db)->import_prefix(prompt, *data);
  ASSERT_TRUE(cached.ok()) << cached.message();
  EXPECT_EQ(*cached, int32_t(prompt.size() / 16) * 16);
  const auto got = run_all(**db, {prompt}, {greedy(24)}, {0});
  EXPECT_EQ(got[0].tokens, want[0].tokens);
  EXPECT_EQ((*db)->stats().prompt_tokens, prompt.size() - size_t(*cached));

  // The bytes are really used: another text's K/V under this prompt's hashes changes the
  // continuation. (Reordering blocks would not: attention is invariant to where a key sits.)
  auto other = a->tokenizer.encode(
      "The little dog ran fast to the big tree. He wanted to find his bone, but it was gone. He "
      "looked under the bed and behind the door, and then he saw a cat with a funny hat and a "
      "long tail who was sitting on the wall.");
  ASSERT_TRUE(other.ok());
  other->resize(prompt.size() / 16 * 16);
  ASSERT_GE(other->size(), prompt.size() / 16 * 16);
  run_all(**pa, {*other}, {greedy(1)}, {0});
  auto bad_r = (*pa)->export_prefix(*other);
  ASSERT_TRUE(bad_r.ok()) << bad_r.message();
  const KvBlockData bad = *bad_r;
  auto c2 = load(path, 512, 64);
  auto dc = Engine::create(c2->tokenizer, *c2->executor, {});
  ASSERT_TRUE(dc.ok());
  ASSERT_TRUE((*dc)->import_prefix(prompt, bad).ok());
  auto back = (*dc)->export_prefix(prompt);  // what was imported is what is there
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(back->bytes, bad.bytes);
  EXPECT_GT(data->bytes_per_block, 0u);
  EXPECT_NE(run_all(**dc, {prompt}, {greedy(24)}, {0})[0].tokens, want[0].tokens);
  EXPECT_EQ((*dc)->stats().prompt_tokens, prompt.size() - size_t(*cached));
}

TEST(EngineImport, MismatchesAreRefusedAndImportNothing) {
  SLUICE_REQUIRE_SHARED(path, "testdata/models/stories260K.gguf");
  auto a = load(path, 512, 64);
  ASSERT_TRUE(a);
  auto e = Engine::create(a->tokenizer, *a->executor, {});
  ASSERT_TRUE(e.ok());
  std::vector<int32_t> prompt(40, 5);
  KvBlockData d;
  d.layout = "something else";
  d.n_blocks = 2;
  auto r = (*e)->import_prefix(prompt, d);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.message().find("layout"), std::string::npos) << r.message();
  d.n_blocks = 3;  // 40 tokens have 2 full blocks
  EXPECT_FALSE((*e)->import_prefix(prompt, d).ok());
  EXPECT_EQ((*e)->kv().n_cached_prefix_tokens(prompt), 0);
  // Exporting a prefix that is not cached is an error.
  EXPECT_FALSE((*e)->export_prefix(prompt).ok());
}

}  // namespace
}  // namespace sluice
