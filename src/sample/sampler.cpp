#include "sample/sampler.h"

#include <algorithm>
#include <bit>
#include <chrono>
#include <cmath>
#include <limits>
#include <random>

#include "sample/sample_math.h"

namespace sluice {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kMaxFloat = std::numeric_limits<float>::max();

// Top-p candidate sets up to this size are sorted; larger ones go through the radix selection.
constexpr size_t kSortLimit = 1024;

// Best-first order of candidates: higher weight (or logit), then lower id.
template <class C>
bool better(const C& a, const C& b) {
  return a.w > b.w || (a.w == b.w && a.id < b.id);
}

}  // namespace

Result<Sampler> Sampler::create(const SamplingParams& params,
                                std::span<const int32_t> prompt_tokens) {
  SLUICE_RETURN_IF_ERROR(params.validate());
  uint64_t seed;
  if (params.seed) {
    seed = *params.seed;
  } else {
    std::random_device rd;
    seed = (static_cast<uint64_t>(rd()) << 32) ^ rd();
  }
  Sampler s(params, seed);
  // Only the last penalty_last_n prompt tokens can be inside the window.
  size_t first = 0;
  if (s.params_.penalty_last_n > 0 &&
      prompt_tokens.size() > static_cast<size_t>(s.params_.penalty_last_n)) {
    first = prompt_tokens.size() - static_cast<size_t>(s.params_.penalty_last_n);
  }
  for (size_t i = first; i < prompt_tokens.size(); ++i) s.push_context(prompt_tokens[i]);
  return s;
}

Sampler::Sampler(const SamplingParams& params, uint64_t seed)
    : params_(params),
      bias_(params.logit_bias.begin(), params.logit_bias.end()),
      seed_(seed),
      rng_(seed) {
  track_repetition_ = params_.repetition_penalty != 1.0f && params_.penalty_last_n != 0;
  track_generated_ = params_.presence_penalty != 0.0f || params_.frequency_penalty != 0.0f;
  if (track_repetition_ && params_.penalty_last_n > 0) {
    window_.resize(static_cast<size_t>(params_.penalty_last_n));
  }
  if (params_.grammar) grammar_ = std::make_unique<grammar::TokenMatcher>(params_.grammar);
}

void Sampler::push_context(int32_t token) {
  if (!track_repetition_ || token < 0) return;
  if (!window_.empty()) {  // sliding window; empty = whole context
    if (window_fill_ == window_.size()) {
      window_counts_.add(window_[window_head_], -1);
    } else {
      ++window_fill_;
    }
    window_[window_head_] = token;
    window_head_ = (window_head_ + 1) % window_.size();
  }
  window_counts_.add(token, 1);
}

void Sampler::accept(int32_t token) {
  if (token < 0) return;
  if (grammar_ && !grammar_violated_ && !grammar_->accept_token(token)) grammar_violated_ = true;
  ++n_generated_;
  push_context(token);
  if (track_generated_) generated_counts_.add(token, 1);
}

bool Sampler::apply_bias_and_penalties(SampleWorkspace& ws) const {
  if (bias_.empty() && !track_repetition_ && !track_generated_) return false;
  std::vector<float>& logits = ws.logits_;
  const auto n_vocab = static_cast<int32_t>(logits.size());
  for (const auto& [id, bias] : bias_) {  // ids checked against n_vocab by sample()
    logits[id] = bias <= kBanBias ? -kInf : logits[id] + bias;
  }
  if (track_repetition_) {
    const float r = params_.repetition_penalty;
    window_counts_.for_each([&](int32_t id, int32_t) {
      if (id >= n_vocab || logits[id] == -kInf) return;  // a banned token stays banned
      // Clamped so a tiny or huge penalty cannot overflow a logit to +-inf (and NaN later).
      float& l = logits[id];
      l = l > 0.0f ? std::min(l / r, kMaxFloat) : std::max(l * r, -kMaxFloat);
    });
  }
  if (track_generated_) {
    const float freq = params_.frequency_penalty;
    const float pres = params_.presence_penalty;
    generated_counts_.for_each([&](int32_t id, int32_t count) {
      if (id >= n_vocab) return;
      logits[id] -= static_cast<float>(count) * freq + pres;
    });
  }
  return true;
}

