// Helpers of the server tests: an in-process server over stories260K on an ephemeral port,
// `sluice serve` as a child process, small HTTP/SSE clients over real sockets, and /metrics
// parsing.
#pragma once

#include <arpa/inet.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <httplib.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "base/log.h"
#include "engine/engine.h"
#include "executor/cpu_executor.h"
#include "model/model.h"
#include "server/server.h"
#include "test_util.h"

namespace sluice::test {

using json = nlohmann::json;

inline constexpr const char* kStoriesModel = "testdata/models/stories260K.gguf";
inline constexpr const char* kStoriesGolden = "testdata/models/stories260K.once_upon_a_time.json";
// A minimal chat template for stories260K (which has none): BOS, then the contents.
inline const std::string kPlainTemplate =
    "{{ bos_token }}{% for message in messages %}{{ message['content'] }}{% endfor %}";

struct Golden {
  std::string prompt;
  std::vector<int32_t> prompt_tokens;
  std::vector<int32_t> greedy_tokens;
  std::string greedy_text;
};

inline Golden load_golden(const std::string& path) {
  std::ifstream f(path);
  json j = json::parse(f);
  return Golden{j["prompt"], j["prompt_tokens"], j["greedy_tokens"], j["greedy_text"]};
}

// Model + tokenizer + executor + engine, owned together (the engine refers to the others).
struct LoadedStories {
  Model model;
  Tokenizer tokenizer;
  std::unique_ptr<CpuExecutor> executor;
  std::unique_ptr<Engine> engine;
};

// A ServerConfig with some fields set: make_config([](auto& c) { c.api_key = "k"; }).
template <class F>
server::ServerConfig make_config(F set) {
  server::ServerConfig c;
  set(c);
  return c;
}

struct EngineKnobs {
  // Time forward passes against the roofline of this (made-up) machine.
  std::optional<MachineRoofline> roofline;
  int n_ctx = 512;
  int n_blocks = 512;
  int max_seqs = 64;
};

inline server::ModelLoader stories_loader(const std::string& path, EngineKnobs k = {}) {
  return [path, k]() -> Result<server::ServedModel> {
    set_log_level(LogLevel::kError);  // stories260K runs beyond its trained context: expected here
    SLUICE_ASSIGN_OR_RETURN(
        Model model, Model::load(path, {.n_ctx = k.n_ctx, .allow_context_beyond_trained = true}));
    SLUICE_ASSIGN_OR_RETURN(Tokenizer tok, Tokenizer::from_gguf(model.file()));
    auto s = std::make_shared<LoadedStories>(
        LoadedStories{std::move(model), std::move(tok), nullptr, nullptr});
    CpuExecutorOptions eo;
    eo.n_threads = 1;
    eo.n_blocks = k.n_blocks;
    SLUICE_ASSIGN_OR_RETURN(s->executor, CpuExecutor::create(s->model, eo));
    EngineConfig ec;
    ec.n_ctx = k.n_ctx;
    ec.scheduler.max_seqs = k.max_seqs;
    if (k.roofline) ec.cost_model = make_step_cost_model(s->model, *k.roofline, KvType::kF16);
    SLUICE_ASSIGN_OR_RETURN(s->engine, Engine::create(s->tokenizer, *s->executor, ec));
    server::ServedModel m;
    m.engine = s->engine.get();
    m.tokenizer = &s->tokenizer;
    m.n_vocab = int32_t(s->model.config().n_vocab);
    m.name = "stories260K";
    m.owner = s;
    return m;
  };
}

struct HttpResult {
  int status = -1;
  std::string body;
  httplib::Headers headers;
  // The body as JSON (discarded if it is not), parsed once and owned by this result.
  const json& j() const {
    if (!parsed) parsed = json::parse(body, nullptr, false);
    return *parsed;
  }
  mutable std::optional<json> parsed;
};

inline HttpResult http_call(int port, const std::string& method, const std::string& path,
                            const std::string& body = "", const httplib::Headers& headers = {}) {
  httplib::Client cli("127.0.0.1", port);
  cli.set_read_timeout(60, 0);
  httplib::Result r = method == "GET"    ? cli.Get(path, headers)
                      : method == "POST" ? cli.Post(path, headers, body, "application/json")
                      : method == "PUT"  ? cli.Put(path, headers, body, "application/json")
                                         : cli.Delete(path, headers, body, "application/json");
  HttpResult out;
  if (!r) return out;
  out.status = r->status;
  out.body = r->body;
  out.headers = r->headers;
  return out;
}

inline HttpResult post(int port, const std::string& path, const json& body,
                       const httplib::Headers& h = {}) {
  return http_call(port, "POST", path, body.dump(), h);
}

// A streamed response: the JSON of every `data:` event before [DONE].
struct SseResult {
  int status = -1;
  std::vector<json> events;
  bool done = false;  // saw data: [DONE]
  std::string raw;
};

inline SseResult parse_sse(const std::string& raw) {
  SseResult out;
  out.raw = raw;
  std::istringstream in(raw);
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("data: ", 0) != 0) continue;
    const std::string data = line.substr(6);
    if (data == "[DONE]") {
      out.done = true;
      continue;
    }
    out.events.push_back(json::parse(data, nullptr, false));
  }
  return out;
}

