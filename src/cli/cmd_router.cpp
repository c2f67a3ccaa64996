// `sluice router --backend URL [--backend URL ...]`: one OpenAI-compatible endpoint in front of
// many replicas, prefix- and load-aware (src/router, docs/router.md). SIGINT/SIGTERM: stop.
#include <pthread.h>
#include <sys/resource.h>

#include <csignal>
#include <cstdio>
#include <ctime>
#include <memory>

#include "cli/commands.h"
#include "router/proxy.h"

namespace sluice::cli {
namespace {

struct RouterOptions {
  router::RouterConfig config;
  std::string policy = "cache_aware";
  int http_threads = 4096;
  std::vector<std::string> decode;
};

Status run_router(RouterOptions& o) {
  sigset_t sigs;
  sigemptyset(&sigs);
  sigaddset(&sigs, SIGINT);
  sigaddset(&sigs, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &sigs, nullptr);
  rlimit lim{};
  if (::getrlimit(RLIMIT_NOFILE, &lim) == 0 && lim.rlim_cur < lim.rlim_max) {
    lim.rlim_cur = lim.rlim_max;
    ::setrlimit(RLIMIT_NOFILE, &lim);
  }
  SLUICE_ASSIGN_OR_RETURN(o.config.policy.policy, router::parse_policy(o.policy));
  o.config.http.max_threads = o.http_threads;
  router::RouterServer r(o.config);
  SLUICE_ASSIGN_OR_RETURN(int port, r.start());
  std::fprintf(
      stderr, "sluice router: listening on http://%s:%d (%s over %d backends, %d healthy)\n",
      o.config.host.c_str(), port, o.policy.c_str(), r.backends().size(), r.backends().n_healthy());
  for (int b = 0; b < r.backends().size(); ++b) {
    std::fprintf(stderr, "sluice router:   %s%s %s\n", r.prefill_backends() ? "decode " : "",
                 r.backends().endpoint(b).url.c_str(),
                 r.backends().healthy(b) ? "healthy" : "not answering /health yet");
  }
  if (router::Backends* pf = r.prefill_backends()) {
    for (int b = 0; b < pf->size(); ++b) {
      std::fprintf(stderr, "sluice router:   prefill %s %s\n", pf->endpoint(b).url.c_str(),
                   pf->healthy(b) ? "healthy" : "not answering /health yet");
    }
  }
  timespec ts{3600, 0};
  while (::sigtimedwait(&sigs, nullptr, &ts) <= 0) {
  }
  std::fprintf(stderr, "sluice router: shutting down\n");
  r.shutdown();
  std::fprintf(stderr, "sluice router: stopped\n");
  return {};
}

}  // namespace

void register_router(CLI::App& app, int& exit_code) {
  auto o = std::make_shared<RouterOptions>();
  CLI::App* cmd = app.add_subcommand(
      "router", "Route OpenAI-compatible requests over several backends, prefix- and load-aware");
  cmd->add_option("--backend", o->config.backends,
                  "Backend base URL http://HOST:PORT (repeat, or give several)");
  cmd->add_option("--decode", o->decode,
                  "Disaggregated serving: a decode worker (sluice serve --role decode); "
                  "needs --prefill");
  cmd->add_option("--prefill", o->config.prefill,
                  "Disaggregated serving: a prefill worker (sluice serve --role prefill) that "
                  "computes each prompt first; its K/V goes to the decode worker");
  cmd->add_option("--host", o->config.host, "Address to bind (0.0.0.0: every interface)")
      ->capture_default_str();
  cmd->add_option("--port", o->config.port, "TCP port (0: any free port)")->capture_default_str();
  cmd->add_option("--policy", o->policy, "cache_aware | least_load | round_robin")
      ->capture_default_str();
  cmd->add_option("--cache-threshold", o->config.policy.cache_threshold,
                  "cache_aware: predicted match / prompt needed to route by affinity")
      ->capture_default_str();
  cmd->add_option("--balance-abs-threshold", o->config.policy.balance_abs_threshold,
                  "cache_aware: balance load when max - min load exceeds this ...")
      ->capture_default_str();
  cmd->add_option("--balance-rel-threshold", o->config.policy.balance_rel_threshold,
                  "... and max load exceeds this times min load")
      ->capture_default_str();
  cmd->add_option("--max-tree-size", o->config.policy.max_tree_chars,
                  "Bytes of routing keys remembered per backend (LRU beyond)")
      ->capture_default_str();
  cmd->add_option("--health-interval", o->config.health_interval_s,
                  "Seconds between health, load and cache polls of each backend")
      ->capture_default_str();
  cmd->add_option("--upstream-timeout", o->config.upstream_timeout_s,
                  "Seconds a backend may stay silent within one answer")
      ->capture_default_str();
  cmd->add_option("--api-key", o->config.api_key,
                  "Require 'Authorization: Bearer KEY' or 'x-api-key: KEY' on every route but "
                  "/health, /metrics and the web app (passed on to the backends)")
      ->envname("SLUICE_API_KEY");
  cmd->add_flag_callback(
      "--no-webui", [o] { o->config.webui = false; },
      "Do not serve the web app (chat and dashboard) at /");
  cmd->add_option("--http-threads", o->http_threads,
                  "Concurrent client connections served at most (one thread each)")
      ->capture_default_str();
  cmd->callback([o, &exit_code] {
    const auto& c = o->config;
    if (c.port < 0 || c.port > 65535 || c.health_interval_s <= 0 || c.upstream_timeout_s <= 0 ||
        c.policy.cache_threshold < 0 || c.policy.cache_threshold > 1 ||
        c.policy.balance_abs_threshold < 0 || c.policy.balance_rel_threshold < 1 ||
        c.policy.max_tree_chars < 1 || o->http_threads < 1) {
      exit_code = report_error("router",
                               "--port 0..65535, --health-interval > 0, --upstream-timeout > 0, "
                               "--cache-threshold 0..1, --balance-abs-threshold >= 0, "
                               "--balance-rel-threshold >= 1, --max-tree-size >= 1, "
                               "--http-threads >= 1");
      return;
    }
    auto& backends = o->config.backends;
    backends.insert(backends.end(), o->decode.begin(), o->decode.end());
    if (backends.empty()) {
      exit_code = report_error("router",
                               "give the backends: --backend URL (or --decode URL "
                               "with --prefill URL)");
      return;
    }
    if (!o->decode.empty() && o->config.prefill.empty()) {
      exit_code = report_error("router", "--decode needs --prefill (the prefill workers)");
      return;
    }
    Status st = run_router(*o);
    if (!st.ok()) exit_code = report_error("router", st.message());
  });
}

}  // namespace sluice::cli
