#include "loadgen/server_metrics.h"

#include <httplib.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <functional>
#include <iterator>
#include <map>

#include "loadgen/client.h"

namespace sluice::loadgen {
namespace {

// One sample line of the text format, "name[{labels}] value [timestamp]", split up.
struct Sample {
  std::string_view name;
  std::string_view labels;  // between the braces, "" without
  double value = 0;
};

// Calls f(sample) for every well-formed sample line of `text`; comments, blank and malformed
// lines are skipped. O(text size).
template <typename F>
void for_each_sample(std::string_view text, F&& f) {
  size_t pos = 0;
  while (pos < text.size()) {
    size_t eol = text.find('\n', pos);
    if (eol == std::string_view::npos) eol = text.size();
    const std::string_view line = text.substr(pos, eol - pos);
    pos = eol + 1;
    if (line.empty() || line[0] == '#') continue;
    size_t i = line.find_first_of("{ \t");
    if (i == 0 || i == std::string_view::npos) continue;
    Sample s;
    s.name = line.substr(0, i);
    if (line[i] == '{') {
      const size_t open = i;
      bool quoted = false;  // label values may hold '}' inside quotes, with \" escapes
      for (++i; i < line.size(); ++i) {
        if (quoted && line[i] == '\\') {
          ++i;
        } else if (line[i] == '"') {
          quoted = !quoted;
        } else if (!quoted && line[i] == '}') {
          break;
        }
      }
      if (i >= line.size()) continue;
      s.labels = line.substr(open + 1, i - open - 1);
      ++i;
    }
    if (i >= line.size() || (line[i] != ' ' && line[i] != '\t')) continue;
    while (i < line.size() && (line[i] == ' ' || line[i] == '\t')) ++i;
    const std::string value(line.substr(i, line.find_first_of(" \t\r", i) - i));
    char* end = nullptr;
    s.value = std::strtod(value.c_str(), &end);
    if (value.empty() || *end != '\0') continue;
    f(s);
  }
}

// The value of label `key` in `labels` (k1="v1",k2="v2", escapes \\ \" \n undone); nullopt when
// absent or the list is malformed before it.
std::optional<std::string> label_value(std::string_view labels, std::string_view key) {
  size_t i = 0;
  const size_t n = labels.size();
  auto skip_space = [&] {
    while (i < n && (labels[i] == ' ' || labels[i] == '\t')) ++i;
  };
  for (;;) {
    while (i < n && (labels[i] == ' ' || labels[i] == '\t' || labels[i] == ',')) ++i;
    if (i >= n) return std::nullopt;
    const size_t k0 = i;
    while (i < n && labels[i] != '=' && labels[i] != ' ' && labels[i] != '\t') ++i;
    const std::string_view k = labels.substr(k0, i - k0);
    skip_space();
    if (i >= n || labels[i] != '=') return std::nullopt;
    ++i;
    skip_space();
    if (i >= n || labels[i] != '"') return std::nullopt;
    std::string v;
    for (++i; i < n && labels[i] != '"'; ++i) {
      if (labels[i] == '\\' && i + 1 < n) {
        ++i;
        v += labels[i] == 'n' ? '\n' : labels[i];
      } else {
        v += labels[i];
      }
    }
    if (i >= n) return std::nullopt;
    ++i;
    if (k == key) return v;
  }
}

// A le="..." bound: a number or +Inf; nullopt for anything else, NaN and -Inf.
std::optional<double> parse_le(const std::string& s) {
  char* end = nullptr;
  const double v = std::strtod(s.c_str(), &end);
  if (s.empty() || *end != '\0' || std::isnan(v) || v == -HUGE_VAL) return std::nullopt;
  return v;
}

// The cumulative count of `h` at bound `le`: its count at the largest bound <= le, 0 below its
// first. Buckets ascending.
double cumulative_at(const PromHistogram& h, double le) {
  auto it = std::upper_bound(h.buckets.begin(), h.buckets.end(), le,
                             [](double v, const PromHistogram::Bucket& b) { return v < b.le; });
  return it == h.buckets.begin() ? 0 : std::prev(it)->count;
}

PromHistogram combine(const PromHistogram& a, const PromHistogram& b, double sign) {
  std::vector<double> les;
  les.reserve(a.buckets.size() + b.buckets.size());
  for (const auto& x : a.buckets) les.push_back(x.le);
  for (const auto& x : b.buckets) les.push_back(x.le);
  std::sort(les.begin(), les.end());
  les.erase(std::unique(les.begin(), les.end()), les.end());
  PromHistogram out;
  out.buckets.reserve(les.size());
  for (double le : les)
    out.buckets.push_back({le, cumulative_at(a, le) + sign * cumulative_at(b, le)});
  out.sum = a.sum + sign * b.sum;
  out.count = a.count + sign * b.count;
  return out;
}

// GET url (its path, or /metrics without one): the body of a 200.
Result<std::string> get_metrics_text(const std::string& url, double timeout_s) {
  SLUICE_ASSIGN_OR_RETURN(BaseUrl base, parse_base_url(url));
  httplib::Client cli(base.scheme_host_port);
  const auto timeout = std::chrono::duration_cast<std::chrono::microseconds>(
      std::chrono::duration<double>(timeout_s));
  cli.set_connection_timeout(timeout);
  cli.set_read_timeout(timeout);
  const std::string path = base.path_prefix.empty() ? "/metrics" : base.path_prefix;
  httplib::Result r = cli.Get(path);
  if (!r) return make_error("GET ", url, ": ", httplib::to_string(r.error()));
  if (r->status != 200) return make_error("GET ", url, ": HTTP ", r->status);
  return std::move(r->body);
}

constexpr const char* kTtftName = "sluice_time_to_first_token_seconds";
constexpr const char* kItlName = "sluice_inter_token_latency_seconds";

// Every counter of ServerCounters, for the operations that treat them alike.
constexpr double ServerCounters::*kCounterFields[] = {&ServerCounters::queried_blocks,
                                                      &ServerCounters::hit_blocks,
                                                      &ServerCounters::hit_tokens,
                                                      &ServerCounters::prompt_tokens,
                                                      &ServerCounters::prompt_tokens_computed,
                                                      &ServerCounters::spec_verify_steps,
                                                      &ServerCounters::spec_draft_tokens,
                                                      &ServerCounters::spec_accepted_tokens,
                                                      &ServerCounters::spec_emitted_tokens};

// num / den; nullopt when den is not above 0.
std::optional<double> ratio(double num, double den) {
  if (!(den > 0)) return std::nullopt;
  return num / den;
}

template <class Op>
ServerCounters combine(const ServerCounters& a, const ServerCounters& b, Op op) {
  ServerCounters c;
  for (double ServerCounters::*f : kCounterFields) c.*f = op(a.*f, b.*f);
  return c;
}

}  // namespace

std::optional<double> ServerCounters::block_hit_rate() const {
  return ratio(hit_blocks, queried_blocks);
}

std::optional<double> ServerCounters::token_hit_rate() const {
  return ratio(hit_tokens, prompt_tokens);
}

std::optional<double> ServerCounters::spec_acceptance() const {
  return ratio(spec_accepted_tokens, spec_draft_tokens);
}

std::optional<double> ServerCounters::spec_tokens_per_step() const {
  return ratio(spec_emitted_tokens, spec_verify_steps);
}

bool ServerCounters::any_negative() const {
  return std::any_of(std::begin(kCounterFields), std::end(kCounterFields),
                     [this](double ServerCounters::*f) { return this->*f < 0; });
}

ServerCounters operator+(const ServerCounters& a, const ServerCounters& b) {
  return combine(a, b, std::plus<double>());
}

ServerCounters operator-(const ServerCounters& a, const ServerCounters& b) {
  return combine(a, b, std::minus<double>());
}

std::optional<double> prometheus_sum(std::string_view text, std::string_view name) {
  std::optional<double> sum;
  for_each_sample(text, [&](const Sample& s) {
    if (s.name == name) sum = sum.value_or(0) + s.value;
  });
  return sum;
}

std::optional<ServerCounters> parse_server_counters(std::string_view text) {
  const std::optional<double> queries = prometheus_sum(text, "sluice_prefix_cache_queries_total");
  const std::optional<double> hits = prometheus_sum(text, "sluice_prefix_cache_hits_total");
  const std::optional<double> hit_tokens =
      prometheus_sum(text, "sluice_prefix_cache_hit_tokens_total");
  if (!queries || !hits || !hit_tokens) return std::nullopt;
  ServerCounters c;
  c.queried_blocks = *queries;
  c.hit_blocks = *hits;
  c.hit_tokens = *hit_tokens;
  c.prompt_tokens = prometheus_sum(text, "sluice_prompt_tokens_total").value_or(0);
  c.prompt_tokens_computed =
      prometheus_sum(text, "sluice_prompt_tokens_computed_total").value_or(0);
  c.spec_verify_steps = prometheus_sum(text, "sluice_spec_verify_steps_total").value_or(0);
  c.spec_draft_tokens = prometheus_sum(text, "sluice_spec_draft_tokens_total").value_or(0);
  c.spec_accepted_tokens = prometheus_sum(text, "sluice_spec_accepted_tokens_total").value_or(0);
  c.spec_emitted_tokens = prometheus_sum(text, "sluice_spec_emitted_tokens_total").value_or(0);
  return c;
}

std::string default_metrics_url(const std::string& base_url) {
  std::string u = base_url;
  while (!u.empty() && u.back() == '/') u.pop_back();
  if (u.size() >= 8 && u.compare(u.size() - 8, 8, "/metrics") == 0) return u;
  if (u.size() >= 3 && u.compare(u.size() - 3, 3, "/v1") == 0) u.resize(u.size() - 3);
  return u + "/metrics";
}

Result<ServerCounters> scrape_server_counters(const std::vector<std::string>& urls,
                                              double timeout_s) {
  ServerCounters total;
  for (const std::string& url : urls) {
    SLUICE_ASSIGN_OR_RETURN(const std::string text, get_metrics_text(url, timeout_s));
    const std::optional<ServerCounters> c = parse_server_counters(text);
    if (!c) return make_error(url, " has no sluice_prefix_cache_* counters");
    total = total + *c;
  }
  return total;
}

std::optional<double> PromHistogram::mean() const {
  if (!(count > 0)) return std::nullopt;
  return sum / count;
}

bool PromHistogram::any_negative() const {
  if (count < 0) return true;
  for (const Bucket& b : buckets)
    if (b.count < 0) return true;
  return false;
}

std::optional<PromHistogram> parse_prometheus_histogram(std::string_view text,
                                                        std::string_view name) {
  const std::string bucket_name = std::string(name) + "_bucket";
  const std::string sum_name = std::string(name) + "_sum";
  const std::string count_name = std::string(name) + "_count";
  std::map<double, double> by_le;  // bound -> cumulative count, summed over label sets
  std::optional<double> sum, count;
  for_each_sample(text, [&](const Sample& s) {
    if (std::isnan(s.value)) return;
    if (s.name == bucket_name) {
      const std::optional<std::string> le = label_value(s.labels, "le");
      if (!le) return;
      if (const std::optional<double> bound = parse_le(*le)) by_le[*bound] += s.value;
    } else if (s.name == sum_name) {
      sum = sum.value_or(0) + s.value;
    } else if (s.name == count_name) {
      count = count.value_or(0) + s.value;
    }
  });
  if (by_le.empty() || !sum || !count) return std::nullopt;
  PromHistogram h;
  h.buckets.reserve(by_le.size());
  for (const auto& [le, n] : by_le) h.buckets.push_back({le, n});
  h.sum = *sum;
  h.count = *count;
  return h;
}

PromHistogram operator+(const PromHistogram& a, const PromHistogram& b) {
  return combine(a, b, 1);
}

PromHistogram operator-(const PromHistogram& a, const PromHistogram& b) {
  return combine(a, b, -1);
}

std::optional<double> histogram_quantile(const PromHistogram& h, double q) {
  if (!(q >= 0 && q <= 1)) return std::nullopt;
  std::vector<PromHistogram::Bucket> b = h.buckets;
  std::stable_sort(b.begin(), b.end(), [](const auto& x, const auto& y) { return x.le < y.le; });
  if (b.size() < 2 || b.back().le != HUGE_VAL) return std::nullopt;
  // Prometheus's ensureMonotonic: a cumulative count below the one before it (a sum over
  // servers with different bounds, a scrape mid-update) is raised to it.
  for (size_t i = 1; i < b.size(); ++i) b[i].count = std::max(b[i].count, b[i - 1].count);
  const double observations = b.back().count;
  if (!(observations > 0) || !std::isfinite(observations)) return std::nullopt;
  const double rank = q * observations;
  size_t i = 0;  // the first bucket whose cumulative count reaches the rank (the last: +Inf)
  while (i + 1 < b.size() && b[i].count < rank) ++i;
  double v = 0;
  if (i + 1 == b.size()) {
    v = b[i - 1].le;  // in the +Inf bucket: the last finite bound
  } else if (i == 0 && b[0].le <= 0) {
    v = b[0].le;
  } else {
    const double lower = i == 0 ? 0 : b[i - 1].le;
    const double below = i == 0 ? 0 : b[i - 1].count;
    const double in_bucket = b[i].count - below;
    // in_bucket is 0 only for rank 0 at an empty first bucket: its lower edge.
    v = in_bucket > 0 ? lower + (b[i].le - lower) * ((rank - below) / in_bucket) : lower;
  }
  if (!std::isfinite(v)) return std::nullopt;
  return v;
}

LatencyHistograms operator+(const LatencyHistograms& a, const LatencyHistograms& b) {
  return {a.ttft + b.ttft, a.itl + b.itl};
}

LatencyHistograms operator-(const LatencyHistograms& a, const LatencyHistograms& b) {
  return {a.ttft - b.ttft, a.itl - b.itl};
}

std::optional<LatencyHistograms> parse_latency_histograms(std::string_view text) {
  std::optional<PromHistogram> ttft = parse_prometheus_histogram(text, kTtftName);
  std::optional<PromHistogram> itl = parse_prometheus_histogram(text, kItlName);
  if (!ttft || !itl) return std::nullopt;
  return LatencyHistograms{std::move(*ttft), std::move(*itl)};
}

Result<LatencyHistograms> scrape_latency_histograms(const std::vector<std::string>& urls,
                                                    double timeout_s) {
  LatencyHistograms total;
  for (const std::string& url : urls) {
    SLUICE_ASSIGN_OR_RETURN(const std::string text, get_metrics_text(url, timeout_s));
    const std::optional<LatencyHistograms> h = parse_latency_histograms(text);
    if (!h) return make_error(url, " has no ", kTtftName, " and ", kItlName, " histograms");
    total = total + *h;
  }
  return total;
}

Result<std::vector<RoleMetricsUrls>> group_role_metrics(const std::vector<std::string>& specs) {
  std::vector<RoleMetricsUrls> roles;
  for (const std::string& spec : specs) {
    const size_t eq = spec.find('=');
    if (eq == std::string::npos || eq == 0 || eq + 1 == spec.size()) {
      return make_error("--role-metrics '", spec,
                        "': expected ROLE=URL, e.g. decode=http://127.0.0.1:8002/metrics");
    }
    const std::string role = spec.substr(0, eq);
    const std::string url = default_metrics_url(spec.substr(eq + 1));
    if (Result<BaseUrl> base = parse_base_url(url); !base.ok()) {
      std::string why = base.message();
      if (why.rfind("--url ", 0) == 0) why.erase(0, 6);
      return make_error("--role-metrics '", spec, "': ", why);
    }
    auto it = std::find_if(roles.begin(), roles.end(),
                           [&](const RoleMetricsUrls& r) { return r.role == role; });
    if (it == roles.end()) it = roles.insert(roles.end(), RoleMetricsUrls{role, {}});
    it->urls.push_back(url);
  }
  return roles;
}

HistogramSummary summarize_histogram(const PromHistogram& h) {
  auto ms = [](std::optional<double> s) {
    return s ? std::optional<double>(*s * 1e3) : std::nullopt;
  };
  HistogramSummary s;
  s.count = h.count;
  s.p50_ms = ms(histogram_quantile(h, 0.5));
  s.p99_ms = ms(histogram_quantile(h, 0.99));
  s.mean_ms = ms(h.mean());
  return s;
}

RoleLatency role_latency(const RoleMetricsUrls& r, const Result<LatencyHistograms>& before,
                         const Result<LatencyHistograms>& after) {
  RoleLatency out;
  out.role = r.role;
  out.urls = r.urls;
  if (!before.ok()) {
    out.note = before.message();
  } else if (!after.ok()) {
    out.note = after.message();
  } else if (const LatencyHistograms d = *after - *before;
             d.ttft.any_negative() || d.itl.any_negative()) {
    out.note = "the histograms went backwards during the run (a server restarted?)";
  } else {
    out.ttft = summarize_histogram(d.ttft);
    out.itl = summarize_histogram(d.itl);
  }
  return out;
}

}  // namespace sluice::loadgen
