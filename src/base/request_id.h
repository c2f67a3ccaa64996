// The id of one generation request, shared by every layer that keeps per-request state.
#pragma once

#include <cstdint>

namespace sluice {

using RequestId = int64_t;

}  // namespace sluice
