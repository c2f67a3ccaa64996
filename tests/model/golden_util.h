// Golden outputs of real tiny models (../shared/testdata/models/*.json, produced by llama.cpp;
// see that directory's README): prompt tokens, logits at every prompt position, and the greedy
// continuation.
#pragma once

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <string>
#include <vector>

#include "test_util.h"

namespace sluice::test {

struct GoldenCase {
  std::string name;        // "stories260K.once_upon_a_time"
  std::string model_path;  // the .gguf beside it
  std::vector<int32_t> prompt_tokens;
  int n_vocab = 0;
  std::vector<std::vector<float>> prompt_logits;  // [n_prompt][n_vocab]
  std::vector<int32_t> greedy_tokens;
};

// Context for every golden run: stories260K was trained at 512 though its file says 128.
constexpr int kGoldenContext = 512;
constexpr int32_t kGoldenEos = 2;

inline std::vector<GoldenCase> load_golden_cases() {
  std::vector<GoldenCase> cases;
  const std::string dir = shared_path("testdata/models");
  if (dir.empty()) return cases;
  std::vector<std::filesystem::path> files;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    if (e.path().extension() == ".json") files.push_back(e.path());
  }
  std::sort(files.begin(), files.end());
  for (const auto& p : files) {
    const nlohmann::json j = nlohmann::json::parse(read_file(p.string()));
    GoldenCase c;
    c.name = p.stem().string();
    c.model_path = (p.parent_path() / (c.name.substr(0, c.name.find('.')) + ".gguf")).string();
    c.prompt_tokens = j.at("prompt_tokens").get<std::vector<int32_t>>();
    c.n_vocab = j.at("n_vocab").get<int>();
    c.prompt_logits = j.at("prompt_logits").get<std::vector<std::vector<float>>>();
    c.greedy_tokens = j.at("greedy_tokens").get<std::vector<int32_t>>();
    cases.push_back(std::move(c));
  }
  return cases;
}

inline double golden_rel_l2(const float* got, const std::vector<float>& want) {
  double num = 0, den = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    num += (double(got[i]) - want[i]) * (double(got[i]) - want[i]);
    den += double(want[i]) * want[i];
  }
  return std::sqrt(num / den);
}

inline int32_t argmax(const float* x, int n) {
  return int32_t(std::max_element(x, x + n) - x);
}

}  // namespace sluice::test