inline SseResult stream(int port, const std::string& path, const json& body) {
  HttpResult r = post(port, path, body);
  SseResult s = parse_sse(r.body);
  s.status = r.status;
  return s;
}

// Concatenated text of choice `index` over chat or completion chunks.
inline std::string streamed_text(const SseResult& s, int index = 0) {
  std::string text;
  for (const json& e : s.events) {
    if (!e.contains("choices")) continue;
    for (const json& c : e["choices"]) {
      if (c["index"] != index) continue;
      if (c.contains("text")) text += c["text"].get<std::string>();
      if (c.contains("delta") && c["delta"].contains("content") &&
          c["delta"]["content"].is_string()) {
        text += c["delta"]["content"].get<std::string>();
      }
    }
  }
  return text;
}

inline std::string streamed_finish(const SseResult& s, int index = 0) {
  std::string f;
  for (const json& e : s.events) {
    if (!e.contains("choices")) continue;
    for (const json& c : e["choices"]) {
      if (c["index"] == index && c["finish_reason"].is_string()) f = c["finish_reason"];
    }
  }
  return f;
}

// Value of a Prometheus sample: the line `name value` or `name{labels} value` (labels given
// exactly, e.g. `{finish_reason="abort"}`); -1 when absent.
inline double metric(const std::string& text, const std::string& name_and_labels) {
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(name_and_labels + " ", 0) == 0)
      return std::stod(line.substr(name_and_labels.size() + 1));
  }
  return -1;
}

inline std::string metrics_text(int port) {
  return http_call(port, "GET", "/metrics").body;
}

// --- raw sockets ------------------------------------------------------------------------------

inline int connect_local(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(uint16_t(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

inline bool send_all(int fd, const std::string& s) {
  size_t done = 0;
  while (done < s.size()) {
    const ssize_t n = ::send(fd, s.data() + done, s.size() - done, MSG_NOSIGNAL);
    if (n <= 0) return false;
    done += size_t(n);
  }
  return true;
}

inline std::string http_request(const std::string& method, const std::string& path,
                                const std::string& body, const std::string& extra_headers = "") {
  return method + " " + path +
         " HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n" + extra_headers +
         "Content-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body;
}

// Reads until `until` appears in what was read, EOF, or the timeout. Returns what was read.
inline std::string recv_until(int fd, const std::string& until, int timeout_ms = 10000) {
  std::string got;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  char buf[4096];
  while (got.find(until) == std::string::npos) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) break;
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, int(left.count())) <= 0) break;
    const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    if (n <= 0) break;
    got.append(buf, size_t(n));
  }
  return got;
}

// --- in-process server ------------------------------------------------------------------------

struct TestServer {
  std::unique_ptr<server::Server> server;
  int port = 0;

  // Starts on an ephemeral port and waits until the model is loaded.
  static std::unique_ptr<TestServer> start(const std::string& model_path,
                                           server::ServerConfig cfg = {}, EngineKnobs knobs = {}) {
    auto t = std::make_unique<TestServer>();
    cfg.port = 0;
    t->server = std::make_unique<server::Server>(cfg);
    Result<int> port = t->server->start(stories_loader(model_path, knobs));
    EXPECT_TRUE(port.ok()) << port.message();
    if (!port.ok()) return nullptr;
    t->port = *port;
    Status st = t->server->wait_ready();
    EXPECT_TRUE(st.ok()) << st.message();
    return st.ok() ? std::move(t) : nullptr;
  }
};

// --- `sluice serve` as a child process --------------------------------------------------------

inline std::string sluice_path() {
  return std::string(SLUICE_BINARY_DIR) + "/src/cli/sluice";
}

// How ServeProcess::start runs the child beyond its arguments.
struct ChildOptions {
  std::string command = "serve";  // the subcommand: serve, or router (it prints the same line)
  // The child's SLUICE_CACHE. None by default: the host's measured `sluice bench --roofline`
  // ceilings would change what the engine's cost model decides (speculation gating), so results
  // would depend on the host. A test that needs the roofline on /metrics writes its own there.
  std::string cache_dir = "/nonexistent/sluice-test-cache";
  // More environment for the child: {name, value} (e.g. a test hook's variable).
  std::vector<std::pair<std::string, std::string>> env{};
};

