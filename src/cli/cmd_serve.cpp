// `sluice serve MODEL`: the OpenAI-compatible HTTP server (src/server, docs/server.md).
//
// Start-up order: bind and listen first (GET /health answers 503 while the model loads), then
// load on the engine thread. SIGINT/SIGTERM: stop accepting, let running generations finish
// for --shutdown-timeout seconds (a second signal cuts this short), cancel the rest, exit 0.
#include <pthread.h>
#include <sys/resource.h>

#if defined(__GLIBC__)
#include <malloc.h>
#endif

#include <cerrno>
#include <csignal>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <memory>
#include <sstream>

#include "base/fnv1a.h"
#include "cli/commands.h"
#include "cli/engine_session.h"
#include "cli/parallel_session.h"
#include "kernels/matmul_isa.h"
#include "server/server.h"

namespace sluice::cli {
namespace {

struct ServeOptions {
  std::string model;
  server::ServerConfig server;
  std::string chat_template_file;
  int http_threads = 4096;
  double shutdown_timeout_s = 30;
  EngineCliOptions engine;
  std::string role = "both";
  std::string kv_transfer_fail = "error";
};

// Hundreds of connections need hundreds of descriptors: raise the soft limit to the hard one.
void raise_fd_limit() {
  rlimit lim{};
  if (::getrlimit(RLIMIT_NOFILE, &lim) == 0 && lim.rlim_cur < lim.rlim_max) {
    lim.rlim_cur = lim.rlim_max;
    ::setrlimit(RLIMIT_NOFILE, &lim);
  }
}

// Waits up to `ms` for SIGINT/SIGTERM (blocked in every thread); returns the signal or 0.
int wait_signal(const sigset_t& sigs, int ms) {
  timespec ts{ms / 1000, long(ms % 1000) * 1000000L};
  const int sig = ::sigtimedwait(&sigs, nullptr, &ts);
  return sig > 0 ? sig : 0;
}

// The name a client types for MODEL: its file stem ("stories260K" for
// /models/stories260K.gguf or hf://owner/repo/stories260K.gguf; the first shard of a split
// "m-00001-of-00003.gguf" is "m").
std::string model_stem(const std::string& model) {
  std::string s = model.substr(model.find_last_of('/') + 1);  // npos + 1 == 0
  if (s.size() > 5 && s.compare(s.size() - 5, 5, ".gguf") == 0) s.resize(s.size() - 5);
  const size_t of = s.rfind("-of-");
  if (of != std::string::npos && of >= 6 && s[of - 6] == '-' && s.size() - of == 9) {
    s.resize(of - 6);
  }
  return s.empty() ? model : s;
}

// What K/V transfers and disk files must match besides the layout: the model file's size and
// a hash of its header, metadata, tensor directory and 64 windows of 4 KiB spread over the
// tensor data (a re-quantized file or other weights of the same shapes differ there). About a
// millisecond, read from the mapping.
std::string kv_model_id(const GgufFile& f) {
  const uint8_t* bytes = f.bytes();
  const size_t size = f.file_size();
  uint64_t h = fnv1a(bytes, std::min(size, f.data_offset()));
  const size_t data = size > f.data_offset() ? size - f.data_offset() : 0;
  constexpr size_t kWindow = 4096, kWindows = 64;
  for (size_t w = 0; w < kWindows && data > 0; ++w) {
    const size_t at =
        f.data_offset() + (data > kWindow ? (data - kWindow) / (kWindows - 1) * w : 0);
    h = fnv1a(bytes + at, std::min(kWindow, size - at), h);
  }
  char buf[96];
  std::snprintf(buf, sizeof buf, "model %zu bytes, hash %016llx", size, (unsigned long long)h);
  return buf;
}

Result<server::ServedModel> load_model(const ServeOptions& o) {
  SLUICE_ASSIGN_OR_RETURN(std::unique_ptr<EngineSession> session,
                          open_engine_session(o.model, o.engine));
  std::shared_ptr<EngineSession> s(std::move(session));
  server::ServedModel m;
  m.engine = s->engine.get();
  m.tokenizer = &s->tokenizer;
  m.n_vocab = int32_t(s->model.config().n_vocab);
  const GgufFile& f = s->model.file();
  if (f.has("tokenizer.chat_template")) {
    SLUICE_ASSIGN_OR_RETURN(m.chat_template, f.get<std::string>("tokenizer.chat_template"));
  }
  m.name = model_stem(o.model);
  m.kv_model_id = kv_model_id(f);
  m.tp = s->model.shard().tp_size;
  const ModelConfig& c = s->model.config();
  m.pooling = c.pooling;
  m.embedding_width = c.pooling == Pooling::kRank ? c.n_cls_out : c.n_embd;
  if (!o.server.embedding && (c.pooling != Pooling::kNone || !c.causal)) {
    return make_error("'", o.model, "' is an embedding model (", c.arch_name, ", pooling ",
                      pooling_name(c.pooling), "); start sluice serve with --embedding");
  }
  if (o.server.embedding && (o.engine.tp > 1 || o.engine.pp > 1)) {
    return make_error("--embedding with --tp or --pp is not supported");
  }
  m.owner = std::move(s);
  return m;
}

Status run_serve(const ServeOptions& o) {
  // Signals are taken synchronously by this thread; every thread started below inherits the mask.
  sigset_t sigs;
  sigemptyset(&sigs);
  sigaddset(&sigs, SIGINT);
  sigaddset(&sigs, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &sigs, nullptr);
  raise_fd_limit();
#if defined(__GLIBC__)
  // glibc gives each new thread its own arena up to 8 x cores; hundreds of mostly idle
  // connection threads then strand ~128 KiB apiece after a burst. Four arenas serve the
  // handlers (they allocate little) and let memory return when the burst is over.
  mallopt(M_ARENA_MAX, 4);
#endif

  server::ServerConfig cfg = o.server;
  cfg.http.max_threads = o.http_threads;
  if (!o.chat_template_file.empty()) {
    std::ifstream in(o.chat_template_file, std::ios::binary);
    std::stringstream ss;
    ss << in.rdbuf();
    if (!in || ss.str().empty()) {
      return make_error("cannot read the chat template '", o.chat_template_file, "'");
    }
    cfg.chat_template = ss.str();
  }
  server::Server srv(cfg);
  SLUICE_ASSIGN_OR_RETURN(int port, srv.start([&o] { return load_model(o); }));
  std::fprintf(stderr,
               "sluice serve: listening on http://%s:%d (loading %s; kernels %s; role %s)\n",
               cfg.host.c_str(), port, o.model.c_str(), matmul_isa_description().c_str(),
               server::serve_role_name(cfg.kv.role));

  bool announced = false;
  while (true) {
    if (wait_signal(sigs, 100)) break;
    if (announced) continue;
    if (std::optional<Status> st = srv.load_status()) {
      if (!st->ok()) {
        srv.shutdown(0);
        return make_error("cannot load '", o.model, "': ", st->message());
      }
      std::string names;
      for (const std::string& n : cfg.served_model_names)
        names += (names.empty() ? "'" : ", '") + n + "'";
      std::fprintf(stderr, "sluice serve: ready, serving %s\n",
                   names.empty() ? ("'" + model_stem(o.model) + "'").c_str() : names.c_str());
      if (const int kv_port = srv.kv_transfer_port()) {
        std::fprintf(stderr, "sluice serve: K/V transfer port %s:%d\n",
                     cfg.kv.transfer_host.c_str(), kv_port);
      }
      announced = true;
    }
  }

  std::fprintf(stderr,
               "sluice serve: shutting down (%lld generations running; waiting up to %.0f s)\n",
               (long long)srv.n_active(), o.shutdown_timeout_s);
  // --tp / --pp: the signal came through mpirun to every rank, or a rank died; the other
  // ranks are gone or going, so what runs fails now with that error, and the exit is non-zero.
  const bool ranks_stopped = interrupt_ranks();
  if (ranks_stopped) {
    std::fprintf(stderr,
                 "sluice serve: the MPI ranks are stopping: failing the %lld "
                 "generations in flight\n",
                 (long long)srv.n_active());
  }
  srv.stop_accepting();
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::duration<double>(o.shutdown_timeout_s);
  while (srv.n_active() > 0 && std::chrono::steady_clock::now() < deadline) {
    if (wait_signal(sigs, 50)) break;  // a second signal: cancel now
  }
  if (srv.n_active() > 0) {
    std::fprintf(stderr, "sluice serve: cancelling %lld generations\n", (long long)srv.n_active());
  }
  srv.cancel_all();
  srv.join();
  std::fprintf(stderr, "sluice serve: stopped\n");
  if (ranks_stopped) return make_error("the MPI job was stopped (a signal or a dead rank)");
  return {};
}

}  // namespace

void register_serve(CLI::App& app, int& exit_code) {
  auto o = std::make_shared<ServeOptions>();
  CLI::App* cmd = app.add_subcommand("serve", "Serve a model over an OpenAI-compatible HTTP API");
  cmd->add_option("model", o->model, "GGUF file or hf://OWNER/REPO/FILE.gguf")->required();
  cmd->add_option("--host", o->server.host, "Address to bind (0.0.0.0: every interface)")
      ->capture_default_str();
  cmd->add_option("--port", o->server.port, "TCP port (0: any free port)")->capture_default_str();
  cmd->add_option("--api-key", o->server.api_key, "Require 'Authorization: Bearer KEY' on /v1/*")
      ->envname("SLUICE_API_KEY");
  cmd->add_flag_callback(
      "--no-webui", [o] { o->server.webui = false; },
      "Do not serve the web app (chat and dashboard) at /");
  cmd->add_option("--max-queue", o->server.max_queue,
                  "Generations waiting for the scheduler at most; more get 429 (0: unbounded)")
      ->capture_default_str();
  cmd->add_option("--served-model-name", o->server.served_model_names,
                  "Model names requests may give (answers carry the first; default: the file "
                  "stem of MODEL, e.g. stories260K)");
  cmd->add_option("--chat-template", o->chat_template_file,
                  "Jinja chat template file (default: the model's tokenizer.chat_template)");
  cmd->add_option("--reasoning-format", o->server.reasoning_format,
                  "Reasoning models: auto (split the thinking from the answer: reasoning_content, "
                  "Responses reasoning items, Anthropic thinking blocks) or none (leave it in the "
                  "text)")
      ->check(CLI::IsMember({"auto", "none"}))
      ->capture_default_str();
  cmd->add_option("--reasoning-budget", o->server.reasoning_budget,
                  "Thinking tokens at most before the answer is forced (-1: no budget; requests "
                  "may set reasoning_budget or thinking.budget_tokens)")
      ->check(CLI::Range(-1, 1 << 30))
      ->capture_default_str();
  cmd->add_option("--http-threads", o->http_threads,
                  "Concurrent connections served at most (one thread each)")
      ->capture_default_str();
  cmd->add_option("--shutdown-timeout", o->shutdown_timeout_s,
                  "Seconds running generations may finish after SIGTERM/SIGINT")
      ->capture_default_str();
  cmd->add_option("--role", o->role,
                  "Disaggregated serving: prefill (computes prompts for decode workers), decode "
                  "(pulls their K/V), or both")
      ->check(CLI::IsMember({"both", "prefill", "decode"}))
      ->capture_default_str();
  cmd->add_option("--kv-transfer-host", o->server.kv.transfer_host,
                  "Address the K/V transfer port binds (prefill role)")
      ->capture_default_str();
  cmd->add_option("--kv-transfer-advertise", o->server.kv.transfer_advertise,
                  "Host decode workers are told to pull from (default: the bind address)");
  cmd->add_option("--kv-transfer-port", o->server.kv.transfer_port,
                  "K/V transfer TCP port (prefill role; 0: any free port; with --role both it "
                  "turns disaggregated serving on: prefilling for others and pulling)");
  cmd->add_option("--kv-transfer-timeout", o->server.kv.transfer_timeout_s,
                  "Seconds a pull may take, connection included (decode role)")
      ->capture_default_str();
  cmd->add_option("--kv-transfer-ttl", o->server.kv.transfer_ttl_s,
                  "Seconds pinned prompt blocks wait to be pulled before they are released")
      ->capture_default_str();
  cmd->add_option("--kv-transfer-fail", o->kv_transfer_fail,
                  "A failed pull: fail the request (error) or compute the prompt here (recompute)")
      ->check(CLI::IsMember({"error", "recompute"}))
      ->capture_default_str();
  cmd->add_option("--kv-disk-dir", o->server.kv.disk_dir,
                  "Directory of the disk K/V tier: blocks of the prefix cache are kept there "
                  "across evictions and restarts");
  cmd->add_option("--kv-disk-gb", o->server.kv.disk_gb,
                  "Size bound of the disk tier in GiB (with --kv-disk-dir)")
      ->capture_default_str();
  cmd->add_flag("--embedding", o->server.embedding,
                "Serve an embedding model: /v1/embeddings, /v1/rerank (generation routes refuse)");
  cmd->add_option("--pooling", o->engine.pooling,
                  "Embedding pooling: mean, cls, last or rank (default: the model's "
                  "<arch>.pooling_type)");
  add_engine_options(cmd, o->engine);
  cmd->callback([o, &exit_code] {
    if (auto code = take_rank("serve", o->model, o->engine)) {
      exit_code = *code;
      return;
    }
    if (o->server.port < 0 || o->server.port > 65535 || o->server.max_queue < 0 ||
        o->http_threads < 1 || o->shutdown_timeout_s < 0) {
      exit_code = report_error("serve",
                               "--port 0..65535, --max-queue >= 0, --http-threads >= 1, "
                               "--shutdown-timeout >= 0");
      return;
    }
    server::KvTierConfig& kv = o->server.kv;
    kv.role = *server::parse_serve_role(o->role);
    kv.on_fail = *server::parse_kv_transfer_fail(o->kv_transfer_fail);
    if (kv.transfer_port < -1 || kv.transfer_port > 65535 || !(kv.transfer_timeout_s > 0) ||
        !(kv.transfer_ttl_s > 0) || kv.transfer_timeout_s > 3600 || kv.transfer_ttl_s > 86400) {
      exit_code = report_error("serve",
                               "--kv-transfer-port 0..65535, --kv-transfer-timeout in (0, 3600], "
                               "--kv-transfer-ttl in (0, 86400]");
      return;
    }
    if (!kv.disk_dir.empty() && !(kv.disk_gb > 0 && kv.disk_gb < 1e6)) {
      exit_code = report_error("serve", "--kv-disk-dir needs --kv-disk-gb > 0");
      return;
    }
    if (kv.disk_dir.empty() && kv.disk_gb != 0) {
      exit_code = report_error("serve", "--kv-disk-gb needs --kv-disk-dir");
      return;
    }
    Status st = run_serve(*o);
    if (!st.ok()) exit_code = report_error("serve", st.message());
  });
}

}  // namespace sluice::cli
