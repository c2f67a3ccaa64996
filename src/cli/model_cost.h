// The roofline's view of a GGUF file (`sluice plan`, `sluice sim`, `sluice info`): hyperparameters
// as the model loader reads them (read_model_config; the cost from them: executor/
// step_roofline.h model_cost), parameters and stored bytes counted from the tensor directory
// (norms and biases included, as loaded). Reads the header only; architectures sluice cannot
// load are refused with the loader's error.
#pragma once

#include <string>
#include <string_view>

#include "base/model_shape.h"
#include "base/status.h"
#include "gguf/gguf.h"
#include "perf/roofline.h"

namespace sluice::cli {

Result<ModelCost> model_cost_from_gguf(const GgufFile& f);

// A model shape by name (`sluice plan` and `sluice sim`): the planner's table (perf/planner.h,
// the seeds' models) first, then `sluice synth`'s presets (model/presets.h: gemma-3-4b,
// gpt-oss-20b, ... with their sliding windows). nullptr: neither has it; an error for a preset
// whose shape the cost model cannot price (gemma4: per-layer head widths, shared K/V).
Result<const ModelShape*> find_model_shape(std::string_view name);
// Both tables' names, for help and errors.
std::string model_shape_names();

}  // namespace sluice::cli