Result<SampleResult> Sampler::sample(std::span<const float> logits) {
  if (!own_ws_) own_ws_ = std::make_unique<SampleWorkspace>();
  return sample(logits, *own_ws_);
}

bool Sampler::grammar_complete() const {
  if (!grammar_) return false;
  if (grammar_->terminated()) return true;
  if (!grammar_->can_end()) return false;
  // Complete when no byte can follow: the only allowed tokens are stop tokens.
  std::vector<uint64_t> m(grammar_->compiled().vocab->n_words());
  grammar_->fill_mask(m);
  for (int32_t id : grammar_->compiled().vocab->stop_ids())
    m[size_t(id) >> 6] &= ~(uint64_t(1) << (id & 63));
  return std::all_of(m.begin(), m.end(), [](uint64_t w) { return w == 0; });
}

int32_t Sampler::grammar_allowed_prefix(std::span<const int32_t> draft) {
  if (!grammar_ || grammar_violated_) return int32_t(draft.size());
  int32_t n = 0;
  while (size_t(n) < draft.size() && grammar_->accept_token(draft[size_t(n)])) ++n;
  grammar_->rollback(size_t(n));
  return n;
}

Status Sampler::apply_grammar(SampleWorkspace& ws) {
  const auto t0 = std::chrono::steady_clock::now();
  const size_t n_vocab = ws.logits_.size();
  if (grammar_->compiled().vocab->size() != n_vocab) {
    return make_error("sample: the grammar was compiled for a vocabulary of ",
                      grammar_->compiled().vocab->size(), " tokens, the logits have ", n_vocab);
  }
  ws.mask_.resize((n_vocab + 63) / 64);
  grammar_->fill_mask(ws.mask_);
  float* l = ws.logits_.data();
  for (size_t w = 0; w < ws.mask_.size(); ++w) {
    const uint64_t bits = ws.mask_[w];
    if (bits == ~uint64_t(0)) continue;
    const size_t end = std::min(n_vocab, (w + 1) * 64);
    for (size_t i = w * 64; i < end; ++i)
      if (!((bits >> (i & 63)) & 1)) l[i] = -kInf;
  }
  ws.l_max_ = max_of(ws.logits_);
  ws.grammar_stats_.masks++;
  ws.grammar_stats_.mask_seconds +=
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (ws.l_max_ == -kInf) {
    return make_error(
        grammar_->terminated()
            ? "sample: the grammar is complete; nothing may follow"
            : "sample: the grammar allows no token here (no vocabulary entry continues "
              "the structured output)");
  }
  return {};
}

Status Sampler::prepare(std::span<const float> logits, SampleWorkspace& ws, bool masked) {
  if (logits.empty()) return make_error("sample: the logits row is empty");
  if (logits.size() > static_cast<size_t>(std::numeric_limits<int32_t>::max())) {
    return make_error("sample: a logits row of ", logits.size(), " entries exceeds int32 ids");
  }
  const auto n_vocab = static_cast<int32_t>(logits.size());
  for (const auto& [id, bias] : bias_) {
    if (id >= n_vocab) {
      return make_error("logit_bias token id ", id, " is outside the vocabulary [0, ", n_vocab,
                        ")");
    }
  }
  ws.logits_.resize(logits.size());
  if (copy_check_finite(logits, ws.logits_, &ws.l_max_)) {
    const auto it = std::find_if(logits.begin(), logits.end(), [](float x) { return !(x < kInf); });
    return make_error("sample: logits[", static_cast<size_t>(it - logits.begin()), "] is ",
                      std::isnan(*it) ? "NaN" : "+inf", " (the model produced a non-finite value)");
  }
  if (apply_bias_and_penalties(ws)) ws.l_max_ = max_of(ws.logits_);
  if (ws.l_max_ == -kInf) {
    return make_error("sample: every token is banned (all logits are -inf after logit_bias)");
  }
  if (grammar_ && masked) return apply_grammar(ws);
  return {};
}

