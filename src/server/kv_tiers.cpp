#include "server/kv_tiers.h"

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <functional>

#include "base/log.h"
#include "server/metrics.h"

namespace sluice::server {

using http::ApiError;
using http::bad_request;
using http::status_error;
namespace {

constexpr int kProbeTimeoutMs = 30000;

KvBlockData to_block_data(KvBlocks&& b) {
  KvBlockData d;
  d.layout = std::move(b.layout);
  d.n_blocks = b.n_blocks;
  d.bytes_per_block = b.bytes_per_block;
  d.bytes = std::move(b.bytes);
  return d;
}

// Pinned blocks or a pinned state (never written while pinned) as the transfer server sends
// them: read on the calling (connection) thread when the executor allows it (`direct`: a long
// prefill step would otherwise hold the pull up), else on the engine thread between steps.
Result<KvBlocks> read_pinned(EngineBridge* bridge, const Engine* direct,
                             std::function<Result<KvBlockData>(const Engine&)> read) {
  auto out = std::make_shared<Result<KvBlockData>>(make_error("the engine did not answer"));
  if (direct) {
    *out = read(*direct);
  } else if (!bridge->call([out, read](const Engine& e) { *out = read(e); }, kProbeTimeoutMs)) {
    return make_error("the engine is stopping or busy");
  }
  if (!out->ok()) return out->status();
  KvBlocks kb;
  kb.layout = std::move((*out)->layout);
  kb.n_blocks = (*out)->n_blocks;
  kb.bytes_per_block = (*out)->bytes_per_block;
  kb.bytes = std::move((*out)->bytes);
  return kb;
}

// One disk tier's families (the blocks' under sluice_kv_disk_, the recurrent states' under
// sluice_kv_disk_state_); `what` names its files' contents.
void render_disk_tier(std::string& out, const std::string& prefix, const std::string& what,
                      const KvDiskStats& d) {
  const auto line = [&](const char* name, const char* type, const std::string& help, double v) {
    scalar(out, prefix + name, type, help, v);
  };
  line("hits_total", "counter", "Files read back (" + what + "s)", double(d.hits));
  line("misses_total", "counter", "Lookups that found nothing", double(d.misses));
  line("rejected_total", "counter",
       "Corrupt, truncated or mismatched files found (deleted; recomputed)", double(d.rejected));
  line("writes_total", "counter", "Files written", double(d.writes));
  line("write_dropped_total", "counter", "Writes dropped because the write queue was full",
       double(d.write_dropped));
  line("write_errors_total", "counter", "Failed writes", double(d.write_errors));
  line("evicted_total", "counter", "Files removed to hold --kv-disk-gb", double(d.evicted));
  line("read_bytes_total", "counter", "Bytes read", double(d.bytes_read));
  line("written_bytes_total", "counter", "Bytes written", double(d.bytes_written));
  line("read_seconds_total", "counter", "Time in reads", d.read_seconds);
  line("write_seconds_total", "counter", "Time in writes", d.write_seconds);
  line("files", "gauge", "Files on disk (" + what + "s)", double(d.files));
  line("bytes", "gauge", "Bytes of files on disk", double(d.bytes_on_disk));
}

std::string hex(uint64_t v) {
  char buf[20];
  std::snprintf(buf, sizeof buf, "%016" PRIx64, v);
  return buf;
}

}  // namespace

Result<ServeRole> parse_serve_role(std::string_view name) {
  if (name == "both") return ServeRole::kBoth;
  if (name == "prefill") return ServeRole::kPrefill;
  if (name == "decode") return ServeRole::kDecode;
  return make_error("unknown role '", name, "' (prefill, decode or both)");
}

const char* serve_role_name(ServeRole role) {
  switch (role) {
    case ServeRole::kPrefill:
      return "prefill";
    case ServeRole::kDecode:
      return "decode";
    case ServeRole::kBoth:
      break;
  }
  return "both";
}

Result<KvTransferFail> parse_kv_transfer_fail(std::string_view name) {
  if (name == "error") return KvTransferFail::kError;
  if (name == "recompute") return KvTransferFail::kRecompute;
  return make_error("unknown --kv-transfer-fail '", name, "' (error or recompute)");
}

std::variant<std::optional<KvTransferRequest>, ApiError> parse_kv_transfer_params(
    const nlohmann::ordered_json& body) {
  auto it = body.find("kv_transfer_params");
  if (it == body.end() || it->is_null()) return std::optional<KvTransferRequest>{};
  const nlohmann::ordered_json& p = *it;
  const std::string param = "kv_transfer_params";
  if (!p.is_object()) return bad_request("'kv_transfer_params' must be an object", param);
  KvTransferRequest r;
  if (auto d = p.find("do_remote_decode"); d != p.end() && !d->is_null()) {
    if (!d->is_boolean()) return bad_request("'do_remote_decode' must be a boolean", param);
    r.do_remote_decode = d->get<bool>();
  }
  auto h = p.find("remote_handle");
  if (h != p.end() && !h->is_null()) {
    if (!h->is_string() || h->get_ref<const std::string&>().empty() ||
        h->get_ref<const std::string&>().size() > 16) {
      return bad_request("'remote_handle' must be a hex string of up to 16 digits", param);
    }
    const std::string& s = h->get_ref<const std::string&>();
    uint64_t v = 0;
    const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v, 16);
    if (ec != std::errc() || end != s.data() + s.size()) {
      return bad_request("'remote_handle' must be a hex string", param);
    }
    if (v == 0) return bad_request("'remote_handle' must not be 0", param);
    r.remote_handle = v;
    auto host = p.find("remote_host");
    auto port = p.find("remote_port");
    if (host == p.end() || !host->is_string() || host->get_ref<const std::string&>().empty() ||
        host->get_ref<const std::string&>().size() > 255) {
      return bad_request("'remote_host' (a host name or address) must come with remote_handle",
                         param);
    }
    if (port == p.end() || !port->is_number_integer() || port->get<int64_t>() < 1 ||
        port->get<int64_t>() > 65535) {
      return bad_request("'remote_port' (1..65535) must come with remote_handle", param);
    }
    r.remote_host = host->get<std::string>();
    r.remote_port = int(port->get<int64_t>());
  }
  if (r.do_remote_decode && r.has_remote()) {
    return bad_request(
        "a request is either a prefill (do_remote_decode) or a decode "
        "(remote_handle), not both",
        param);
  }
  return std::optional<KvTransferRequest>(std::move(r));
}

