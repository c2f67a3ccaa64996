// The roofline's view of a GGUF file (`sluice plan`, `sluice sim`, `sluice info`): hyperparameters
// as the model loader reads them (read_model_config; the cost from them: executor/
// step_roofline.h model_cost), parameters and stored bytes counted from the tensor directory
// (norms and biases included, as loaded). Reads the header only; architectures sluice cannot
// load are refused with the loader's error.
#pragma once

#include "base/status.h"
#include "gguf/gguf.h"
#include "perf/roofline.h"

namespace sluice::cli {

Result<ModelCost> model_cost_from_gguf(const GgufFile& f);

}  // namespace sluice::cli
