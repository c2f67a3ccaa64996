// The collective operations a tensor-parallel executor needs among its ranks (model/shard.h):
// parallel/ implements them over MPI, tests over threads in one process. Every rank calls the same
// operations in the same order with the same sizes (the ranks run the same Batch).
#pragma once

#include <cstdint>
#include <span>

namespace sluice {

class Collective {
 public:
  virtual ~Collective() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // x[0, n) becomes the sum of every rank's x, added in rank order ((x0 + x1) + x2 ...): the
  // same bits on every rank and in every run.
  virtual void all_reduce_sum(float* x, int64_t n) = 0;
  // Rank 0's `recv` receives every rank's `send` back to back (counts[r] floats from rank r;
  // `n` == counts[rank()]); other ranks' recv is not written.
  virtual void gather(const float* send, int64_t n, std::span<const int64_t> counts,
                      float* recv) = 0;
};

// Pipeline parallel (model/shard.h): the residual stream between consecutive stages. Each
// rank of a stage talks to the rank of the same tensor-parallel index in the stage before and
// after; messages between two ranks arrive in the order they were sent.
class StageLink {
 public:
  virtual ~StageLink() = default;
  // x[0, n) from the previous stage (blocks until it arrives, or the link fails: then x is
  // left as it is and the step's error is reported by the link's owner).
  virtual void recv_from_prev(float* x, int64_t n) = 0;
  // x[0, n) to the next stage; returns once x may be reused (the data is copied).
  virtual void send_to_next(const float* x, int64_t n) = 0;
};

}  // namespace sluice
