#include "parallel/mpi_comm.h"

#include <mpi.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>

namespace sluice::parallel {
namespace {

MpiComm* g_comm = nullptr;

// The stage's tensor-parallel communicator (MpiComm::tp_comm_), or the world.
MPI_Comm tp_comm(void* p) {
  return p ? *static_cast<MPI_Comm*>(p) : MPI_COMM_WORLD;
}

// Point-to-point tags: the residual stream between stages, the logits to rank 0.
constexpr int kHiddenTag = 11;
constexpr int kLogitsTag = 12;
constexpr int kLinkProbeTag = 13;   // measure_link's ping-pong
constexpr int kPostLengthTag = 14;  // post(): the message's length, then its bytes
constexpr int kPostTag = 15;

bool env_set(const char* name) {
  const char* v = std::getenv(name);
  return v && *v;
}

}  // namespace

bool launched_by_mpi() {
  return env_set("OMPI_COMM_WORLD_SIZE") || env_set("PMIX_RANK") || env_set("PMI_SIZE");
}

Result<MpiComm*> MpiComm::init() {
  if (g_comm) return g_comm;
  int provided = 0;
  // Open MPI starts threads of its own here. They must not take SIGINT/SIGTERM: a process-wide
  // signal goes to any thread that does not block it, and in one of theirs its default action
  // would end the process before `sluice serve` (which takes them with sigwait) could fail its
  // requests. They inherit the mask in force while they start; the caller's is restored.
  sigset_t stop, old;
  sigemptyset(&stop);
  sigaddset(&stop, SIGINT);
  sigaddset(&stop, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop, &old);
  const int init = MPI_Init_thread(nullptr, nullptr, MPI_THREAD_SERIALIZED, &provided);
  pthread_sigmask(SIG_SETMASK, &old, nullptr);
  if (init != MPI_SUCCESS) return make_error("MPI_Init_thread failed");
  if (provided < MPI_THREAD_SERIALIZED) {
    return make_error("this MPI cannot be called from a thread other than main's (thread level ",
                      provided, ")");
  }
  // Errors come back as codes (a dead peer is an error to report, not a crash).
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  static MpiComm comm;
  MPI_Comm_rank(MPI_COMM_WORLD, &comm.rank_);
  MPI_Comm_size(MPI_COMM_WORLD, &comm.size_);
  comm.tp_rank_ = comm.rank_;
  comm.tp_size_ = comm.size_;
  if (const char* t = std::getenv("SLUICE_DIST_TIMEOUT_S"); t && std::atof(t) > 0) {
    comm.timeout_s_ = std::atof(t);
  }
  // Every rank's host and pid: the peers on this host are watched by pid (dead_local_peer).
  struct Who {
    char host[64];
    long pid;
  };
  Who me{};
  ::gethostname(me.host, sizeof me.host - 1);
  me.pid = long(::getpid());
  std::vector<Who> all(size_t(comm.size_));
  if (MPI_Allgather(&me, int(sizeof me), MPI_BYTE, all.data(), int(sizeof me), MPI_BYTE,
                    MPI_COMM_WORLD) != MPI_SUCCESS) {
    return make_error("MPI: the ranks could not exchange their hosts");
  }
  comm.local_pids_.assign(all.size(), 0);
  for (size_t r = 0; r < all.size(); ++r) {
    if (std::strncmp(all[r].host, me.host, sizeof me.host) == 0) comm.local_pids_[r] = all[r].pid;
  }
  g_comm = &comm;
  return g_comm;
}

MpiComm* MpiComm::current() {
  return g_comm;
}

void MpiComm::finalize() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  // After a failure the other ranks may be gone: MPI_Finalize (and Open MPI's own teardown at
  // exit) would wait for them, until mpirun kills this rank. Leave at once instead.
  if (g_comm && g_comm->failed()) {
    std::fflush(nullptr);
    std::_Exit(1);
  }
  if (g_comm && !finalized) MPI_Finalize();
}

