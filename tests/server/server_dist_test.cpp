// `sluice serve --tp 2` (and --pp 2) as users run it: the server relaunches itself under mpirun
// (rank 0 runs the engine and HTTP, rank 1 its shard), serves the text one process serves, and when
// a rank dies the requests in flight fail with an error and the job exits non-zero within seconds.
#include <dirent.h>

#include <fstream>

#include "server_test_util.h"

namespace sluice::test {
namespace {

// The pids of `parent`'s children (the ranks mpirun started).
std::vector<pid_t> children_of(pid_t parent) {
  std::vector<pid_t> out;
  DIR* d = ::opendir("/proc");
  if (!d) return out;
  while (dirent* e = ::readdir(d)) {
    const pid_t pid = pid_t(std::atoi(e->d_name));
    if (pid <= 0) continue;
    std::ifstream f("/proc/" + std::to_string(pid) + "/stat");
    std::string stat;
    std::getline(f, stat);
    const size_t close = stat.rfind(')');
    if (close == std::string::npos) continue;
    char state = 0;
    int ppid = 0;
    if (std::sscanf(stat.c_str() + close + 1, " %c %d", &state, &ppid) == 2 && ppid == parent) {
      out.push_back(pid);
    }
  }
  ::closedir(d);
  return out;
}

// The MPI rank of a process started by mpirun (-1: none).
int mpi_rank_of(pid_t pid) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/environ", std::ios::binary);
  std::string var;
  while (std::getline(f, var, '\0')) {
    if (var.rfind("OMPI_COMM_WORLD_RANK=", 0) == 0) return std::atoi(var.c_str() + 21);
  }
  return -1;
}

TEST(ServeTensorParallel, ServesTheTextOfOneProcess) {
  SLUICE_REQUIRE_SHARED(model, kStoriesModel);
  SLUICE_REQUIRE_SHARED(golden_path, kStoriesGolden);
  const Golden g = load_golden(golden_path);
  for (const char* flag : {"--tp", "--pp"}) {
    SCOPED_TRACE(flag);
    auto p = ServeProcess::start({model, "-c", "512", "-t", "1", flag, "2"});
    ASSERT_TRUE(p);
    const json body = {{"prompt", "Once upon a time"},
                       {"max_tokens", int(g.greedy_tokens.size())},
                       {"temperature", 0}};
    const HttpResult whole = post(p->port, "/v1/completions", body);
    ASSERT_EQ(whole.status, 200) << whole.body;
    EXPECT_EQ(json::parse(whole.body)["choices"][0]["text"], g.greedy_text);
    // Several streams at once: one ragged batch on both ranks.
    json sbody = body;
    sbody["stream"] = true;
    sbody["n"] = 3;
    const SseResult s = stream(p->port, "/v1/completions", sbody);
    ASSERT_TRUE(s.done);
    for (int i = 0; i < 3; ++i) EXPECT_EQ(streamed_text(s, i), g.greedy_text) << i;
    const std::string log = p->drain_log();
    EXPECT_NE(
        log.find(std::string(flag) == "--tp" ? "tensor parallel: 2 ranks, pipeline: 1 stages"
                                             : "tensor parallel: 1 ranks, pipeline: 2 stages"),
        std::string::npos)
        << log;
    if (std::string(flag) == "--pp") {
      // Stages balanced by weight bytes; stories260K's output is small: 3 + 2 layers.
      EXPECT_NE(log.find("pipeline stages: layers 0-2 ("), std::string::npos) << log;
      EXPECT_NE(log.find("layers 3-4 + output ("), std::string::npos) << log;
    }
  }
}

// sluice_comm_* of /metrics: rank 0's seconds in messages between ranks (measured), the link
// model's price of the same steps (predicted) and the bytes sent. (The engine records steps
// against a roofline, so the lines exist only with a `sluice bench --roofline` cache.)
struct CommCounters {
  double measured = -1, predicted = -1, bytes = -1;  // -1: absent
};

CommCounters comm_counters(int port) {
  const std::string m = metrics_text(port);
  return {metric(m, "sluice_comm_seconds_total{kind=\"measured\"}"),
          metric(m, "sluice_comm_seconds_total{kind=\"predicted\"}"),
          metric(m, "sluice_comm_bytes_total")};
}

// With --tp 2 each step's all-reduces count in all three, and a second request adds to each.
// One process sends no messages: 0 in each line; without a roofline cache no line at all.
TEST(ServeTensorParallel, CommunicationCountersOnMetrics) {
  SLUICE_REQUIRE_SHARED(model, kStoriesModel);
  TempDir cache;
  ASSERT_TRUE(write_roofline_cache(cache.path("roofline.json"), 100));
  const ChildOptions with_roofline{.cache_dir = cache.path("")};
  const json body = {{"prompt", "Once upon a time"}, {"max_tokens", 8}, {"temperature", 0}};
  {
    auto tp = ServeProcess::start({model, "-c", "512", "-t", "1", "--tp", "2"}, with_roofline);
    ASSERT_TRUE(tp);
    ASSERT_EQ(post(tp->port, "/v1/completions", body).status, 200);
    CommCounters first;
    EXPECT_TRUE(eventually([&] {
      first = comm_counters(tp->port);
      return first.measured > 0 && first.predicted > 0 && first.bytes > 0;
    })) << metrics_text(tp->port);
    ASSERT_EQ(post(tp->port, "/v1/completions", body).status, 200);
    CommCounters second;
    EXPECT_TRUE(eventually([&] {
      second = comm_counters(tp->port);
      return second.measured > first.measured && second.predicted > first.predicted &&
             second.bytes > first.bytes;
    })) << metrics_text(tp->port);
    // The same steps again (greedy, same prompt, no prefix hit below a block): the same bytes.
    EXPECT_EQ(second.bytes, 2 * first.bytes);
  }
  {
    auto one = ServeProcess::start({model, "-c", "512", "-t", "1"}, with_roofline);
    ASSERT_TRUE(one);
    ASSERT_EQ(post(one->port, "/v1/completions", body).status, 200);
    const CommCounters c = comm_counters(one->port);
    EXPECT_EQ(c.measured, 0);
    EXPECT_EQ(c.predicted, 0);
    EXPECT_EQ(c.bytes, 0);
  }
  auto bare = ServeProcess::start({model, "-c", "512", "-t", "1", "--tp", "2"});
  ASSERT_TRUE(bare);
  ASSERT_EQ(post(bare->port, "/v1/completions", body).status, 200);
  EXPECT_EQ(metrics_text(bare->port).find("sluice_comm_"), std::string::npos);
}

// A hybrid (qwen35: Gated DeltaNet + gated attention) over tensor-parallel ranks: each rank holds
// its linear-attention heads' part of every sequence's recurrent state; three streams of one
// prompt in the same steps and a later request of it all get the text one process serves.
TEST(ServeTensorParallel, HybridServesTheTextOfOneProcess) {
  SLUICE_REQUIRE_SHARED(model, "testdata/models/arch/qwen35.gguf");
  const json body = {{"prompt", "Every morning before school, Maria walked her grandfather's dog"},
                     {"max_tokens", 12},
                     {"temperature", 0}};
  std::string want;
  {
    auto one = ServeProcess::start({model, "-c", "256", "-t", "1"});
    ASSERT_TRUE(one);
    const HttpResult r = post(one->port, "/v1/completions", body);
    ASSERT_EQ(r.status, 200) << r.body;
    want = json::parse(r.body)["choices"][0]["text"];
  }
  ASSERT_FALSE(want.empty());
  auto p = ServeProcess::start({model, "-c", "256", "-t", "1", "--tp", "2"});
  ASSERT_TRUE(p);
  json sbody = body;
  sbody["stream"] = true;
  sbody["n"] = 3;
  const SseResult s = stream(p->port, "/v1/completions", sbody);
  ASSERT_TRUE(s.done);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(streamed_text(s, i), want) << i;
  const HttpResult again = post(p->port, "/v1/completions", body);
  ASSERT_EQ(again.status, 200) << again.body;
  EXPECT_EQ(json::parse(again.body)["choices"][0]["text"], want);
  const std::string log = p->drain_log();
  EXPECT_NE(log.find("tensor parallel: 2 ranks, pipeline: 1 stages"), std::string::npos) << log;
}

// The same hybrid's saved states over tensor-parallel ranks (each rank exports and imports its
// heads' part): a --tp 2 prefill worker hands a prompt's blocks and state to a --tp 2 decode
// worker, which computes only the tail; a --tp 2 server with a disk tier resumes from the states
// on disk after a SIGKILL. Both give the text one process serves.
TEST(ServeTensorParallel, HybridStatesMoveOverRanks) {
  SLUICE_REQUIRE_SHARED(model, "testdata/models/arch/qwen35.gguf");
  const std::string prompt =
      "Every morning before school, Maria walked her grandfather's dog along the river, past the "
      "bakery and the old mill, and every morning the dog stopped at the same bench to watch the "
      "ducks.";
  const json body = {{"prompt", prompt}, {"max_tokens", 12}, {"temperature", 0}};
  std::string want;
  {
    auto one = ServeProcess::start({model, "-c", "256", "-t", "1", "--kv-cache-gb", "0.1"});
    ASSERT_TRUE(one);
    const HttpResult r = post(one->port, "/v1/completions", body);
    ASSERT_EQ(r.status, 200) << r.body;
    want = json::parse(r.body)["choices"][0]["text"];
  }
  const std::vector<std::string> base = {model,  "-c", "256",           "-t", "1",
                                         "--tp", "2",  "--kv-cache-gb", "0.1"};
  const auto with = [&](std::vector<std::string> more) {
    std::vector<std::string> a = base;
    a.insert(a.end(), more.begin(), more.end());
    return a;
  };
  {
    auto prefill = ServeProcess::start(with({"--role", "prefill"}));
    auto decode = ServeProcess::start(with({"--role", "decode"}));
    ASSERT_TRUE(prefill && decode);
    json pre = body;
    pre["max_tokens"] = 1;
    pre["kv_transfer_params"] = {{"do_remote_decode", true}};
    const HttpResult a = post(prefill->port, "/v1/completions", pre);
    ASSERT_EQ(a.status, 200) << a.body;
    json dec = body;
    dec["kv_transfer_params"] = json::parse(a.body)["kv_transfer_params"];
    const HttpResult b = post(decode->port, "/v1/completions", dec);
    ASSERT_EQ(b.status, 200) << b.body;
    const json j = json::parse(b.body);
    EXPECT_EQ(j["choices"][0]["text"], want);
    const int64_t n = j["usage"]["prompt_tokens"];
    ASSERT_GE(n, 33) << b.body;
    EXPECT_EQ(j["usage"]["prompt_tokens_details"]["cached_tokens"], (n - 1) / 16 * 16) << b.body;
    EXPECT_EQ(metric(metrics_text(decode->port), "sluice_kv_pulled_states_total"), 1);
  }
  TempDir tmp;
  const std::vector<std::string> disk = {"--kv-disk-dir", tmp.path("disk"), "--kv-disk-gb", "0.05"};
  {
    auto s = ServeProcess::start(with(disk));
    ASSERT_TRUE(s);
    const HttpResult a = post(s->port, "/v1/completions", body);
    ASSERT_EQ(a.status, 200) << a.body;
    EXPECT_EQ(json::parse(a.body)["choices"][0]["text"], want);
    const int port = s->port;
    ASSERT_TRUE(eventually(
        [port] {
          return metric(metrics_text(port), "sluice_kv_disk_state_writes_total") >= 1 &&
                 metric(metrics_text(port), "sluice_kv_disk_writes_total") >= 2;
        },
        std::chrono::milliseconds(30000)));
    // SIGKILL to the whole job: the ranks (rank 0 holds the disk tier's lock) and mpirun.
    const std::vector<pid_t> ranks = children_of(s->pid);
    for (pid_t r : ranks) ::kill(r, SIGKILL);
    ::kill(s->pid, SIGKILL);
    ::waitpid(s->pid, nullptr, 0);
    s->pid = -1;
    EXPECT_TRUE(eventually(
        [&ranks] {
          for (pid_t r : ranks) {
            std::ifstream f("/proc/" + std::to_string(r) + "/stat");
            std::string stat;
            std::getline(f, stat);
            const size_t close = stat.rfind(')');
            if (close != std::string::npos && close + 2 < stat.size() && stat[close + 2] != 'Z') {
              return false;
            }
          }
          return true;
        },
        std::chrono::milliseconds(10000)));
  }
  {
    auto s = ServeProcess::start(with(disk));
    ASSERT_TRUE(s);
    const HttpResult b = post(s->port, "/v1/completions", body);
    ASSERT_EQ(b.status, 200) << b.body;
    const json j = json::parse(b.body);
    EXPECT_EQ(j["choices"][0]["text"], want);
    const int64_t n = j["usage"]["prompt_tokens"];
    EXPECT_EQ(j["usage"]["prompt_tokens_details"]["cached_tokens"], (n - 1) / 16 * 16) << b.body;
    EXPECT_GE(metric(metrics_text(s->port), "sluice_kv_disk_loaded_states_total"), 1);
  }
}

TEST(ServeTensorParallel, DeadRankFailsTheRequestsAndExitsNonZero) {
  SLUICE_REQUIRE_SHARED(model, kStoriesModel);
  auto p = ServeProcess::start({model, "-c", "512", "-t", "1", "--tp", "2", "--max-seqs", "1"});
  ASSERT_TRUE(p);
  // A stream that would run for a long time: 64 choices of 400 tokens, one at a time.
  const int fd = connect_local(p->port);
  ASSERT_GE(fd, 0);
  const json body = {{"prompt", "Once upon a time"},
                     {"max_tokens", 400},
                     {"ignore_eos", true},
                     {"n", 64},
                     {"stream", true}};
  send_all(fd, http_request("POST", "/v1/completions", body.dump()));
  const std::string first = recv_until(fd, "data: ");
  ASSERT_NE(first.find("200 OK"), std::string::npos) << first;
  // p->pid is mpirun (sluice re-executed itself); kill rank 1.
  pid_t worker = -1;
  for (pid_t c : children_of(p->pid)) {
    if (mpi_rank_of(c) == 1) worker = c;
  }
  ASSERT_GT(worker, 0) << "no rank 1 among mpirun's children";
  const auto t0 = std::chrono::steady_clock::now();
  ::kill(worker, SIGKILL);
  // The stream ends (an error event, or the connection closes), never as a finished choice.
  const std::string rest = recv_until(fd, "data: [DONE]", 20000);
  ::close(fd);
  const SseResult s = parse_sse(first + rest);
  for (int i = 0; i < 64; ++i) EXPECT_NE(streamed_finish(s, i), "length") << i;
  std::string error;
  for (const json& e : s.events) {
    if (e.is_object() && e.contains("error")) error = e["error"].dump();
  }
  // Rank 0 notices the dead pid within ~0.1 s; on a loaded host mpirun's teardown signal may
  // come first, and the requests fail with that instead.
  EXPECT_TRUE(error.find("rank 1 (pid " + std::to_string(worker) + ") exited") !=
                  std::string::npos ||
              error.find("the MPI job is being stopped") != std::string::npos)
      << error;

  const int code = p->wait_exit(20000);
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_NE(code, 0);
  EXPECT_LT(secs, 15.0);
  const std::string log = p->drain_log();
  EXPECT_NE(log.find("the MPI job was stopped"), std::string::npos) << log;
  std::printf("[ dead rank ] job exited with %d %.1f s after rank 1 was killed\n", code, secs);
}

// SIGTERM to the job (mpirun forwards it to every rank, so the workers stop at once): rank 0 of a
// pipeline fails what is running with an error instead of waiting for it, and exits non-zero.
TEST(ServeTensorParallel, SigtermToAPipelineFailsWhatRunsAndExitsNonZero) {
  SLUICE_REQUIRE_SHARED(model, kStoriesModel);
  auto p = ServeProcess::start({model, "-c", "512", "-t", "1", "--pp", "2", "--max-seqs", "1"});
  ASSERT_TRUE(p);
  const int fd = connect_local(p->port);
  ASSERT_GE(fd, 0);
  const json body = {{"prompt", "Once upon a time"},
                     {"max_tokens", 400},
                     {"ignore_eos", true},
                     {"n", 64},
                     {"stream", true}};
  send_all(fd, http_request("POST", "/v1/completions", body.dump()));
  const std::string first = recv_until(fd, "data: ");
  ASSERT_NE(first.find("200 OK"), std::string::npos) << first;
  ::kill(p->pid, SIGTERM);  // mpirun
  const std::string rest = recv_until(fd, "data: [DONE]", 20000);
  ::close(fd);
  // The choices that finished before the signal did; the rest end with an error event.
  const SseResult s = parse_sse(first + rest);
  int finished = 0;
  for (int i = 0; i < 64; ++i) finished += streamed_finish(s, i) == "length";
  EXPECT_LT(finished, 64);
  bool error = false;
  for (const json& e : s.events) error = error || (e.is_object() && e.contains("error"));
  EXPECT_TRUE(error) << rest.substr(rest.size() > 2000 ? rest.size() - 2000 : 0);
  EXPECT_NE(p->wait_exit(20000), 0);
  const std::string log = p->drain_log();
  EXPECT_NE(log.find("the MPI ranks are stopping"), std::string::npos) << log;
}

}  // namespace
}  // namespace sluice::test