int32_t Sampler::argmax(const SampleWorkspace& ws) {
  // The first maximum: ties go to the lowest id.
  return static_cast<int32_t>(std::find(ws.logits_.begin(), ws.logits_.end(), ws.l_max_) -
                              ws.logits_.begin());
}

int32_t Sampler::pick(SampleWorkspace& ws) {
  if (params_.is_greedy()) return argmax(ws);
  double z = 0.0;
  return weigh(ws, &z) ? draw_candidates(ws.cand_) : draw_vocab(ws, z);
}

Result<SampleResult> Sampler::sample(std::span<const float> logits, SampleWorkspace& ws) {
  SampleResult r;
  // With a grammar, first try the token drawn without the mask (llama.cpp's idea): when the
  // grammar allows it, it is what the masked distribution gives, and the mask is skipped.
  // Exact only where masking commutes with the sampler: greedy (the argmax of the allowed
  // tokens), and plain temperature sampling (drawing from p and retrying from p restricted to
  // the allowed set A gives p(a) + (1 - p(A)) p(a) / p(A) = p(a) / p(A)). With top-k/p, min-p
  // (which would truncate before the mask) or logprobs (which report the masked ones), always
  // the full mask.
  const bool truncates = (params_.top_k > 0 && size_t(params_.top_k) < logits.size()) ||
                         params_.top_p < 1.0f || params_.min_p > 0.0f;
  if (grammar_ && !grammar_->terminated() && params_.n_logprobs < 0 &&
      (params_.is_greedy() || !truncates)) {
    SLUICE_RETURN_IF_ERROR(prepare(logits, ws, /*masked=*/false));
    r.token = pick(ws);
    if (grammar_->is_allowed(r.token)) {
      ws.grammar_stats_.fast_accepts++;
      return r;
    }
    SLUICE_RETURN_IF_ERROR(apply_grammar(ws));
  } else {
    SLUICE_RETURN_IF_ERROR(prepare(logits, ws));
  }
  r.token = pick(ws);
  if (params_.n_logprobs >= 0) fill_logprobs(ws, r);
  return r;
}

Status Sampler::distribution(std::span<const float> logits, SampleWorkspace& ws,
                             std::vector<float>& p) {
  SLUICE_RETURN_IF_ERROR(prepare(logits, ws));
  p.assign(logits.size(), 0.0f);
  if (params_.is_greedy()) {
    p[size_t(argmax(ws))] = 1.0f;
    return {};
  }
  double z = 0.0;
  if (weigh(ws, &z)) {
    double total = 0.0;
    for (const Candidate& c : ws.cand_) total += c.w;
    for (const Candidate& c : ws.cand_) p[size_t(c.id)] = static_cast<float>(c.w / total);
  } else {
    for (size_t i = 0; i < p.size(); ++i) p[i] = static_cast<float>(ws.w_[i] / z);
  }
  return {};
}

int32_t Sampler::draw(std::span<const float> p) {
  const double u = rng_.uniform();
  double acc = 0.0;
  int32_t last_positive = 0;
  for (size_t i = 0; i < p.size(); ++i) {
    acc += p[i];
    if (p[i] > 0.0f) last_positive = int32_t(i);
    if (u < acc) return int32_t(i);
  }
  return last_positive;  // u rounded up past the total
}