int MpiComm::dead_local_peer() const {
  for (size_t r = 0; r < local_pids_.size(); ++r) {
    if (int(r) == rank_ || local_pids_[r] == 0) continue;
    if (::kill(pid_t(local_pids_[r]), 0) != 0 && errno == ESRCH) return int(r);
  }
  return -1;
}

bool MpiComm::wait(void* req_ptr, const char* what, bool idle) {
  auto* req = static_cast<MPI_Request*>(req_ptr);
  using clock = std::chrono::steady_clock;
  const auto t0 = clock::now();
  double next_check = 0.1;
  for (int64_t i = 0;; ++i) {
    int done = 0;
    if (MPI_Test(req, &done, MPI_STATUS_IGNORE) != MPI_SUCCESS) {
      error_ = std::string("MPI error during ") + what + " (a rank exited?)";
      return false;
    }
    if (done) return true;
    if (interrupted_.load(std::memory_order_relaxed)) {
      error_ = std::string("interrupted during ") + what +
               ": the MPI job is being stopped (a rank exited or was killed)";
      return false;
    }
    if (i < 2000) continue;  // a short spin: steps' collectives answer in microseconds
    const double waited = std::chrono::duration<double>(clock::now() - t0).count();
    // Every ~0.1 s of waiting: is a peer on this host gone?
    if (waited > next_check) {
      next_check = waited + 0.1;
      if (const int dead = dead_local_peer(); dead >= 0) {
        error_ = "rank " + std::to_string(dead) + " (pid " +
                 std::to_string(local_pids_[size_t(dead)]) + ") exited during " + what;
        return false;
      }
    }
    if (idle) {
      std::this_thread::sleep_for(std::chrono::microseconds(waited < 0.01 ? 20 : 500));
      continue;
    }
    if (waited > timeout_s_) {
      error_ = std::string("no answer from the other ranks for ") +
               std::to_string(int(timeout_s_)) + " s during " + what + " (a rank died or hangs)";
      return false;
    }
    sched_yield();  // more ranks than cores: let the one computing run
  }
}

Status MpiComm::set_layout(int tp, int n_stages) {
  if (tp < 1 || n_stages < 1 || tp * n_stages != size_) {
    return make_error("--tp ", tp, " x --pp ", n_stages, " ranks under mpirun with ", size_,
                      " ranks (use -np ", tp * n_stages, ")");
  }
  if (tp_comm_) {  // a new layout (tests try several)
    MPI_Comm_free(static_cast<MPI_Comm*>(tp_comm_));
    delete static_cast<MPI_Comm*>(tp_comm_);
    tp_comm_ = nullptr;
  }
  stage_ = rank_ / tp;
  n_stages_ = n_stages;
  tp_rank_ = rank_ % tp;
  tp_size_ = tp;
  if (size_ > 1 && link_bytes_per_s_ == 0) measure_link();
  if (n_stages == 1) return {};
  auto* c = new MPI_Comm;
  if (MPI_Comm_split(MPI_COMM_WORLD, stage_, rank_, c) != MPI_SUCCESS) {
    delete c;
    return make_error("MPI: cannot split the ranks into ", n_stages, " stages");
  }
  MPI_Comm_set_errhandler(*c, MPI_ERRORS_RETURN);
  tp_comm_ = c;
  return {};
}

