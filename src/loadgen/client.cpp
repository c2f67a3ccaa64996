#include "loadgen/client.h"

#include <httplib.h>

#include <algorithm>
#include <cctype>

namespace sluice::loadgen {
namespace {

constexpr size_t kMaxErrorBody = 300;        // bytes of an error response quoted in a message
constexpr size_t kMaxErrorBodyKept = 65536;  // bytes of an error response kept for parsing

std::string clip(std::string s, size_t n = kMaxErrorBody) {
  while (!s.empty() && (s.back() == '\n' || s.back() == '\r' || s.back() == ' ')) s.pop_back();
  if (s.size() > n) s = s.substr(0, n) + "...";
  return s;
}

// The message of an OpenAI error object ({"error": {"message": ...}} or {"error": "..."}).
std::string error_message(const nlohmann::json& j) {
  const nlohmann::json& e = j.contains("error") ? j["error"] : j;
  if (e.is_string()) return e.get<std::string>();
  if (e.is_object() && e.contains("message") && e["message"].is_string())
    return e["message"].get<std::string>();
  return clip(j.dump());
}

}  // namespace

Result<BaseUrl> parse_base_url(const std::string& url) {
  std::string rest = url;
  std::string scheme = "http";
  if (const size_t at = rest.find("://"); at != std::string::npos) {
    scheme = rest.substr(0, at);
    rest = rest.substr(at + 3);
  }
  if (scheme != "http" && scheme != "https") {
    return make_error("--url '", url, "': the scheme must be http or https");
  }
  const size_t slash = rest.find('/');
  const std::string host_port = rest.substr(0, slash);
  std::string path = slash == std::string::npos ? "" : rest.substr(slash);
  while (!path.empty() && path.back() == '/') path.pop_back();
  if (host_port.empty() || host_port[0] == ':') return make_error("--url '", url, "' has no host");
  if (const size_t colon = host_port.rfind(':');
      colon != std::string::npos && host_port.back() != ']') {
    const std::string port = host_port.substr(colon + 1);
    if (port.empty() || port.size() > 5 ||
        !std::all_of(port.begin(), port.end(),
                     [](char c) { return std::isdigit(static_cast<unsigned char>(c)) != 0; }) ||
        std::stoi(port) < 1 || std::stoi(port) > 65535) {
      return make_error("--url '", url, "': bad port '", port, "'");
    }
  }
  return BaseUrl{scheme + "://" + host_port, path};
}

std::string endpoint_path(const BaseUrl& base, ApiKind kind) {
  const std::string leaf = kind == ApiKind::kChat ? "/chat/completions" : "/completions";
  const std::string& p = base.path_prefix;
  const bool has_v1 = p.size() >= 3 && p.compare(p.size() - 3, 3, "/v1") == 0;
  return p + (has_v1 ? "" : "/v1") + leaf;
}

ApiKind api_kind(const ClientConfig& config, const RequestSpec& spec) {
  switch (spec.send_as) {
    case SendAs::kTokenIds:
      return ApiKind::kCompletions;
    case SendAs::kChat:
      return ApiKind::kChat;
    case SendAs::kEndpoint:
      break;
  }
  return config.endpoint;
}

nlohmann::json request_body(const ClientConfig& config, const RequestSpec& spec) {
  nlohmann::json j;
  if (!config.model.empty()) j["model"] = config.model;
  if (spec.send_as == SendAs::kTokenIds) {
    j["prompt"] = spec.prompt_ids;
  } else if (api_kind(config, spec) == ApiKind::kChat) {
    j["messages"] = spec.messages.is_null()
                        ? nlohmann::json::array({{{"role", "user"}, {"content", spec.prompt}}})
                        : spec.messages;
  } else {
    j["prompt"] = spec.prompt;
  }
  j["max_tokens"] = spec.output_tokens;
  j["temperature"] = 0;
  j["ignore_eos"] = true;
  j["stream"] = true;
  j["stream_options"] = {{"include_usage", true}};
  return j;
}

void SseStream::feed(std::string_view bytes, double t_s) {
  if (head_.size() < kMaxErrorBody) head_.append(bytes.substr(0, kMaxErrorBody - head_.size()));
  if (done_ || failed()) return;
  buf_.append(bytes);
  size_t start = 0;
  while (!done_ && !failed()) {
    const size_t nl = buf_.find('\n', start);
    if (nl == std::string::npos) break;
    std::string_view line(buf_.data() + start, nl - start);
    start = nl + 1;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.empty()) {
      dispatch(t_s);
      continue;
    }
    if (line[0] == ':') continue;  // comment / keep-alive
    const size_t colon = line.find(':');
    const std::string_view field = line.substr(0, colon);
    std::string_view value =
        colon == std::string_view::npos ? std::string_view() : line.substr(colon + 1);
    if (!value.empty() && value[0] == ' ') value.remove_prefix(1);
    if (field == "data") {
      if (has_data_) data_ += '\n';
      data_.append(value);
      has_data_ = true;
    } else if (field == "event") {
      event_type_ = std::string(value);
    }  // id:, retry: and unknown fields are ignored, as the SSE spec says
  }
  buf_.erase(0, start);
}