Result<std::unique_ptr<KvTiers>> KvTiers::start(const KvTierConfig& config,
                                                const KvIdentity& identity, Engine& engine,
                                                EngineBridge& bridge) {
  std::unique_ptr<KvTiers> t(new KvTiers(config, bridge));
  SLUICE_ASSIGN_OR_RETURN(const KvBlockData mine, engine.export_blocks({}));
  t->bytes_per_block_ = mine.bytes_per_block;
  t->kv_ = &engine.kv();
  t->compat_.model = identity.model;
  // Models with recurrent layers: the saved states move with the blocks (a prefix hit needs
  // one at its end), between executors of one state layout.
  const bool recurrent = engine.kv().n_state_slots() > 0;
  if (recurrent) {
    Result<KvBlockData> state = engine.export_states({});
    if (!state.ok()) return make_error("recurrent state: ", state.message());
    t->state_layout_ = state->layout;
    t->state_bytes_ = state->bytes_per_block;
    t->compat_.model += "; " + state->layout;
  }
  t->compat_.layout = mine.layout;
  t->compat_.block_size = engine.kv().block_size();
  t->compat_.tp = identity.tp;
  const bool prefix_cache = engine.kv().prefix_cache_enabled();
  if (config.role != ServeRole::kBoth && !prefix_cache) {
    return make_error("--role ", serve_role_name(config.role),
                      " needs the prefix cache (K/V moves between workers through it)");
  }
  const bool listen = config.role == ServeRole::kPrefill ||
                      (config.role == ServeRole::kBoth && config.transfer_port >= 0);
  // A model with windowed and global layers keeps its K/V in several groups of blocks
  // (base/cache_layout.h); the transfer and the disk tier move one group's blocks today.
  const bool moves_kv = config.role != ServeRole::kBoth || listen || !config.disk_dir.empty();
  if (engine.kv().n_groups() > 1 && moves_kv) {
    return make_error("this model keeps its K/V in ", engine.kv().n_groups(),
                      " groups of blocks (windowed and global layers); --role prefill|decode, "
                      "--kv-transfer-port and --kv-disk-dir support models of one group only");
  }
  if (recurrent && moves_kv && !engine.kv().checkpointing()) {
    return make_error(
        "this model has recurrent layers: --role prefill|decode, --kv-transfer-port and "
        "--kv-disk-dir move their saved states (checkpoints), which are off here (the prefix "
        "cache, --state-checkpoints > 0 and one step in flight are needed)");
  }
  if (listen) {
    KvTransferServerOptions o;
    o.host = config.transfer_host;
    o.port = std::max(0, config.transfer_port);
    o.compat = t->compat_;
    o.handle_ttl_s = config.transfer_ttl_s;
    o.io_timeout_s = config.transfer_timeout_s;
    // Test hook (tests/router/e2e/disagg_e2e_test.cpp kills a worker mid-transfer): pace the
    // blocks this many ms apart. Unset, empty or not a positive number: off.
    if (const char* d = std::getenv("SLUICE_TEST_KV_SEND_DELAY_MS"); d && std::atoi(d) > 0)
      o.send_delay_ms = std::atoi(d);
    EngineBridge* b = &bridge;
    const Engine* direct = engine.concurrent_export() ? &engine : nullptr;
    auto export_fn = [b, direct](std::span<const int32_t> ids) -> Result<KvBlocks> {
      std::vector<int32_t> copy(ids.begin(), ids.end());
      return read_pinned(b, direct, [copy](const Engine& e) { return e.export_blocks(copy); });
    };
    auto release_fn = [b](std::span<const int32_t> ids) {
      std::vector<BlockId> copy(ids.begin(), ids.end());
      b->post([copy](Engine& e) { e.unpin(copy); });
    };
    KvTransferServer::StateFns state_fns;
    if (recurrent) {
      state_fns.export_state = [b, direct](int32_t slot) -> Result<KvBlocks> {
        return read_pinned(b, direct, [slot](const Engine& e) {
          const int32_t one[1] = {slot};
          return e.export_states(one);
        });
      };
      state_fns.release_state = [b](int32_t slot) {
        b->post([slot](Engine& e) { e.unpin_checkpoint(slot); });
      };
    }
    SLUICE_ASSIGN_OR_RETURN(t->transfer_,
                            KvTransferServer::start(o, export_fn, release_fn, state_fns));
    t->advertise_host_ = !config.transfer_advertise.empty() ? config.transfer_advertise
                         : config.transfer_host == "0.0.0.0" || config.transfer_host.empty()
                             ? "127.0.0.1"
                             : config.transfer_host;
    KvTransferServer* server = t->transfer_.get();
    bridge.set_pin_handler([server](std::vector<int32_t> tokens, std::vector<BlockId> blocks,
                                    KvCacheManager::CheckpointRef state) {
      return server->offer(std::move(tokens), std::move(blocks),
                           OfferedState{state.slot, state.n_blocks});
    });
  }
  if (!config.disk_dir.empty()) {
    if (!prefix_cache) return make_error("--kv-disk-dir needs the prefix cache");
    KvDiskOptions d;
    d.dir = config.disk_dir;
    d.max_bytes = uint64_t(config.disk_gb * double(1ull << 30));
    d.compat = identity.model + "; " + mine.layout + "; tp " + std::to_string(identity.tp);
    d.bytes_per_block = mine.bytes_per_block;
    if (d.max_bytes < d.bytes_per_block) {
      return make_error("--kv-disk-gb ", config.disk_gb, " holds not even one block (",
                        mine.bytes_per_block, " bytes)");
    }
    if (recurrent) {
      // The states beside the blocks, in their own directory, with the share of the bytes
      // they take when every checkpoint interval keeps one: a state per interval's blocks.
      const double interval_bytes =
          double(engine.kv().checkpoint_interval_blocks()) * double(mine.bytes_per_block);
      const double share = double(t->state_bytes_) / (double(t->state_bytes_) + interval_bytes);
      KvDiskOptions sd = d;
      sd.dir = config.disk_dir + "/state";
      sd.compat = t->compat_.model + "; tp " + std::to_string(identity.tp);
      sd.bytes_per_block = t->state_bytes_;
      sd.max_bytes = uint64_t(double(d.max_bytes) * share);
      d.max_bytes -= sd.max_bytes;
      sd.max_pending_bytes = std::max<size_t>(sd.max_pending_bytes, 4 * t->state_bytes_);
      if (sd.max_bytes < sd.bytes_per_block || d.max_bytes < d.bytes_per_block) {
        return make_error("--kv-disk-gb ", config.disk_gb, " holds not even one block (",
                          mine.bytes_per_block, " bytes) and one recurrent state (",
                          t->state_bytes_, " bytes) in their shares");
      }
      SLUICE_ASSIGN_OR_RETURN(t->state_disk_, KvDiskTier::open(sd));
    }
    SLUICE_ASSIGN_OR_RETURN(t->disk_, KvDiskTier::open(d));
    engine.set_record_cached(true);
    KvTiers* self = t.get();
    bridge.set_after_step([self](Engine& e) { self->after_step(e); });
  }
  return t;
}