void MpiComm::measure_link() {
  if (rank_ > 1) return;
  const int peer = 1 - rank_;
  using clock = std::chrono::steady_clock;
  // Seconds of one round trip of `bytes` (the best of `reps`, after one warm-up).
  const auto round_trip = [&](size_t bytes, int reps) {
    std::vector<uint8_t> buf(bytes);
    double best = 1e9;
    for (int i = 0; i <= reps; ++i) {
      const auto t0 = clock::now();
      if (rank_ == 0) {
        MPI_Send(buf.data(), int(bytes), MPI_BYTE, peer, kLinkProbeTag, MPI_COMM_WORLD);
        MPI_Recv(buf.data(), int(bytes), MPI_BYTE, peer, kLinkProbeTag, MPI_COMM_WORLD,
                 MPI_STATUS_IGNORE);
      } else {
        MPI_Recv(buf.data(), int(bytes), MPI_BYTE, peer, kLinkProbeTag, MPI_COMM_WORLD,
                 MPI_STATUS_IGNORE);
        MPI_Send(buf.data(), int(bytes), MPI_BYTE, peer, kLinkProbeTag, MPI_COMM_WORLD);
      }
      if (i > 0) best = std::min(best, std::chrono::duration<double>(clock::now() - t0).count());
    }
    return best;
  };
  const double small = round_trip(8, 50);
  const size_t big_bytes = size_t(4) << 20;
  const double big = round_trip(big_bytes, 5);
  link_latency_s_ = small / 2;
  link_bytes_per_s_ = double(big_bytes) / std::max(1e-9, big / 2 - link_latency_s_);
}

void MpiComm::reap_sends() {
  for (Send& s : sends_) {
    if (!s.busy) continue;
    int done = 0;
    MPI_Test(static_cast<MPI_Request*>(s.req), &done, MPI_STATUS_IGNORE);
    s.busy = !done;
  }
}

void MpiComm::send_floats(const float* x, int64_t n, int to, int tag, const char* what) {
  if (failed()) return;
  if (n > INT_MAX) {
    error_ = std::string("a send of more than 2^31 floats: ") + what;
    return;
  }
  reap_sends();
  ++stats_.n_ops;
  stats_.bytes += n * int64_t(sizeof(float));
  auto free_slot =
      std::find_if(sends_.begin(), sends_.end(), [](const Send& s) { return !s.busy; });
  if (free_slot == sends_.end()) {
    // A new slot; moving the others keeps their buffers (and requests) where they are.
    sends_.push_back({{}, new MPI_Request, false});
    free_slot = sends_.end() - 1;
  }
  Send& s = *free_slot;
  s.data.assign(x, x + n);
  if (MPI_Isend(s.data.data(), int(n), MPI_FLOAT, to, tag, MPI_COMM_WORLD,
                static_cast<MPI_Request*>(s.req)) != MPI_SUCCESS) {
    error_ = std::string("MPI send failed: ") + what;
    return;
  }
  s.busy = true;
}

