// The roofline's view of a GGUF file (`sluice plan`, `sluice sim`): hyperparameters from the
// metadata, parameters and stored bytes counted from the tensor directory (norms and biases
// included, as loaded). Reads the header only.
#pragma once

#include "base/status.h"
#include "gguf/gguf.h"
#include "perf/roofline.h"

namespace sluice::cli {

Result<ModelCost> model_cost_from_gguf(const GgufFile& f);

}  // namespace sluice::cli