KvTiers::~KvTiers() {
  if (transfer_) transfer_->stop();
  if (disk_) disk_->flush();
  if (state_disk_) state_disk_->flush();
}

std::optional<ApiError> KvTiers::check(const KvTransferRequest& request, bool stream) const {
  if (request.do_remote_decode) {
    if (!transfer_) {
      return bad_request(std::string("this server runs --role ") + serve_role_name(config_.role) +
                             " without a K/V transfer port: it does not prefill for other "
                             "workers (--role prefill, or --kv-transfer-port with --role both)",
                         "kv_transfer_params");
    }
    if (stream) {
      return bad_request(
          "a prefill request (do_remote_decode) cannot stream: its answer carries "
          "the transfer handle",
          "stream");
    }
  }
  // A pull connects wherever the request says: only a worker started for it does that.
  const bool pulls = config_.role == ServeRole::kDecode ||
                     (config_.role == ServeRole::kBoth && transfer_ != nullptr);
  if (request.has_remote() && !pulls) {
    return bad_request(std::string("this server runs --role ") + serve_role_name(config_.role) +
                           ": it does not pull K/V from other workers (--role decode, or "
                           "--kv-transfer-port with --role both)",
                       "kv_transfer_params");
  }
  return std::nullopt;
}

std::variant<std::vector<PrefixImport>, ApiError> KvTiers::prepare(
    const std::vector<std::vector<int32_t>>& prompts, const KvTransferRequest* remote) {
  std::vector<PrefixImport> out;
  if (remote && remote->has_remote()) {
    if (prompts.size() != 1) {
      return bad_request("a decode request with kv_transfer_params has exactly one prompt",
                         "kv_transfer_params");
    }
    auto got = pull(prompts[0], *remote);
    if (auto* e = std::get_if<ApiError>(&got)) return std::move(*e);
    if (auto& im = std::get<std::optional<PrefixImport>>(got)) out.push_back(std::move(*im));
    return out;
  }
  if (!disk_) return out;
  for (size_t i = 0; i < prompts.size(); ++i) {
    bool seen = false;  // n > 1 repeats a prompt
    for (size_t j = 0; j < i && !seen; ++j) seen = prompts[j] == prompts[i];
    if (seen) continue;
    if (std::optional<PrefixImport> im = read_disk(prompts[i])) out.push_back(std::move(*im));
  }
  return out;
}