Result<VerifyResult> Sampler::verify(std::span<const float> logits, int32_t draft,
                                     std::span<const float> q, SampleWorkspace& ws) {
  SLUICE_RETURN_IF_ERROR(prepare(logits, ws));
  if (!q.empty() && q.size() != logits.size()) {
    return make_error("verify: the draft distribution has ", q.size(), " entries, the logits ",
                      logits.size());
  }
  const auto n_vocab = static_cast<int32_t>(logits.size());
  VerifyResult v;
  if (params_.is_greedy()) {
    // p is one-hot at the argmax: min(1, p/q) accepts exactly the argmax.
    v.sample.token = argmax(ws);
    v.accepted = v.sample.token == draft;
  } else {
    double z = 0.0;
    if (!weigh(ws, &z)) gather_after_softmax(ws, 0.0f);  // every token with p > 0
    std::vector<Candidate>& cand = ws.cand_;
    double total = 0.0;
    double w_draft = 0.0;
    for (const Candidate& c : cand) {
      total += c.w;
      if (c.id == draft) w_draft = c.w;
    }
    const double p_draft = w_draft / total;
    const double q_draft =
        q.empty() ? 1.0 : (draft >= 0 && draft < n_vocab ? double(q[size_t(draft)]) : 0.0);
    // Accept with probability min(1, p/q): u < p/q, written without the division.
    if (q_draft > 0.0 && rng_.uniform() * q_draft < p_draft) {
      v.sample.token = draft;
      v.accepted = true;
    } else {
      // Rejected: draw from norm(max(0, p - q)). Tokens outside the candidate set have p = 0
      // and so no residual.
      double residual = 0.0;
      for (Candidate& c : cand) {
        const double qc = q.empty() ? (c.id == draft ? 1.0 : 0.0) : double(q[size_t(c.id)]);
        c.w = static_cast<float>(std::max(0.0, c.w / total - qc));
        residual += c.w;
      }
      if (residual > 0.0) {
        v.sample.token = draw_candidates(cand);
      } else {
        // p <= q everywhere with equal sums means p == q up to rounding: acceptance was certain.
        v.sample.token = draft;
        v.accepted = true;
      }
    }
  }
  if (params_.n_logprobs >= 0) fill_logprobs(ws, v.sample);
  return v;
}

void Sampler::select_top(std::span<const float> logits, int32_t k, std::vector<Candidate>& out) {
  // Min-heap of the k best so far, worst at the front. Tokens arrive in id order, so a later
  // token must be strictly greater to displace the worst (ties keep the lower id). Blocks of
  // 64 whose max does not beat the current k-th best are skipped after one vectorized scan.
  const auto worse_first = [](const Candidate& a, const Candidate& b) {
    return a.w > b.w || (a.w == b.w && a.id < b.id);
  };
  out.clear();
  const size_t n = logits.size();
  size_t i = 0;
  for (; i < n && out.size() < static_cast<size_t>(k); ++i) {
    if (logits[i] != -kInf) out.push_back({logits[i], static_cast<int32_t>(i)});
  }
  std::make_heap(out.begin(), out.end(), worse_first);
  if (!out.empty()) {
    float threshold = out.front().w;
    const auto consider = [&](size_t j) {
      const float l = logits[j];
      if (l > threshold) {
        std::pop_heap(out.begin(), out.end(), worse_first);
        out.back() = {l, static_cast<int32_t>(j)};
        std::push_heap(out.begin(), out.end(), worse_first);
        threshold = out.front().w;
      }
    };
    constexpr size_t kBlock = 64;
    for (; i < n && i % kBlock != 0; ++i) consider(i);
    for (; i + kBlock <= n; i += kBlock) {
      if (max_of(logits.subspan(i, kBlock)) > threshold) {
        for (size_t j = i; j < i + kBlock; ++j) consider(j);
      }
    }
    for (; i < n; ++i) consider(i);
  }
  std::sort_heap(out.begin(), out.end(), worse_first);  // ascending under worse_first = best first
}

