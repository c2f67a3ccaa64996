#include "sched/scheduler.h"

#include <algorithm>
#include <cassert>

namespace sluice {

Scheduler::Scheduler(const SchedulerConfig& config, KvCacheManager& kv)
    : config_(config), kv_(kv) {}

void Scheduler::add_request(RequestId id, std::vector<int32_t> prompt, int32_t priority) {
  add_group(std::span<const RequestId>(&id, 1), std::move(prompt), priority);
}

void Scheduler::add_group(std::span<const RequestId> ids, std::vector<int32_t> prompt,
                          int32_t priority) {
  assert(!ids.empty() && !prompt.empty());
  for (size_t i = 0; i < ids.size(); ++i) {
    assert(!requests_.count(ids[i]));
    SchedRequest r;
    r.id = ids[i];
    r.n_prompt = int32_t(prompt.size());
    r.tokens = i + 1 < ids.size() ? prompt : std::move(prompt);
    r.priority = priority;
    r.arrival = next_arrival_++;  // the group's samples sort right after their leader
    if (i == 0) {
      r.awaiting_fork.assign(ids.begin() + 1, ids.end());
    } else {
      r.state = RequestState::kAwaitingFork;
      r.leader = ids[0];
      ++n_awaiting_fork_;
    }
    requests_.emplace(ids[i], std::move(r));
  }
  insert_waiting(ids[0], /*front=*/false);
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
  SchedRequest& r = it->second;
  if (r.state == RequestState::kAwaitingFork) {
    std::erase(requests_.at(r.leader).awaiting_fork, id);
    --n_awaiting_fork_;
    requests_.erase(it);
    return;
  }
  if (!r.awaiting_fork.empty()) {
    promote_heir(r);
    requests_.erase(id);
    return;
  }
  kv_.free(id);
  std::erase(running_, id);
  std::erase(waiting_, id);
  requests_.erase(it);
}

void Scheduler::promote_heir(SchedRequest& r) {
  const RequestId heir_id = r.awaiting_fork.front();
  SchedRequest& heir = requests_.at(heir_id);
  // Same prompt, no generated tokens on either side: the heir simply continues r's work.
  heir.state = r.state;
  heir.n_computed = r.n_computed;
  heir.arrival = r.arrival;
  heir.n_preemptions = r.n_preemptions;
  heir.leader = 0;
  heir.awaiting_fork.assign(r.awaiting_fork.begin() + 1, r.awaiting_fork.end());
  for (RequestId c : heir.awaiting_fork) requests_.at(c).leader = heir_id;
  --n_awaiting_fork_;
  kv_.move_table(r.id, heir_id);
  std::replace(running_.begin(), running_.end(), r.id, heir_id);
  std::replace(waiting_.begin(), waiting_.end(), r.id, heir_id);
}

const SchedRequest* Scheduler::find(RequestId id) const {
  auto it = requests_.find(id);
  return it == requests_.end() ? nullptr : &it->second;
}

int32_t Scheduler::cap_new_tokens(const SchedRequest& r, int32_t budget) const {
  int32_t n = std::min(r.n_tokens() - r.n_computed, budget);
  if (config_.prefill_chunk > 0) n = std::min(n, config_.prefill_chunk);
  // Recurrent state checkpoints are taken between steps at block boundaries: a chunk ends at
  // its last boundary, and the last one stops first at the last boundary before the prompt's
  // last token (one more step for the tokens after it): the deepest a hit on the same prompt
  // can resume from (a hit leaves a token to compute), e.g. a decode worker's after a transfer.
  if (kv_.checkpointing() && n > 1) {
    const int32_t bs = kv_.block_size(), c = r.n_computed, end = c + n;
    const int32_t cut = end < r.n_tokens() ? end / bs * bs : (r.n_tokens() - 1) / bs * bs;
    if (cut > c && cut < end) n = cut - c;
  }
  return n;
}

int32_t Scheduler::seats(const SchedRequest& r) const {
  return std::min(1 + int32_t(r.awaiting_fork.size()), std::max(config_.max_seqs, 1));
}

ScheduledSeq Scheduler::make_seq(const SchedRequest& r, int32_t n_new_tokens,
                                 int32_t n_draft) const {
  ScheduledSeq q{r.id,
                 r.n_computed,
                 n_new_tokens,
                 n_draft,
                 r.n_computed + n_new_tokens - n_draft == r.n_tokens(),
                 {}};
  if (q.samples) q.forks = r.awaiting_fork;  // a leader samples first at its prompt's end
  return q;
}

size_t Scheduler::pick_victim() const {
  // The most recently admitted (or, with priorities, the least important) not in flight; the
  // request asking for room is never in flight, so there is one.
  size_t victim = running_.size();
  for (size_t i = running_.size(); i-- > 0;) {
    const SchedRequest& a = requests_.at(running_[i]);
    if (a.in_flight) continue;
    if (victim == running_.size()) {
      victim = i;
      if (!config_.use_priority) break;
      continue;
    }
    const SchedRequest& v = requests_.at(running_[victim]);
    if (std::tie(a.priority, a.arrival) > std::tie(v.priority, v.arrival)) victim = i;
  }
  assert(victim < running_.size());
  return victim;
}

void Scheduler::preempt(RequestId id) {
  SchedRequest& r = requests_.at(id);
  kv_.free(id);
  r.n_computed = 0;  // recompute later (the prefix cache may still hold its blocks)
  r.state = RequestState::kWaiting;
  r.draft.clear();
  ++r.n_preemptions;
  ++n_preemptions_;
  std::erase(running_, id);
  insert_waiting(id, /*front=*/true);
}

SchedulerOutput Scheduler::schedule(int32_t max_step_seqs) {
  SchedulerOutput out;
  int32_t budget = config_.max_batch_tokens;
  const size_t max_seqs = size_t(std::max(max_step_seqs, 1));

  // 1. Running requests, in admission order.
  for (size_t i = 0; i < running_.size() && budget > 0 && out.seqs.size() < max_seqs;) {
    const RequestId id = running_[i];
    SchedRequest& r = requests_.at(id);
    const int32_t n_new_tokens = cap_new_tokens(r, budget);
    if (n_new_tokens <= 0 || r.in_flight) {
      ++i;
      continue;
    }
    // A decoding request with a draft verifies it if the budget and free blocks allow.
    // (Not a leader whose samples fork it at this step: they share its logits row.)
    if (!r.draft.empty() && r.n_computed + 1 == r.n_tokens() && r.awaiting_fork.empty() &&
        budget > 1) {
      const int32_t n_draft = std::min(int32_t(r.draft.size()), budget - 1);
      if (kv_.allocate_slots(id, r.n_computed, 1 + n_draft)) {
        out.seqs.push_back(make_seq(r, 1 + n_draft, n_draft));
        out.n_tokens += 1 + n_draft;
        budget -= 1 + n_draft;
        ++i;
        continue;
      }
    }
    bool scheduled = true;
    while (!kv_.allocate_slots(id, r.n_computed, n_new_tokens)) {
      const size_t v = pick_victim();
      const RequestId victim = running_[v];
      // A victim already scheduled this step gives its tokens back.
      for (auto it = out.seqs.begin(); it != out.seqs.end(); ++it) {
        if (it->id == victim) {
          budget += it->n_new_tokens;
          out.n_tokens -= it->n_new_tokens;
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
    out.seqs.push_back(make_seq(r, n_new_tokens));
    out.n_tokens += n_new_tokens;
    budget -= n_new_tokens;
    ++i;
  }

  // 2. Admit waiting requests unless this step had to preempt (memory is tight). A group's
  // leader takes seats for every sample of the group, so that they can all fork it.
  int32_t seats_taken = 0;
  for (RequestId id : running_) seats_taken += seats(requests_.at(id));
  while (out.preempted.empty() && !waiting_.empty() && budget > 0 && out.seqs.size() < max_seqs) {
    const RequestId id = waiting_.front();
    SchedRequest& r = requests_.at(id);
    if (seats_taken + seats(r) > config_.max_seqs) break;
    PrefixHit hit = kv_.find_prefix(r.tokens);
    r.n_computed = hit.n_tokens;
    const int32_t n_new_tokens = cap_new_tokens(r, budget);
    if (!kv_.allocate_slots(id, r.n_computed, n_new_tokens, &hit)) {
      r.n_computed = 0;
      break;  // head-of-line: later requests wait too (FCFS fairness)
    }
    waiting_.pop_front();
    r.state = RequestState::kRunning;
    running_.push_back(id);
    seats_taken += seats(r);
    out.seqs.push_back(make_seq(r, n_new_tokens));
    out.n_tokens += n_new_tokens;
    budget -= n_new_tokens;
  }
  out.copies = kv_.take_copies();
  out.state_copies = kv_.take_state_copies();
  for (const ScheduledSeq& q : out.seqs) requests_.at(q.id).in_flight = true;
  return out;
}

void Scheduler::on_step_failed(const SchedulerOutput& out) {
  for (const ScheduledSeq& s : out.seqs) {
    if (auto it = requests_.find(s.id); it != requests_.end()) it->second.in_flight = false;
  }
}

void Scheduler::set_draft(RequestId id, std::span<const int32_t> draft) {
  auto it = requests_.find(id);
  if (it == requests_.end()) return;
  it->second.draft.assign(draft.begin(), draft.end());
}

void Scheduler::on_step_done(const SchedulerOutput& out, std::span<const int32_t> n_accepted) {
  for (size_t i = 0; i < out.seqs.size(); ++i) {
    const ScheduledSeq& s = out.seqs[i];
    auto it = requests_.find(s.id);
    if (it == requests_.end()) continue;  // aborted meanwhile
    SchedRequest& r = it->second;
    r.in_flight = false;
    const int32_t a = i < n_accepted.size() ? std::clamp(n_accepted[i], 0, s.n_draft) : 0;
    assert(a <= int32_t(r.draft.size()));
    r.tokens.insert(r.tokens.end(), r.draft.begin(), r.draft.begin() + a);
    r.draft.clear();
    r.n_computed = s.n_computed + s.n_new_tokens - s.n_draft + a;
    kv_.commit_computed(s.id, r.tokens, r.n_computed);
    // Blocks that only rejected draft tokens wrote (a no-op without a draft).
    kv_.truncate(s.id, r.n_computed);
    // Recurrent models: the state at a block boundary becomes a checkpoint (the prompt's last
    // boundaries are kept: the last one, and the one before its last token; the others roll).
    kv_.save_state(s.id, r.n_computed,
                   r.n_computed <= r.n_prompt && r.n_computed + kv_.block_size() >= r.n_prompt);
    if (!s.forks.empty()) fork_group(r, s.forks);
  }
}

void Scheduler::fork_group(SchedRequest& leader, const std::vector<RequestId>& forks) {
  assert(leader.n_computed == leader.n_prompt && leader.awaiting_fork == forks);
  // Forked samples run right after their leader (the group was admitted together).
  size_t pos = size_t(std::find(running_.begin(), running_.end(), leader.id) - running_.begin());
  assert(pos < running_.size());
  std::vector<RequestId> overflow;
  for (RequestId cid : forks) {
    SchedRequest& c = requests_.at(cid);
    --n_awaiting_fork_;
    c.leader = 0;
    // Without a free recurrent state slot the sample waits too.
    if (int32_t(running_.size()) < config_.max_seqs && kv_.fork(leader.id, cid)) {
      c.n_computed = leader.n_computed;
      c.state = RequestState::kRunning;
      running_.insert(running_.begin() + std::ptrdiff_t(++pos), cid);
    } else {
      // Only a group larger than max_seqs (or than the state slots) gets here: the rest wait
      // and recompute the prompt (the prefix cache holds its full blocks).
      c.n_computed = 0;
      c.state = RequestState::kWaiting;
      overflow.push_back(cid);
    }
  }
  for (auto it = overflow.rbegin(); it != overflow.rend(); ++it) {
    insert_waiting(*it, /*front=*/true);
  }
  leader.awaiting_fork.clear();
}

void Scheduler::append_token(RequestId id, int32_t token) {
  auto it = requests_.find(id);
  if (it != requests_.end()) it->second.tokens.push_back(token);
}

}  // namespace sluice
