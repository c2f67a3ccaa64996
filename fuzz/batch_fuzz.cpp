// Fuzzes the Batch wire form (executor/batch.h): deserialize_batch on arbitrary bytes never
// crashes; a form it accepts re-serializes to the same bytes, and validate_batch on it never
// crashes either.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <vector>

#include "executor/batch.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto b = sluice::deserialize_batch(std::span<const uint8_t>(data, size));
  if (!b.ok()) return 0;
  std::vector<uint8_t> again;
  sluice::serialize_batch(*b, again);
  if (again.size() != size || !std::equal(again.begin(), again.end(), data)) std::abort();
  const sluice::ExecutorCapacity cap{64, b->block_size, 1000, 4096};
  (void)sluice::validate_batch(*b, cap);
  return 0;
}