bool Sampler::weigh(SampleWorkspace& ws, double* z_out) const {
  // Weights are softmax numerators w = exp((l - l_max) / T): the best token has w = 1 exactly,
  // so min-p keeps w >= min_p, and top-p keeps the best-first prefix reaching top_p * z, where
  // z is the total weight after top-k.
  //
  // top-p and min-p both keep a prefix of the best-first order, so applying them in sequence
  // (top-p -> min-p) keeps the shorter of the two prefixes: min-p is applied first as a cheap
  // filter, and top-p is then measured against the full z.
  const auto n_vocab = static_cast<int32_t>(ws.logits_.size());
  const float l_max = ws.l_max_;
  std::vector<Candidate>& cand = ws.cand_;
  const int32_t k = params_.top_k > 0 && params_.top_k < n_vocab ? params_.top_k : 0;
  const float t = params_.temperature;
  const bool top_p = params_.top_p < 1.0f;
  const bool min_p = params_.min_p > 0.0f;

  if (k > 0) {
    // Sorted k candidates; everything after works on them alone.
    select_top(ws.logits_, k, cand);
    double z = 0.0;
    for (Candidate& c : cand) {
      c.w = exp_nonpos((c.w - l_max) / t);
      z += c.w;
    }
    if (min_p) {
      const auto end = std::remove_if(cand.begin(), cand.end(),
                                      [&](const Candidate& c) { return c.w < params_.min_p; });
      cand.erase(end, cand.end());
    }
    if (top_p) truncate_top_p_sorted(cand, static_cast<double>(params_.top_p) * z);
    return true;
  }

  if (min_p && !top_p) {
    gather_min_p(ws);  // no exp for tokens that cannot pass
    return true;
  }

  ws.w_.resize(ws.logits_.size());
  ws.block_sums_.resize((ws.logits_.size() + kSumBlock - 1) / kSumBlock);
  exp_shifted(ws.logits_, l_max, t, ws.w_);
  const double z = block_sums(ws.w_, ws.block_sums_);
  *z_out = z;
  if (!top_p) return false;

  // top-p over the vocabulary. A token with w <= q, where n_vocab * q < (1 - top_p) * z,
  // cannot be in the nucleus: all such tokens together weigh less than (1 - top_p) * z, so
  // the heavier ones alone pass top_p * z. Dropping them first leaves few candidates for
  // model-like logits. (Capped at 0.5 so the best token, w = 1, always stays.)
  const double q = (1.0 - static_cast<double>(params_.top_p)) * z / n_vocab * 0.999;
  gather_after_softmax(ws, static_cast<float>(std::min(q, 0.5)));
  const double target = static_cast<double>(params_.top_p) * z;
  if (cand.size() <= kSortLimit) {
    std::sort(cand.begin(), cand.end(), better<Candidate>);
    truncate_top_p_sorted(cand, target);
  } else {
    truncate_top_p_radix(ws, target);
  }
  return true;
}

void Sampler::gather_min_p(SampleWorkspace& ws) const {
  // w >= min_p  <=>  l >= l_max + T ln(min_p): gather by that logit cutoff with a small
  // margin, then apply the exact test on the computed weight.
  const float t = params_.temperature;
  const float l_max = ws.l_max_;
  const float cutoff = l_max + (std::log(params_.min_p) - 1e-3f) * t - std::abs(l_max) * 1e-6f;
  std::vector<Candidate>& cand = ws.cand_;
  cand.resize(ws.logits_.size());
  const auto n = static_cast<int32_t>(ws.logits_.size());
  size_t kept = 0;
  for (int32_t i = 0; i < n; ++i) {  // branch-free compaction
    const float l = ws.logits_[static_cast<size_t>(i)];
    cand[kept] = {l, i};
    kept += l >= cutoff;
  }
  cand.resize(kept);
  kept = 0;
  for (const Candidate& c : cand) {
    const float w = exp_nonpos((c.w - l_max) / t);
    if (w >= params_.min_p) cand[kept++] = {w, c.id};
  }
  cand.resize(kept);
}