std::optional<int32_t> KvTiers::cached_blocks(const std::vector<int32_t>& prompt) const {
  // Shared with the probe: one that runs after we gave up must not write into our frame.
  auto cached = std::make_shared<std::atomic<int32_t>>(0);
  auto tokens = std::make_shared<const std::vector<int32_t>>(prompt);
  if (!bridge_.call([cached, tokens](
                        const Engine& e) { cached->store(e.kv().n_cached_prefix_tokens(*tokens)); },
                    kProbeTimeoutMs)) {
    return std::nullopt;
  }
  return cached->load() / compat_.block_size;
}

std::variant<std::optional<PrefixImport>, ApiError> KvTiers::pull(
    const std::vector<int32_t>& prompt, const KvTransferRequest& remote) {
  const std::optional<int32_t> cached = cached_blocks(prompt);
  if (!cached) {
    return status_error(503, "the engine did not answer", "service_unavailable", "engine_busy");
  }
  const int32_t first = *cached;
  KvPullRequest req;
  req.host = remote.remote_host;
  req.port = remote.remote_port;
  req.handle = remote.remote_handle;
  req.tokens = prompt;
  req.first_block = first;
  req.compat = compat_;
  req.timeout_s = config_.transfer_timeout_s;
  // Always pulled, even with every block cached here: the prefill worker then releases its
  // pins at once instead of at the handle's expiry.
  Result<KvPullResult> got = kv_pull(req);
  {
    std::lock_guard<std::mutex> lock(mu_);
    ++stats_.pulls;
    stats_.skipped_blocks += uint64_t(first);
    if (!got.ok()) {
      ++stats_.pull_failures;
      if (config_.on_fail == KvTransferFail::kRecompute) ++stats_.pull_recomputes;
    } else {
      stats_.pulled_blocks += uint64_t(got->blocks.n_blocks);
      stats_.pulled_bytes += got->blocks.bytes.size() + got->state.bytes.size();
      stats_.pulled_states += got->state_at > 0 ? 1 : 0;
      stats_.pull_seconds += got->seconds;
    }
  }
  if (!got.ok()) {
    if (config_.on_fail == KvTransferFail::kRecompute) {
      SLUICE_LOG(kWarn, "serve: K/V transfer failed, computing the prompt here: " + got.message());
      return std::optional<PrefixImport>{};
    }
    return status_error(502, "K/V transfer from the prefill worker failed: " + got.message(),
                        "kv_transfer_error", "kv_transfer_failed");
  }
  if (got->blocks.n_blocks == 0) return std::optional<PrefixImport>{};
  PrefixImport im;
  im.first_block = got->first_block;
  const size_t n_tokens =
      size_t(got->first_block + got->blocks.n_blocks) * size_t(compat_.block_size);
  im.tokens.assign(prompt.begin(), prompt.begin() + std::ptrdiff_t(n_tokens));
  im.blocks = to_block_data(std::move(got->blocks));
  if (got->state_at > 0) {
    im.state = to_block_data(std::move(got->state));
    im.state_blocks = got->state_at;
  }
  return std::optional<PrefixImport>(std::move(im));
}