void MpiComm::recv_floats(float* x, int64_t n, int from, int tag, const char* what) {
  if (failed()) return;
  const auto t0 = std::chrono::steady_clock::now();
  ++stats_.n_ops;
  MPI_Request req;
  if (n > INT_MAX ||
      MPI_Irecv(x, int(n), MPI_FLOAT, from, tag, MPI_COMM_WORLD, &req) != MPI_SUCCESS) {
    error_ = std::string("MPI receive failed: ") + what;
    return;
  }
  wait(&req, what, false);
  stats_.seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

void MpiComm::recv_from_prev(float* x, int64_t n) {
  recv_floats(x, n, rank_ - tp_size_, kHiddenTag, "the previous stage's activations");
}

void MpiComm::send_to_next(const float* x, int64_t n) {
  send_floats(x, n, rank_ + tp_size_, kHiddenTag, "activations to the next stage");
}

void MpiComm::send_logits(const float* x, int64_t n) {
  send_floats(x, n, 0, kLogitsTag, "logits to rank 0");
}

void MpiComm::recv_logits(float* x, int64_t n) {
  recv_floats(x, n, (n_stages_ - 1) * tp_size_, kLogitsTag, "the last stage's logits");
}

bool MpiComm::finish_sends() {
  const auto t0 = std::chrono::steady_clock::now();
  // After a failure the requests are left as they are (the job is ending).
  for (Send& s : sends_) {
    if (s.busy && !failed() && wait(s.req, "a send to another stage", false)) s.busy = false;
  }
  stats_.seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return !failed();
}

void MpiComm::all_reduce_sum(float* x, int64_t n) {
  if (failed() || tp_size_ == 1) return;
  const auto t0 = std::chrono::steady_clock::now();
  ++stats_.n_ops;
  stats_.bytes += n * int64_t(sizeof(float));
  gathered_.resize(size_t(n) * size_t(tp_size_));
  MPI_Request req;
  if (n > INT_MAX || MPI_Iallgather(x, int(n), MPI_FLOAT, gathered_.data(), int(n), MPI_FLOAT,
                                    tp_comm(tp_comm_), &req) != MPI_SUCCESS) {
    error_ = "MPI all-gather of partial sums failed";
    return;
  }
  if (!wait(&req, "an all-reduce", false)) return;
  // Rank order: (x0 + x1) + x2 ..., the same bits on every rank.
  std::copy(gathered_.begin(), gathered_.begin() + n, x);
  for (int r = 1; r < tp_size_; ++r) {
    const float* p = gathered_.data() + size_t(r) * size_t(n);
    for (int64_t i = 0; i < n; ++i) x[i] += p[i];
  }
  stats_.seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

void MpiComm::gather(const float* send, int64_t n, std::span<const int64_t> counts, float* recv) {
  if (failed()) return;
  const auto t0 = std::chrono::steady_clock::now();
  ++stats_.n_ops;
  stats_.bytes += n * int64_t(sizeof(float));
  counts_.resize(size_t(tp_size_));
  displs_.resize(size_t(tp_size_));
  int64_t at = 0;
  for (int r = 0; r < tp_size_; ++r) {
    if (counts[size_t(r)] > INT_MAX || at > INT_MAX) {
      error_ = "a logits gather of more than 2^31 floats";
      return;
    }
    counts_[size_t(r)] = int(counts[size_t(r)]);
    displs_[size_t(r)] = int(at);
    at += counts[size_t(r)];
  }
  MPI_Request req;
  if (MPI_Igatherv(send, int(n), MPI_FLOAT, recv, counts_.data(), displs_.data(), MPI_FLOAT, 0,
                   tp_comm(tp_comm_), &req) != MPI_SUCCESS) {
    error_ = "MPI gather of logits failed";
    return;
  }
  wait(&req, "the logits gather", false);
  stats_.seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

Status MpiComm::broadcast(std::vector<uint8_t>& bytes) {
  if (failed()) return make_error(error_);
  uint64_t n = bytes.size();
  MPI_Request req;
  if (MPI_Ibcast(&n, 1, MPI_UINT64_T, 0, MPI_COMM_WORLD, &req) != MPI_SUCCESS ||
      !wait(&req, "a broadcast", false)) {
    return make_error(failed() ? error_ : "MPI broadcast failed");
  }
  if (n > uint64_t(INT_MAX)) return make_error("a broadcast of ", n, " bytes");
  bytes.resize(size_t(n));
  if (n == 0) return {};
  if (MPI_Ibcast(bytes.data(), int(n), MPI_BYTE, 0, MPI_COMM_WORLD, &req) != MPI_SUCCESS ||
      !wait(&req, "a broadcast", false)) {
    return make_error(failed() ? error_ : "MPI broadcast failed");
  }
  return {};
}

void MpiComm::reap_posts() {
  for (Post& p : posts_) {
    for (void*& r : p.reqs) {
      if (!r) continue;
      int done = 0;
      MPI_Test(static_cast<MPI_Request*>(r), &done, MPI_STATUS_IGNORE);
      if (done) {
        delete static_cast<MPI_Request*>(r);
        r = nullptr;
      }
    }
  }
  std::erase_if(posts_, [](const Post& p) {
    return std::all_of(p.reqs.begin(), p.reqs.end(), [](void* r) { return r == nullptr; });
  });
}

Status MpiComm::post(std::span<const uint8_t> bytes) {
  if (failed()) return make_error(error_);
  if (bytes.size() > size_t(INT_MAX)) return make_error("a message of ", bytes.size(), " bytes");
  reap_posts();
  Post& p = posts_.emplace_back();
  p.n = bytes.size();
  p.bytes.assign(bytes.begin(), bytes.end());
  for (int r = 1; r < size_; ++r) {
    auto* len = new MPI_Request;
    auto* body = new MPI_Request;
    p.reqs.push_back(len);
    p.reqs.push_back(body);
    if (MPI_Isend(&p.n, 1, MPI_UINT64_T, r, kPostLengthTag, MPI_COMM_WORLD, len) != MPI_SUCCESS ||
        MPI_Isend(p.bytes.data(), int(p.n), MPI_BYTE, r, kPostTag, MPI_COMM_WORLD, body) !=
            MPI_SUCCESS) {
      error_ = "MPI send of a message to rank " + std::to_string(r) + " failed";
      return make_error(error_);
    }
  }
  return {};
}

Status MpiComm::receive_post(std::vector<uint8_t>& bytes, bool idle) {
  if (failed()) return make_error(error_);
  uint64_t n = 0;
  MPI_Request req;
  if (MPI_Irecv(&n, 1, MPI_UINT64_T, 0, kPostLengthTag, MPI_COMM_WORLD, &req) != MPI_SUCCESS ||
      !wait(&req, "a message from rank 0", idle)) {
    return make_error(failed() ? error_ : "MPI receive from rank 0 failed");
  }
  if (n > uint64_t(INT_MAX)) return make_error("a message of ", n, " bytes from rank 0");
  bytes.resize(size_t(n));
  if (MPI_Irecv(bytes.data(), int(n), MPI_BYTE, 0, kPostTag, MPI_COMM_WORLD, &req) != MPI_SUCCESS ||
      !wait(&req, "a message from rank 0", false)) {
    return make_error(failed() ? error_ : "MPI receive from rank 0 failed");
  }
  return {};
}

bool MpiComm::finish_posts() {
  for (Post& p : posts_) {
    for (void*& r : p.reqs) {
      if (!r || failed()) continue;
      if (wait(r, "a message to the other ranks", false)) {
        delete static_cast<MPI_Request*>(r);
        r = nullptr;
      }
    }
  }
  if (!failed()) posts_.clear();
  return !failed();
}

Status MpiComm::gather_bytes(const std::vector<uint8_t>& mine,
                             std::vector<std::vector<uint8_t>>& all) {
  if (failed()) return make_error(error_);
  int n = int(mine.size());
  std::vector<int> sizes(static_cast<size_t>(size_));
  MPI_Request req;
  if (MPI_Igather(&n, 1, MPI_INT, sizes.data(), 1, MPI_INT, 0, MPI_COMM_WORLD, &req) !=
          MPI_SUCCESS ||
      !wait(&req, "a gather", false)) {
    return make_error(failed() ? error_ : "MPI gather failed");
  }
  std::vector<int> displs(static_cast<size_t>(size_));
  int total = 0;
  for (int r = 0; r < size_; ++r) {
    displs[size_t(r)] = total;
    total += sizes[size_t(r)];
  }
  std::vector<uint8_t> flat(size_t(rank_ == 0 ? total : 0));
  if (MPI_Igatherv(mine.data(), n, MPI_BYTE, flat.data(), sizes.data(), displs.data(), MPI_BYTE, 0,
                   MPI_COMM_WORLD, &req) != MPI_SUCCESS ||
      !wait(&req, "a gather", false)) {
    return make_error(failed() ? error_ : "MPI gather failed");
  }
  all.clear();
  if (rank_ != 0) return {};
  for (int r = 0; r < size_; ++r) {
    all.emplace_back(flat.begin() + displs[size_t(r)],
                     flat.begin() + displs[size_t(r)] + sizes[size_t(r)]);
  }
  return {};
}

}  // namespace sluice::parallel
