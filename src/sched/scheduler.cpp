#include "sched/scheduler.h"

#include <algorithm>
#include <cassert>

namespace sluice {

Scheduler::Scheduler(const SchedulerConfig& config, KvCacheManager& kv) : config_(config), kv_(kv) {}

void Scheduler::add_request(RequestId id, std::vector<int32_t> prompt, int32_t priority) {
  assert(!prompt.empty() && !requests_.count(id));
  SchedRequest r;
  r.id = id;
  r.n_prompt = int32_t(prompt.size());
  r.tokens = std::move(prompt);
  r.priority = priority;
  r.arrival = next_arrival_++;
  requests_.emplace(id, std::move(r));
  insert_waiting(id, /*front=*/false);
}

void Scheduler::insert_waiting(RequestId id, bool front) {
  if (!config_.use_priority) {
    if (front) {
      waiting_.push_front(id);
    } else {
      waiting_.push_back(id);
    }
    return;
  }
  // Keep waiting_ sorted by (priority, arrival): a preempted request returns to its place.
  const SchedRequest& r = requests_.at(id);
  auto pos = std::find_if(waiting_.begin(), waiting_.end(), [&](RequestId o) {
    const SchedRequest& x = requests_.at(o);
    return std::tie(r.priority, r.arrival) < std::tie(x.priority, x.arrival);
  });
  waiting_.insert(pos, id);
}

void Scheduler::abort(RequestId id) {
  auto it = requests_.find(id);
  if (it == requests_.end()) return;
  kv_.free(id);
  std::erase(running_, id);
  std::erase(waiting_, id);
  requests_.erase(it);
}

const SchedRequest* Scheduler::find(RequestId id) const {
  auto it = requests_.find(id);
  return it == requests_.end() ? nullptr : &it->second;
}

int32_t Scheduler::cap_new_tokens(const SchedRequest& r, int32_t budget) const {
  int32_t n = std::min(r.num_tokens() - r.num_computed, budget);
  if (config_.prefill_chunk > 0) n = std::min(n, config_.prefill_chunk);
  return n;
}

size_t Scheduler::pick_victim() const {
  size_t victim = running_.size() - 1;  // most recently admitted
  if (config_.use_priority) {
    for (size_t i = 0; i < running_.size(); ++i) {
      const SchedRequest& a = requests_.at(running_[i]);
      const SchedRequest& v = requests_.at(running_[victim]);
      if (std::tie(a.priority, a.arrival) > std::tie(v.priority, v.arrival)) victim = i;
    }
  }
  return victim;
}

void Scheduler::preempt(RequestId id) {
  SchedRequest& r = requests_.at(id);
  kv_.free(id);
  r.num_computed = 0;  // recompute later (the prefix cache may still hold its blocks)
  r.state = RequestState::kWaiting;
  ++r.n_preemptions;
  ++n_preemptions_;
  std::erase(running_, id);
  insert_waiting(id, /*front=*/true);
}

SchedulerOutput Scheduler::schedule() {
  SchedulerOutput out;
  int32_t budget = config_.max_batch_tokens;

  // 1. Running requests, in admission order.
  for (size_t i = 0; i < running_.size() && budget > 0;) {
    const RequestId id = running_[i];
    SchedRequest& r = requests_.at(id);
    const int32_t n_new = cap_new_tokens(r, budget);
    if (n_new <= 0) {
      ++i;
      continue;
    }
    bool scheduled = true;
    while (!kv_.allocate_slots(id, r.num_computed + n_new)) {
      const size_t v = pick_victim();
      const RequestId victim = running_[v];
      // A victim already scheduled this step gives its tokens back.
      for (auto it = out.seqs.begin(); it != out.seqs.end(); ++it) {
        if (it->id == victim) {
          budget += it->n_new;
          out.n_tokens -= it->n_new;
          out.seqs.erase(it);
          break;
        }
      }
      preempt(victim);
      out.preempted.push_back(victim);
      if (victim == id) {
        scheduled = false;
        break;
      }
      if (v < i) --i;  // an earlier entry left running_
    }
    if (!scheduled) continue;  // running_[i] is now the next request
    out.seqs.push_back({id, r.num_computed, n_new, r.num_computed + n_new == r.num_tokens()});
    out.n_tokens += n_new;
    budget -= n_new;
    ++i;
  }

  // 2. Admit waiting requests unless this step had to preempt (memory is tight).
  while (out.preempted.empty() && !waiting_.empty() && budget > 0 &&
         int32_t(running_.size()) < config_.max_seqs) {
    const RequestId id = waiting_.front();
    SchedRequest& r = requests_.at(id);
    PrefixHit hit = kv_.find_prefix(r.tokens);
    r.num_computed = hit.n_tokens;
    const int32_t n_new = cap_new_tokens(r, budget);
    if (!kv_.allocate_slots(id, r.num_computed + n_new, &hit)) {
      r.num_computed = 0;
      break;  // head-of-line: later requests wait too (FCFS fairness)
    }
    waiting_.pop_front();
    r.state = RequestState::kRunning;
    running_.push_back(id);
    out.seqs.push_back({id, r.num_computed, n_new, r.num_computed + n_new == r.num_tokens()});
    out.n_tokens += n_new;
    budget -= n_new;
  }
  return out;
}

void Scheduler::on_step_done(const SchedulerOutput& out) {
  for (const ScheduledSeq& s : out.seqs) {
    auto it = requests_.find(s.id);
    if (it == requests_.end()) continue;  // aborted meanwhile
    SchedRequest& r = it->second;
    r.num_computed = s.num_computed + s.n_new;
    kv_.commit_computed(s.id, r.tokens, r.num_computed);
  }
}

void Scheduler::append_token(RequestId id, int32_t token) {
  auto it = requests_.find(id);
  if (it != requests_.end()) it->second.tokens.push_back(token);
}

}  // namespace sluice