std::optional<PrefixImport> KvTiers::read_disk(const std::vector<int32_t>& prompt) {
  // The chain hashes depend on the cache's fixed configuration alone: computed here. Only a
  // prompt with blocks on disk asks the engine thread what memory holds (that waits for the
  // step in progress to end).
  const std::vector<uint64_t> hashes = kv_->prefix_hashes(prompt);
  if (hashes.empty() || disk_->count_prefix(hashes) == 0) return std::nullopt;
  const std::optional<int32_t> cached = cached_blocks(prompt);
  if (!cached) return std::nullopt;
  const int32_t first = *cached;
  const int32_t n_full = int32_t(hashes.size());
  if (first >= n_full) return std::nullopt;
  const std::span<const uint64_t> rest(hashes.data() + first, size_t(n_full - first));
  int32_t on_disk = disk_->count_prefix(rest);
  if (on_disk <= 0) return std::nullopt;
  PrefixImport im;
  if (state_disk_) {
    // A recurrent model resumes only from a saved state: the deepest one on disk within the
    // blocks there that a hit may use (it leaves a token to compute); its blocks and no more.
    const int32_t usable = int32_t((prompt.size() - 1) / size_t(compat_.block_size));
    int32_t at = std::min(first + on_disk, usable);
    while (at > first && !state_disk_->contains(hashes[size_t(at - 1)])) --at;
    if (at <= first) return std::nullopt;
    im.state.layout = state_layout_;
    im.state.n_blocks = 1;
    im.state.bytes_per_block = state_bytes_;
    im.state.bytes.resize(state_bytes_);
    // A state file carries no tokens (its chain hash names them); a block file carries its own.
    if (!state_disk_->get(hashes[size_t(at - 1)], {}, im.state.bytes)) return std::nullopt;
    im.state_blocks = at;
    on_disk = at - first;
  }
  im.first_block = first;
  im.blocks.layout = compat_.layout;
  im.blocks.bytes_per_block = bytes_per_block_;
  im.blocks.bytes.resize(size_t(on_disk) * bytes_per_block_);
  int32_t n = 0;
  for (; n < on_disk; ++n) {
    const size_t b = size_t(first + n);
    const std::span<const int32_t> block_tokens(prompt.data() + b * size_t(compat_.block_size),
                                                size_t(compat_.block_size));
    const std::span<uint8_t> dst(im.blocks.bytes.data() + size_t(n) * bytes_per_block_,
                                 bytes_per_block_);
    if (!disk_->get(hashes[b], block_tokens, dst)) break;
  }
  if (n == 0) return std::nullopt;
  if (state_disk_ && n < on_disk) return std::nullopt;  // the state's blocks are not all there
  im.blocks.n_blocks = n;
  im.blocks.bytes.resize(size_t(n) * bytes_per_block_);
  im.tokens.assign(prompt.begin(),
                   prompt.begin() + std::ptrdiff_t(size_t(first + n) * size_t(compat_.block_size)));
  {
    std::lock_guard<std::mutex> lock(mu_);
    stats_.disk_loaded_blocks += uint64_t(n);
    stats_.disk_loaded_states += im.state_blocks > 0 ? 1 : 0;
  }
  return im;
}