void Sampler::gather_after_softmax(SampleWorkspace& ws, float bound) const {
  // Candidates from w_: w > bound (top-p prefilter) and w >= min_p.
  const float floor = std::max(params_.min_p, std::nextafter(bound, 2.0f));
  std::vector<Candidate>& cand = ws.cand_;
  cand.resize(ws.w_.size());
  const auto n = static_cast<int32_t>(ws.w_.size());
  size_t kept = 0;
  for (int32_t i = 0; i < n; ++i) {  // branch-free compaction
    const float w = ws.w_[static_cast<size_t>(i)];
    cand[kept] = {w, i};
    kept += w >= floor;
  }
  cand.resize(kept);
}

void Sampler::truncate_top_p_sorted(std::vector<Candidate>& cand, double target) {
  // Best first: keep up to and including the token that reaches `target`.
  double acc = 0.0;
  size_t n = 0;
  while (n < cand.size() && acc < target) acc += cand[n++].w;
  cand.resize(n);
}

void Sampler::truncate_top_p_radix(SampleWorkspace& ws, double target) {
  // Positive floats order like their bit patterns, so the nucleus cut is found by an MSB radix
  // selection on the weights' bits instead of a sort. Each level sums the weight per bucket,
  // walks buckets from the top until the running weight reaches `target`, keeps the buckets
  // above whole (unsorted), drops those below, and refines the crossing bucket at the next
  // level; once it holds <= kSortLimit tokens it is sorted and cut at the token that reaches
  // `target`. After the last level all its weights are equal and, since every partition
  // keeps the id order, it is already best first: no sort.
  //
  //   w bits:  [31..20 | 19..10 | 9..0]      level 0 buckets:  0x3F8 (w = 1) ... 0
  //             level 0  level 1  level 2                       kept | crossing | dropped
  struct Level {
    int shift;
    uint32_t mask;
  };
  // Weights are in [0, 1], so bits 31 and 30 are 0 and 10 bits per level cover the rest.
  static constexpr Level kLevels[] = {{20, 0x3FF}, {10, 0x3FF}, {0, 0x3FF}};
  constexpr size_t kBuckets = 1024;
  // Tokens often share a bucket (flat distributions); interleaved histogram copies break the
  // add -> store -> load dependency chain through one counter, when there are enough tokens
  // to pay for clearing them.
  constexpr size_t kMaxCopies = 4;
  std::vector<Candidate>& cand = ws.cand_;
  std::vector<Candidate>& tail = ws.tail_;
  std::vector<double>& hist = ws.hist_;
  if (tail.size() < cand.size()) tail.resize(cand.size());
  size_t n_kept = 0;              // cand[0, n_kept) are in the nucleus
  double above = 0.0;             // their weight
  Candidate* work = cand.data();  // the unresolved tokens: all of cand at level 0
  size_t n_work = cand.size();
  for (size_t level = 0;; ++level) {
    const Level lv = kLevels[level];
    const auto key = [&](float w) { return (std::bit_cast<uint32_t>(w) >> lv.shift) & lv.mask; };
    const size_t copies = n_work >= 8 * kBuckets ? kMaxCopies : 1;
    hist.assign(copies * kBuckets, 0.0);
    size_t i = 0;
    for (; i + copies <= n_work; i += copies) {
      for (size_t c = 0; c < copies; ++c) {
        hist[c * kBuckets + key(work[i + c].w)] += work[i + c].w;
      }
    }
    for (; i < n_work; ++i) hist[key(work[i].w)] += work[i].w;
    for (size_t c = 1; c < copies; ++c) {
      for (size_t k = 0; k < kBuckets; ++k) hist[k] += hist[c * kBuckets + k];
    }
    size_t b = kBuckets;
    while (b > 0 && above + hist[b - 1] < target) above += hist[--b];
    if (b == 0) {  // the target is not reached (rounding): keep them all
      for (size_t i = 0; i < n_work; ++i) cand[n_kept++] = work[i];
      cand.resize(n_kept);
      return;
    }
    const auto crossing = static_cast<uint32_t>(b - 1);
    // Writes never overtake reads: kept tokens go to cand[n_kept] (n_kept <= read index at
    // level 0, past consumed tokens later), the crossing bucket compacts into tail.
    size_t n_tail = 0;
    for (size_t i = 0; i < n_work; ++i) {
      const Candidate c = work[i];
      const uint32_t kc = key(c.w);
      if (kc > crossing) {
        cand[n_kept++] = c;
      } else if (kc == crossing) {
        tail[n_tail++] = c;
      }
    }
    work = tail.data();
    n_work = n_tail;
    if (level + 1 == std::size(kLevels)) break;  // equal weights, in id order: best first
    if (n_work <= kSortLimit) {
      std::sort(work, work + n_work, better<Candidate>);
      break;
    }
  }
  double acc = above;
  for (size_t i = 0; i < n_work; ++i) {
    cand[n_kept++] = work[i];
    acc += work[i].w;
    if (acc >= target) break;
  }
  cand.resize(n_kept);
}

