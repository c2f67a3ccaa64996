// Collectives (executor/collective.h) among N threads of one process: tensor-parallel shards
// tested without MPI (and under the sanitizers). Rank r's object is ThreadGroup::rank(r); each
// rank runs on its own thread and calls the same operations in the same order.
#pragma once

#include <barrier>
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <vector>

#include "executor/collective.h"

namespace sluice::test {

class ThreadGroup {
 public:
  explicit ThreadGroup(int n) : n_(n), barrier_(n), ptrs_(size_t(n)) {
    for (int r = 0; r < n; ++r) ranks_.push_back(std::make_unique<Rank>(*this, r));
  }
  Collective& rank(int r) { return *ranks_[size_t(r)]; }
  int size() const { return n_; }

 private:
  class Rank final : public Collective {
   public:
    Rank(ThreadGroup& g, int r) : g_(g), r_(r) {}
    int rank() const override { return r_; }
    int size() const override { return g_.n_; }
    void all_reduce_sum(float* x, int64_t n) override {
      g_.ptrs_[size_t(r_)] = x;
      g_.barrier_.arrive_and_wait();
      tmp_.assign(g_.ptrs_[0], g_.ptrs_[0] + n);
      for (int r = 1; r < g_.n_; ++r) {
        for (int64_t i = 0; i < n; ++i) tmp_[size_t(i)] += g_.ptrs_[size_t(r)][i];
      }
      g_.barrier_.arrive_and_wait();  // every rank has read every x
      std::copy(tmp_.begin(), tmp_.end(), x);
    }
    void gather(const float* send, int64_t, std::span<const int64_t> counts, float* recv) override {
      g_.ptrs_[size_t(r_)] = const_cast<float*>(send);
      g_.barrier_.arrive_and_wait();
      if (r_ == 0) {
        for (int r = 0; r < g_.n_; ++r) {
          recv = std::copy(g_.ptrs_[size_t(r)], g_.ptrs_[size_t(r)] + counts[size_t(r)], recv);
        }
      }
      g_.barrier_.arrive_and_wait();
    }

   private:
    ThreadGroup& g_;
    int r_;
    std::vector<float> tmp_;
  };

  int n_;
  std::barrier<> barrier_;
  std::vector<float*> ptrs_;
  std::vector<std::unique_ptr<Rank>> ranks_;
};

// Pipeline stages in threads of one process: stage s's link is ThreadPipe::stage(s); a send
// queues a copy for the next stage, a receive waits for the previous stage's next message.
class ThreadPipe {
 public:
  explicit ThreadPipe(int n_stages) : queues_(size_t(n_stages)) {
    for (int s = 0; s < n_stages; ++s) links_.push_back(std::make_unique<Link>(*this, s));
  }
  StageLink& stage(int s) { return *links_[size_t(s)]; }

 private:
  struct Queue {  // messages into a stage
    std::mutex mu;
    std::condition_variable cv;
    std::deque<std::vector<float>> msgs;
  };
  class Link final : public StageLink {
   public:
    Link(ThreadPipe& p, int s) : p_(p), s_(s) {}
    void recv_from_prev(float* x, int64_t n) override {
      Queue& q = p_.queues_[size_t(s_)];
      std::unique_lock<std::mutex> lock(q.mu);
      q.cv.wait(lock, [&] { return !q.msgs.empty(); });
      std::copy(q.msgs.front().begin(), q.msgs.front().begin() + n, x);
      q.msgs.pop_front();
    }
    void send_to_next(const float* x, int64_t n) override {
      Queue& q = p_.queues_[size_t(s_) + 1];
      std::lock_guard<std::mutex> lock(q.mu);
      q.msgs.emplace_back(x, x + n);
      q.cv.notify_one();
    }

   private:
    ThreadPipe& p_;
    int s_;
  };
  std::vector<Queue> queues_;
  std::vector<std::unique_ptr<Link>> links_;
};

}  // namespace sluice::test