void SseStream::dispatch(double t_s) {
  const bool has_data = has_data_;
  std::string data = std::move(data_);
  const std::string type = std::move(event_type_);
  data_.clear();
  event_type_.clear();
  has_data_ = false;
  if (!has_data) return;
  if (data == "[DONE]") {
    done_ = true;
    done_time_ = t_s;
    return;
  }
  const nlohmann::json j = nlohmann::json::parse(data, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) {
    error_ = "malformed SSE event (not a JSON object): " + clip(data, 120);
    return;
  }
  if (type == "error" || j.contains("error")) {
    error_ = "error event: " + error_message(j);
    return;
  }
  if (auto u = j.find("usage"); u != j.end() && u->is_object()) {
    if (auto c = u->find("completion_tokens"); c != u->end() && c->is_number_integer()) {
      completion_tokens_ = c->get<int64_t>();
    }
    if (auto p = u->find("prompt_tokens"); p != u->end() && p->is_number_integer()) {
      prompt_tokens_ = p->get<int64_t>();
    }
  }
  auto choices = j.find("choices");
  if (choices == j.end() || !choices->is_array()) return;
  for (const nlohmann::json& c : *choices) {
    if (!c.is_object()) continue;
    bool text = false;
    if (auto t = c.find("text");
        t != c.end() && t->is_string() && !t->get_ref<const std::string&>().empty()) {
      text = true;
    }
    if (auto d = c.find("delta"); d != c.end() && d->is_object()) {
      for (const char* key : {"content", "reasoning_content"}) {
        auto t = d->find(key);
        if (t != d->end() && t->is_string() && !t->get_ref<const std::string&>().empty())
          text = true;
      }
    }
    if (text) {
      token_times_.push_back(t_s);
      return;  // one sample per event (n = 1 requests)
    }
  }
}

RequestRecord send_request(const ClientConfig& config, const RequestSpec& spec,
                           std::chrono::steady_clock::time_point t0) {
  using clock = std::chrono::steady_clock;
  auto now = [t0] { return std::chrono::duration<double>(clock::now() - t0).count(); };
  RequestRecord rec;
  rec.input_tokens = spec.input_tokens;
  rec.start_s = now();
  auto fail = [&](std::string message) {
    rec.ok = false;
    rec.error = std::move(message);
    rec.e2el_s = now() - rec.start_s;
    return rec;
  };
  Result<BaseUrl> base = parse_base_url(config.url);
  if (!base.ok()) return fail(base.message());

  httplib::Client cli(base->scheme_host_port);
  if (!cli.is_valid())
    return fail("cannot make an HTTP client for '" + base->scheme_host_port + "'");
  const auto timeout = std::chrono::duration_cast<std::chrono::microseconds>(
      std::chrono::duration<double>(config.timeout_s));
  cli.set_connection_timeout(timeout);
  cli.set_read_timeout(timeout);
  cli.set_write_timeout(timeout);
  cli.set_keep_alive(false);
  cli.set_tcp_nodelay(true);  // Nagle + delayed ACK would hold the body back ~40 ms

  httplib::Request req;
  req.method = "POST";
  req.path = endpoint_path(*base, api_kind(config, spec));
  req.headers = {{"Content-Type", "application/json"},
                 {"Accept", "text/event-stream"},
                 // Compressed SSE is deflated in buffers, which would delay and merge chunks.
                 {"Accept-Encoding", "identity"}};
  if (!config.api_key.empty()) req.headers.emplace("Authorization", "Bearer " + config.api_key);
  // Invalid UTF-8 in a prompt is replaced (U+FFFD), not thrown.
  req.body =
      request_body(config, spec).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);

  int status = -1;
  std::string error_body;
  SseStream sse;
  req.response_handler = [&status](const httplib::Response& r) {
    status = r.status;
    return true;
  };
  req.content_receiver = [&](const char* data, size_t n, uint64_t, uint64_t) {
    const double t = now();
    if (status != 200) {
      if (error_body.size() < kMaxErrorBodyKept) error_body.append(data, n);
      return true;
    }
    sse.feed(std::string_view(data, n), t);
    return !sse.failed();  // an error event ends the request
  };
  const httplib::Result res = cli.send(req);

  if (sse.failed()) return fail(sse.error());
  if (status != -1 && status != 200) {
    const nlohmann::json j = nlohmann::json::parse(error_body, nullptr, false);
    const std::string what = j.is_object() ? error_message(j) : clip(error_body);
    return fail("HTTP " + std::to_string(status) + (what.empty() ? "" : ": " + what));
  }
  if (!res && !sse.done()) {
    const std::string tokens = std::to_string(sse.token_times().size());
    const httplib::Error e = res.error();
    const bool no_connection = e == httplib::Error::Connection ||
                               e == httplib::Error::ConnectionTimeout ||
                               e == httplib::Error::SSLConnection;
    return fail(
        status != -1    ? "stream broken after " + tokens + " text chunks: " + httplib::to_string(e)
        : no_connection ? "request failed: " + httplib::to_string(e) + " (cannot connect to " +
                              base->scheme_host_port + ")"
                        : "request failed: " + httplib::to_string(e) + " (no HTTP response from " +
                              base->scheme_host_port + req.path + ")");
  }
  if (!sse.done()) {
    if (sse.token_times().empty() && sse.head().find("data:") == std::string::npos) {
      return fail("not an event stream (is \"stream\": true supported?): " + clip(sse.head(), 120));
    }
    return fail("stream ended without 'data: [DONE]' after " +
                std::to_string(sse.token_times().size()) + " text chunks");
  }
  const std::vector<double>& times = sse.token_times();
  if (times.empty()) return fail("stream finished without any generated text");

  rec.ok = true;
  rec.e2el_s = sse.done_time() - rec.start_s;
  rec.ttft_s = times.front() - rec.start_s;
  for (size_t i = 1; i < times.size(); ++i) rec.itl_s.push_back(times[i] - times[i - 1]);
  rec.usage_reported = sse.completion_tokens().has_value();
  rec.output_tokens = sse.completion_tokens().value_or(int64_t(times.size()));
  if (sse.prompt_tokens()) rec.input_tokens = *sse.prompt_tokens();
  return rec;
}

}  // namespace sluice::loadgen
