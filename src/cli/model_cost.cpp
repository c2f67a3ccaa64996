#include "cli/model_cost.h"

#include <filesystem>
#include <string>

#include "executor/step_roofline.h"
#include "model/config.h"
#include "model/presets.h"
#include "perf/planner.h"

namespace sluice::cli {

Result<ModelCost> model_cost_from_gguf(const GgufFile& f) {
  // The hyperparameters as the model loader reads them (one reader of the file's keys).
  ModelOptions mo;
  mo.allow_context_beyond_trained = true;
  Result<ModelConfig> config = read_model_config(f, mo);
  if (!config.ok()) return make_error("cannot plan '", f.path(), "': ", config.message());
  ModelCost m = model_cost(*config);
  m.name =
      f.get<std::string>("general.name").value_or(std::filesystem::path(f.path()).stem().string());
  // Parameters and bytes as stored: every tensor, norms, biases and the embedding included.
  double expert_params = 0;
  for (const GgufTensorInfo& t : f.tensors()) {
    m.n_params += double(t.n_elements());
    m.stored_weight_bytes += double(t.n_bytes);
    if (t.name.find("_exps.") != std::string::npos) expert_params += double(t.n_elements());
  }
  if (m.n_params <= 0) return make_error("'", f.path(), "' has no tensors to plan with");
  m.n_params_active = m.n_params;
  if (m.n_experts > 0 && m.n_experts_used > 0 && expert_params > 0) {
    m.n_params_per_expert = expert_params / double(m.n_experts);
    m.n_params_active = m.n_params - expert_params + m.n_params_per_expert * m.n_experts_used;
  }
  return m;
}

Result<const ModelShape*> find_model_shape(std::string_view name) {
  if (const ModelShape* s = find_planner_model(name)) return s;
  const ModelPreset* preset = find_preset(name);
  if (preset && preset->arch == "gemma4") {
    return make_error("'", name,
                      "' is a gemma4 preset, whose per-layer head widths and K/V shared across "
                      "layers a shape cannot price: write it (`sluice synth --preset ",
                      name, " -o F.gguf`) and pass the file");
  }
  return static_cast<const ModelShape*>(preset);
}

std::string model_shape_names() {
  return planner_model_names() + "; synth presets: " + preset_names();
}

}  // namespace sluice::cli
