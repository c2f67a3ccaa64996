// A small persistent worker pool for data-parallel kernels. Workers are created once and park
// between jobs (a short spin, then a futex wait), so handing out a job costs no thread creation
// and no allocation: the hot path of a decode step calls `parallel_for` a few hundred times.
//
// One job at a time: `run` / `parallel_for` must not be called concurrently or from inside a
// job (the executor that owns the pool is single-threaded by design).
#pragma once

#include <atomic>
#include <cstdint>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

namespace sluice {

// A non-owning reference to a callable: a pointer and a trampoline (never allocates, unlike
// std::function with a large capture). The callable must outlive the call it is passed to.
template <class Sig>
class FunctionRef;

template <class R, class... Args>
class FunctionRef<R(Args...)> {
 public:
  template <class F>
  requires(!std::is_same_v<std::remove_cvref_t<F>, FunctionRef>)
      FunctionRef(F&& f)  // NOLINT: implicit by design
      : obj_(const_cast<void*>(static_cast<const void*>(&f))), call_([](void* o, Args... a) -> R {
          return (*static_cast<std::remove_reference_t<F>*>(o))(std::forward<Args>(a)...);
        }) {}
  R operator()(Args... a) const { return call_(obj_, std::forward<Args>(a)...); }

 private:
  void* obj_;
  R (*call_)(void*, Args...);
};

class ThreadPool {
 public:
  // `n_threads` counts the calling thread (so n_threads - 1 workers are started); 0 means
  // std::thread::hardware_concurrency().
  explicit ThreadPool(int n_threads = 0);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int n_threads() const { return n_threads_; }

  // Calls fn(thread_index) once on every thread of the pool, the caller being index 0, and
  // returns when all calls have returned.
  void run(FunctionRef<void(int)> fn);

  // Calls fn(begin, end) over disjoint chunks covering [0, n), each at least `grain` long
  // (except the last), handed out dynamically so a slow (shared) core does not stall the
  // others. Runs inline on the caller when there is only one chunk.
  template <class F>
  void parallel_for(int64_t n, int64_t grain, F&& fn) {
    parallel_for_indexed(n, grain, [&](int, int64_t b, int64_t e) { fn(b, e); });
  }

  // As parallel_for, with the index of the thread running each chunk (the caller is 0, every
  // index < n_threads()): fn(thread, begin, end), for per-thread workspaces.
  template <class F>
  void parallel_for_indexed(int64_t n, int64_t grain, F&& fn) {
    if (n <= 0) return;
    if (grain < 1) grain = 1;
    if (n_threads_ == 1 || n <= grain) {
      fn(0, int64_t(0), n);
      return;
    }
    // About 4 chunks per thread: balance without much counter traffic.
    int64_t chunk = (n + 4 * n_threads_ - 1) / (4 * n_threads_);
    if (chunk < grain) chunk = grain;
    std::atomic<int64_t> next{0};
    run([&](int thread) {
      for (;;) {
        const int64_t b = next.fetch_add(chunk, std::memory_order_relaxed);
        if (b >= n) break;
        fn(thread, b, b + chunk < n ? b + chunk : n);
      }
    });
  }

 private:
  void worker_loop(int index);

  int n_threads_ = 1;
  std::vector<std::thread> workers_;
  // The current job; written by the caller before `generation_` is bumped.
  const FunctionRef<void(int)>* job_ = nullptr;
  std::atomic<uint32_t> generation_{0};  // bumped once per job; workers wait on it
  std::atomic<uint32_t> pending_{0};     // workers still running the current job
  std::atomic<bool> stop_{false};
};

}  // namespace sluice