int32_t Sampler::draw_candidates(std::span<const Candidate> cand) {
  // Inverse CDF over `cand` in its order. Never empty: the best token (w = 1) passes every
  // filter.
  double total = 0.0;
  for (const Candidate& c : cand) total += c.w;
  const double u = rng_.uniform() * total;
  double acc = 0.0;
  int32_t last_positive = cand.front().id;
  for (const Candidate& c : cand) {
    acc += c.w;
    if (u < acc) return c.id;
    if (c.w > 0.0f) last_positive = c.id;
  }
  return last_positive;  // u rounded up to total
}

int32_t Sampler::draw_vocab(const SampleWorkspace& ws, double z) {
  // Inverse CDF over w in id order: find the block through sums, then walk it.
  const std::vector<float>& w = ws.w_;
  const std::vector<double>& sums = ws.block_sums_;
  const double u = rng_.uniform() * z;
  // The block holding u, or the last block with weight when u rounded up to z.
  size_t block = 0;
  double before = 0.0;  // weight of the blocks before `block`
  double acc = 0.0;
  for (size_t b = 0; b < sums.size(); ++b) {
    if (sums[b] <= 0.0) continue;
    block = b;
    before = acc;
    if (u < acc + sums[b]) break;
    acc += sums[b];
  }
  acc = before;
  const size_t begin = block * kSumBlock;
  const size_t end = std::min(begin + kSumBlock, w.size());
  size_t last_positive = begin;
  for (size_t i = begin; i < end; ++i) {
    acc += w[i];
    if (w[i] > 0.0f) last_positive = i;
    if (u < acc) return static_cast<int32_t>(i);
  }
  return static_cast<int32_t>(last_positive);  // rounding between block and running sums
}

void Sampler::fill_logprobs(SampleWorkspace& ws, SampleResult& r) const {
  // log-softmax of the processed logits: lp(i) = l(i) - lse,
  // lse = l_max + log(sum exp(l - l_max)).
  ws.w_.resize(ws.logits_.size());
  exp_shifted(ws.logits_, ws.l_max_, 1.0f, ws.w_);
  const double lse = static_cast<double>(ws.l_max_) + std::log(sum_of(ws.w_));
  r.logprob =
      static_cast<float>(static_cast<double>(ws.logits_[static_cast<size_t>(r.token)]) - lse);
  r.n_top = 0;
  if (params_.n_logprobs > 0) {
    select_top(ws.logits_, params_.n_logprobs, ws.top_);
    for (const Candidate& c : ws.top_) {
      r.top[static_cast<size_t>(r.n_top++)] = {c.id, static_cast<float>(c.w - lse)};
    }
  }
}

}  // namespace sluice