void KvTiers::after_step(Engine& engine) {
  if (state_disk_) write_states(engine);
  std::vector<KvCacheManager::CachedBlock> fresh = engine.take_newly_cached();
  if (fresh.empty()) return;
  std::vector<int32_t> ids;
  std::vector<size_t> which;
  for (size_t i = 0; i < fresh.size(); ++i) {
    if (disk_->contains(fresh[i].hash)) continue;
    ids.push_back(fresh[i].id);
    which.push_back(i);
  }
  if (ids.empty()) return;
  Result<KvBlockData> data = engine.export_blocks(ids);
  if (!data.ok()) {
    SLUICE_LOG(kWarn, "serve: disk tier: exporting blocks failed: " + data.message());
    return;
  }
  uint64_t offered = 0;
  for (size_t k = 0; k < which.size(); ++k) {
    const KvCacheManager::CachedBlock& c = fresh[which[k]];
    const std::span<const uint8_t> payload(data->bytes.data() + k * data->bytes_per_block,
                                           data->bytes_per_block);
    offered += disk_->put(c.hash, c.tokens, payload) ? 1 : 0;
  }
  std::lock_guard<std::mutex> lock(mu_);
  stats_.disk_offered += offered;
}

void KvTiers::write_states(Engine& engine) {
  // Newly saved checkpoints: their states are in place until the next step.
  std::vector<uint64_t> keys;
  std::vector<int32_t> slots;
  for (const KvCacheManager::SavedCheckpoint& c : engine.take_newly_checkpointed()) {
    if (state_disk_->contains(c.key)) continue;
    keys.push_back(c.key);
    slots.push_back(c.slot);
  }
  if (slots.empty()) return;
  Result<KvBlockData> data = engine.export_states(slots);
  if (!data.ok()) {
    SLUICE_LOG(kWarn, "serve: disk tier: exporting recurrent states failed: " + data.message());
    return;
  }
  for (size_t k = 0; k < keys.size(); ++k) {
    state_disk_->put(keys[k], {},
                     std::span<const uint8_t>(data->bytes.data() + k * data->bytes_per_block,
                                              data->bytes_per_block));
  }
}

