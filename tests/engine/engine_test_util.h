// Shared by the engine tests: load a model with a CPU executor, and run requests to the end.
#pragma once

#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "engine/engine.h"
#include "executor/cpu_executor.h"
#include "model/model.h"

namespace sluice {

struct Loaded {
  Model model;
  Tokenizer tokenizer;
  std::unique_ptr<CpuExecutor> executor;
};

// draft_state_slots: recurrent models' state slots for speculative verification.
inline std::unique_ptr<Loaded> load(const std::string& path, int n_ctx, int n_blocks,
                                    int block_size = 16, KvType kv_type = KvType::kF16,
                                    int draft_state_slots = 0) {
  auto m = Model::load(path, {.n_ctx = n_ctx, .allow_context_beyond_trained = true});
  EXPECT_TRUE(m.ok()) << m.message();
  if (!m.ok()) return nullptr;
  auto t = Tokenizer::from_gguf(m->file());
  EXPECT_TRUE(t.ok()) << t.message();
  if (!t.ok()) return nullptr;
  auto l = std::make_unique<Loaded>(Loaded{std::move(*m), std::move(*t), nullptr});
  CpuExecutorOptions eo;
  eo.n_threads = 2;
  eo.n_blocks = n_blocks;
  eo.block_size = block_size;
  eo.kv_type = kv_type;
  eo.n_draft_state_slots = draft_state_slots;
  auto e = CpuExecutor::create(l->model, eo);
  EXPECT_TRUE(e.ok()) << e.message();
  if (!e.ok()) return nullptr;
  l->executor = std::move(*e);
  return l;
}

inline GenerationParams greedy(int max_tokens) {
  GenerationParams g;
  g.sampling.temperature = 0;
  g.max_tokens = max_tokens;
  return g;
}

struct Output {
  std::vector<int32_t> tokens;
  std::string text;
  FinishReason finish = FinishReason::kNone;
};

// Runs the engine until every request finished; `arrivals[i]` is the step request i joins.
inline std::vector<Output> run_all(Engine& engine, const std::vector<std::vector<int32_t>>& prompts,
                                   const std::vector<GenerationParams>& params,
                                   const std::vector<int>& arrivals) {
  std::vector<Output> out(prompts.size());
  std::map<RequestId, size_t> index;
  size_t added = 0;
  for (int step = 0; added < prompts.size() || engine.has_work(); ++step) {
    for (size_t i = 0; i < prompts.size(); ++i) {
      if (arrivals[i] == step) {
        auto id = engine.add_request(prompts[i], params[i]);
        EXPECT_TRUE(id.ok()) << id.message();
        index[*id] = i;
        ++added;
      }
    }
    auto events = engine.step();
    EXPECT_TRUE(events.ok()) << events.message();
    if (!events.ok()) break;
    for (const EngineEvent& ev : *events) {
      Output& o = out[index.at(ev.id)];
      o.tokens.insert(o.tokens.end(), ev.tokens.begin(), ev.tokens.end());
      o.text += ev.text;
      if (ev.finished()) o.finish = ev.finish;
    }
    if (step > 100000) break;
  }
  return out;
}

// `n` story prompts ("Once upon a time", "The little dog", "Lily and Ben", each followed by
// 0-5 " and the cat") with greedy params of min_tokens + rng() % spread tokens.
inline void story_prompts(const Tokenizer& tok, std::mt19937& rng, int n, int min_tokens,
                          int spread, std::vector<std::vector<int32_t>>& prompts,
                          std::vector<GenerationParams>& params) {
  const std::vector<std::string> starts = {"Once upon a time", "The little dog", "Lily and Ben"};
  for (int i = 0; i < n; ++i) {
    std::string text = starts[size_t(i) % starts.size()];
    for (int k = 0; k < int(rng() % 6); ++k) text += " and the cat";
    auto ids = tok.encode(text);
    ASSERT_TRUE(ids.ok());
    prompts.push_back(*ids);
    params.push_back(greedy(min_tokens + int(rng() % size_t(spread))));
  }
}

// Each request run alone, one after the other, on a plain engine over `l`.
inline std::vector<Output> run_each_alone(Loaded& l,
                                          const std::vector<std::vector<int32_t>>& prompts,
                                          const std::vector<GenerationParams>& params) {
  std::vector<Output> out;
  auto engine = Engine::create(l.tokenizer, *l.executor, {});
  EXPECT_TRUE(engine.ok());
  for (size_t i = 0; i < prompts.size(); ++i) {
    out.push_back(run_all(**engine, {prompts[i]}, {params[i]}, {0})[0]);
  }
  return out;
}

}  // namespace sluice