struct ServeProcess {
  pid_t pid = -1;
  int port = 0;
  int err_fd = -1;  // the child's stderr
  std::string log;

  ~ServeProcess() {
    if (pid > 0) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, nullptr, 0);
    }
    if (err_fd >= 0) ::close(err_fd);
  }

  // Starts `sluice serve MODEL ARGS... --port 0` (`o.command` instead of serve; the roofline
  // cache of `o.cache_dir`) and waits for "listening on" and /health 200.
  static std::unique_ptr<ServeProcess> start(const std::vector<std::string>& args,
                                             const ChildOptions& o = {}) {
    int pipefd[2];
    if (::pipe(pipefd) != 0) return nullptr;
    auto p = std::make_unique<ServeProcess>();
    std::vector<std::string> argv_s = {sluice_path(), o.command};
    argv_s.insert(argv_s.end(), args.begin(), args.end());
    argv_s.push_back("--port");
    argv_s.push_back("0");
    bool mpi = false;
    for (const std::string& a : args) mpi = mpi || runs_mpi_ranks(a);
    const std::string asan = mpi ? asan_options_for_mpi_ranks() : std::string();
    p->pid = ::fork();
    if (p->pid == 0) {
      ::setenv("SLUICE_CACHE", o.cache_dir.c_str(), 1);
      for (const auto& [name, value] : o.env) ::setenv(name.c_str(), value.c_str(), 1);
      if (!asan.empty()) ::setenv("ASAN_OPTIONS", asan.c_str(), 1);
      ::dup2(pipefd[1], 2);
      ::close(pipefd[0]);
      ::close(pipefd[1]);
      std::vector<char*> argv;
      for (std::string& a : argv_s) argv.push_back(a.data());
      argv.push_back(nullptr);
      ::execv(argv[0], argv.data());
      ::_exit(127);
    }
    ::close(pipefd[1]);
    p->err_fd = pipefd[0];
    const std::string marker = "listening on http://127.0.0.1:";
    p->log = recv_pipe_until(p->err_fd, marker, "\n", 60000);
    const size_t at = p->log.find(marker);
    if (at == std::string::npos) {
      ADD_FAILURE() << "sluice " << o.command << " did not start: " << p->log;
      return nullptr;
    }
    p->port = std::atoi(p->log.c_str() + at + marker.size());
    const int port = p->port;
    if (!eventually([port] { return http_call(port, "GET", "/health").status == 200; },
                    std::chrono::milliseconds(60000))) {
      ADD_FAILURE() << "sluice " << o.command << " never became ready";
      return nullptr;
    }
    return p;
  }

  // Reads the child's stderr until `a` and then `b` after it appeared (or timeout).
  static std::string recv_pipe_until(int fd, const std::string& a, const std::string& b,
                                     int timeout_ms) {
    std::string got;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
    char buf[1024];
    while (true) {
      const size_t at = got.find(a);
      if (at != std::string::npos && got.find(b, at + a.size()) != std::string::npos) break;
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0) break;
      pollfd pf{fd, POLLIN, 0};
      if (::poll(&pf, 1, int(left.count())) <= 0) break;
      const ssize_t n = ::read(fd, buf, sizeof buf);
      if (n <= 0) break;
      got.append(buf, size_t(n));
    }
    return got;
  }

  // A number of /proc/<pid>/status ("VmRSS:", "Threads:"), or -1.
  long status_value(const std::string& name) const {
    std::ifstream f("/proc/" + std::to_string(pid) + "/status");
    std::string key;
    while (f >> key) {
      if (key == name) {
        long v = 0;
        f >> v;
        return v;
      }
      std::string rest;
      std::getline(f, rest);
    }
    return -1;
  }
  // Resident set size in KiB (VmRSS).
  long rss_kib() const { return status_value("VmRSS:"); }
  long n_threads() const { return status_value("Threads:"); }

  // Waits for the child to exit; its exit code, or -1 (signal / timeout).
  int wait_exit(int timeout_ms) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
    while (std::chrono::steady_clock::now() < deadline) {
      int status = 0;
      const pid_t r = ::waitpid(pid, &status, WNOHANG);
      if (r == pid) {
        pid = -1;
        return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return -1;
  }

  std::string drain_log() {
    log += recv_pipe_until(err_fd, "\x01", "\x01", 200);
    return log;
  }
};

}  // namespace sluice::test

#define SLUICE_REQUIRE_SERVER(var, ...)                                          \
  SLUICE_REQUIRE_SHARED(var##_model_path, ::sluice::test::kStoriesModel);        \
  auto var = ::sluice::test::TestServer::start(var##_model_path, ##__VA_ARGS__); \
  ASSERT_TRUE(var)