nlohmann::ordered_json KvTiers::transfer_params(const RequestChannel& done) const {
  const uint64_t handle = done.kv_handle();
  if (!transfer_ || handle == 0) return nullptr;
  return {{"remote_host", advertise_host_},
          {"remote_port", transfer_->port()},
          {"remote_handle", hex(handle)},
          {"remote_block_size", compat_.block_size},
          {"remote_n_blocks", done.kv_pinned_blocks()}};
}

KvTierStats KvTiers::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

void KvTiers::render_metrics(std::string& out) const {
  const KvTierStats s = stats();
  if (transfer_) {
    const KvTransferServerStats t = transfer_->stats();
    scalar(out, "sluice_kv_transfer_offered_total", "counter",
           "Prompts whose pinned blocks were offered to decode workers", double(t.offered));
    scalar(out, "sluice_kv_transfer_served_total", "counter",
           "Pulls served completely (acknowledged by the decode worker)", double(t.pulled));
    scalar(out, "sluice_kv_transfer_failed_total", "counter",
           "Pulls that broke off (connection, timeout)", double(t.failed));
    scalar(out, "sluice_kv_transfer_refused_total", "counter",
           "Pulls refused (unknown handle, tokens or compatibility mismatch)", double(t.refused));
    scalar(out, "sluice_kv_transfer_expired_total", "counter",
           "Offered handles released unpulled at their expiry", double(t.expired));
    scalar(out, "sluice_kv_transfer_sent_bytes_total", "counter",
           "K/V bytes sent (counted when a pull ends)", double(t.bytes_sent));
    scalar(out, "sluice_kv_transfer_sent_blocks_total", "counter",
           "KV blocks sent (counted as they go out, completed pulls or not)",
           double(t.blocks_sent));
    scalar(out, "sluice_kv_pinned_blocks", "gauge", "KV blocks pinned for decode workers",
           double(t.pinned_blocks));
    if (!state_layout_.empty()) {
      scalar(out, "sluice_kv_transfer_sent_states_total", "counter",
             "Recurrent states sent with blocks (pulls that completed)", double(t.states_sent));
    }
  }
  if (role() != ServeRole::kPrefill) {
    scalar(out, "sluice_kv_pulls_total", "counter", "K/V pulls from prefill workers",
           double(s.pulls));
    scalar(out, "sluice_kv_pull_failures_total", "counter", "K/V pulls that failed",
           double(s.pull_failures));
    scalar(out, "sluice_kv_pull_recomputes_total", "counter",
           "Failed pulls whose prompt was computed here (--kv-transfer-fail recompute)",
           double(s.pull_recomputes));
    scalar(out, "sluice_kv_pulled_blocks_total", "counter", "KV blocks pulled",
           double(s.pulled_blocks));
    scalar(out, "sluice_kv_pulled_bytes_total", "counter", "K/V bytes pulled",
           double(s.pulled_bytes));
    scalar(out, "sluice_kv_pull_skipped_blocks_total", "counter",
           "Blocks not pulled because they were cached here", double(s.skipped_blocks));
    scalar(out, "sluice_kv_pull_seconds_total", "counter", "Time spent pulling", s.pull_seconds);
    if (!state_layout_.empty()) {
      scalar(out, "sluice_kv_pulled_states_total", "counter",
             "Recurrent states pulled with the blocks", double(s.pulled_states));
    }
  }
  if (disk_) {
    render_disk_tier(out, "sluice_kv_disk_", "block", disk_->stats());
    scalar(out, "sluice_kv_disk_loaded_blocks_total", "counter",
           "Blocks imported into the prefix cache from disk", double(s.disk_loaded_blocks));
  }
  if (state_disk_) {
    render_disk_tier(out, "sluice_kv_disk_state_", "recurrent state", state_disk_->stats());
    scalar(out, "sluice_kv_disk_loaded_states_total", "counter",
           "Recurrent states imported from disk (each with its blocks)",
           double(s.disk_loaded_states));
  }
}

}  // namespace sluice::server
