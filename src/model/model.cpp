#include "model/model.h"

#include "model/arch.h"

namespace sluice {

void Model::forward(ForwardOps& ops) const {
  arch_family(config_.arch).forward(config_, weights_, ops);
}

Result<Model> Model::load(const std::string& path, const ModelOptions& options) {
  auto file = GgufFile::open(path);
  if (!file.ok()) return make_error("failed to load model: ", file.message());
  return from_file(std::move(file).value(), options);
}

Result<Model> Model::from_file(GgufFile file, const ModelOptions& options) {
  Model m;
  m.file_ = std::move(file);
  auto config = read_model_config(m.file_, options);
  if (!config.ok()) return make_error("failed to load model: ", config.message());
  m.config_ = std::move(config).value();
  auto weights = bind_weights(m.file_, m.config_);
  if (!weights.ok()) return make_error("failed to load model: ", weights.message());
  m.weights_ = std::move(weights).value();
  auto shard = shard_model({options.tp_rank, options.tp_size, options.pp_rank, options.pp_size},
                           m.config_, m.weights_, m.owned_);
  if (!shard.ok()) return make_error("failed to load model: ", shard.message());
  m.shard_ = *shard;
  return m;
}

}  // namespace sluice
