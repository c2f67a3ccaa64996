// Copy-on-write of a shared KV block, the one type every layer uses for it: block `dst`
// receives block `src`'s K/V (every layer) before the step that writes `dst`. kv/ queues them
// (KvCacheManager::take_copies), the scheduler hands them over, a Batch carries them and
// every executor applies them in order.
#pragma once

#include <cstdint>

namespace sluice {

struct BlockCopy {
  int32_t src = -1;
  int32_t dst = -1;
  bool operator==(const BlockCopy&) const = default;
};

}  // namespace sluice
