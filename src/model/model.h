// A loaded model: the mapped GGUF file, its checked ModelConfig and its bound weights. This is
// the entry point for everything that runs a model (executors, the reference forward pass).
//
//   SLUICE_ASSIGN_OR_RETURN(Model model, Model::load("m.gguf", {.n_ctx = 4096}));
//   model.config().n_vocab ...
//
// Move-only: it owns the mapping the weights point into (moving keeps those pointers valid).
#pragma once

#include <string>
#include <vector>

#include "base/status.h"
#include "gguf/gguf.h"
#include "model/config.h"
#include "model/forward.h"
#include "model/shard.h"
#include "model/weights.h"

namespace sluice {

class Model {
 public:
  // Opens, validates metadata and binds every tensor before returning: a Model that loaded
  // can run. Errors name the file and the offending key or tensor.
  static Result<Model> load(const std::string& path, const ModelOptions& options = {});
  // Same for an already opened file (taken over).
  static Result<Model> from_file(GgufFile file, const ModelOptions& options = {});

  Model(Model&&) noexcept = default;
  Model& operator=(Model&&) noexcept = default;
  Model(const Model&) = delete;
  Model& operator=(const Model&) = delete;

  const ModelConfig& config() const { return config_; }
  const ModelWeights& weights() const { return weights_; }
  const GgufFile& file() const { return file_; }
  // Which tensor-parallel shard this is (ModelOptions::tp_rank / tp_size; config() and
  // weights() are the shard's own, model/shard.h). Not sharded: rank 0 of 1, whole vocabulary.
  const ShardInfo& shard() const { return shard_; }

  // One step of this architecture's forward pass over an executor's ops (forward.h).
  void forward(ForwardOps& ops) const;

 private:
  Model() = default;

  GgufFile file_;
  ModelConfig config_;
  ModelWeights weights_;
  ShardInfo shard_;
  std::vector<StreamedBuffer> owned_;  // a shard's column copies (weights_ points into them)
};

}  // namespace sluice
