#include "loadgen/server_metrics.h"

#include <httplib.h>

#include <cstdlib>

#include "loadgen/client.h"

namespace sluice::loadgen {

std::optional<double> PrefixCacheCounters::block_hit_rate() const {
  if (!(queried_blocks > 0)) return std::nullopt;
  return hit_blocks / queried_blocks;
}

std::optional<double> PrefixCacheCounters::token_hit_rate() const {
  if (!(prompt_tokens > 0)) return std::nullopt;
  return hit_tokens / prompt_tokens;
}

PrefixCacheCounters operator+(const PrefixCacheCounters& a, const PrefixCacheCounters& b) {
  return {a.queried_blocks + b.queried_blocks, a.hit_blocks + b.hit_blocks,
          a.hit_tokens + b.hit_tokens, a.prompt_tokens + b.prompt_tokens,
          a.prompt_tokens_computed + b.prompt_tokens_computed};
}

PrefixCacheCounters operator-(const PrefixCacheCounters& a, const PrefixCacheCounters& b) {
  return {a.queried_blocks - b.queried_blocks, a.hit_blocks - b.hit_blocks,
          a.hit_tokens - b.hit_tokens, a.prompt_tokens - b.prompt_tokens,
          a.prompt_tokens_computed - b.prompt_tokens_computed};
}

std::optional<double> prometheus_sum(std::string_view text, std::string_view name) {
  std::optional<double> sum;
  size_t pos = 0;
  while (pos < text.size()) {
    size_t eol = text.find('\n', pos);
    if (eol == std::string_view::npos) eol = text.size();
    std::string_view line = text.substr(pos, eol - pos);
    pos = eol + 1;
    // Sample lines: name[{labels}] value [timestamp]
    if (line.size() <= name.size() || line.compare(0, name.size(), name) != 0) continue;
    size_t i = name.size();
    if (line[i] == '{') {
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
      ++i;
    }
    if (i >= line.size() || (line[i] != ' ' && line[i] != '\t')) continue;  // a longer name
    while (i < line.size() && (line[i] == ' ' || line[i] == '\t')) ++i;
    const std::string value(line.substr(i, line.find_first_of(" \t\r", i) - i));
    char* end = nullptr;
    const double v = std::strtod(value.c_str(), &end);
    if (value.empty() || *end != '\0') continue;
    sum = sum.value_or(0) + v;
  }
  return sum;
}

std::optional<PrefixCacheCounters> parse_prefix_cache_counters(std::string_view text) {
  const std::optional<double> queries = prometheus_sum(text, "sluice_prefix_cache_queries_total");
  const std::optional<double> hits = prometheus_sum(text, "sluice_prefix_cache_hits_total");
  const std::optional<double> hit_tokens =
      prometheus_sum(text, "sluice_prefix_cache_hit_tokens_total");
  if (!queries || !hits || !hit_tokens) return std::nullopt;
  PrefixCacheCounters c;
  c.queried_blocks = *queries;
  c.hit_blocks = *hits;
  c.hit_tokens = *hit_tokens;
  c.prompt_tokens = prometheus_sum(text, "sluice_prompt_tokens_total").value_or(0);
  c.prompt_tokens_computed =
      prometheus_sum(text, "sluice_prompt_tokens_computed_total").value_or(0);
  return c;
}

std::string default_metrics_url(const std::string& base_url) {
  std::string u = base_url;
  while (!u.empty() && u.back() == '/') u.pop_back();
  if (u.size() >= 8 && u.compare(u.size() - 8, 8, "/metrics") == 0) return u;
  if (u.size() >= 3 && u.compare(u.size() - 3, 3, "/v1") == 0) u.resize(u.size() - 3);
  return u + "/metrics";
}

Result<PrefixCacheCounters> scrape_prefix_cache(const std::vector<std::string>& urls,
                                                double timeout_s) {
  PrefixCacheCounters total;
  for (const std::string& url : urls) {
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
    const std::optional<PrefixCacheCounters> c = parse_prefix_cache_counters(r->body);
    if (!c) return make_error(url, " has no sluice_prefix_cache_* counters");
    total = total + *c;
  }
  return total;
}

}  // namespace sluice::loadgen
