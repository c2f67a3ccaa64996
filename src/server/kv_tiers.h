// Where a server's K/V comes from besides its own forward passes (docs/disaggregation.md):
//
//   prefill worker (--role prefill|both)         decode worker (--role decode|both)
//   ------------------------------------         ----------------------------------
//   POST .. "kv_transfer_params":                POST .. "kv_transfer_params":
//        {"do_remote_decode": true}                   {"remote_host", "remote_port",
//   computes the prompt (max_tokens 1), pins          "remote_handle", ...}
//   its full blocks, offers them on the          probe: blocks [0, k) cached here already
//   transfer port (kv/kv_transfer.h) and         pull blocks [k, n) over TCP (checksummed)
//   answers with kv_transfer_params   ------->   import them, then run the request, which
//   pins released when pulled, failed or expired  computes only the partial last block
//
// and the disk tier (--kv-disk-dir): every block that enters the prefix cache is written
// there asynchronously (kv/kv_disk.h); a prompt whose leading blocks are not in memory but on
// disk reads them back before it is admitted, here as well as after a restart.
//
// Models with recurrent layers (qwen35) resume a prefix only from a saved state (a checkpoint,
// kv/kv_cache_manager.h): the prefill worker offers the prompt's deepest one with its blocks
// and the pull carries it; the disk tier writes each newly saved one to <dir>/state and reads
// the deepest one a prompt can use with the blocks before it.
//
// Threads: start() and the hooks it installs run on the engine thread; prepare() runs on the
// HTTP handler's thread (pulls and disk reads never stall the engine), probing the engine with
// EngineBridge::call; the transfer server's connection threads export pinned blocks through
// EngineBridge::call and unpin them through EngineBridge::post.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "engine/engine.h"
#include "http/api_error.h"
#include "kv_io/kv_disk.h"
#include "kv_io/kv_transfer.h"
#include "server/engine_bridge.h"

namespace sluice::server {

enum class ServeRole : uint8_t { kBoth, kPrefill, kDecode };
Result<ServeRole> parse_serve_role(std::string_view name);  // "both" | "prefill" | "decode"
const char* serve_role_name(ServeRole role);

// What a decode worker does when a pull fails (unreachable or dead prefill worker, timeout,
// mismatch, bad checksum): fail the request, or compute the prompt itself.
enum class KvTransferFail : uint8_t { kError, kRecompute };
Result<KvTransferFail> parse_kv_transfer_fail(std::string_view name);  // "error" | "recompute"

struct KvTierConfig {
  ServeRole role = ServeRole::kBoth;
  // Transfer (prefill side): where the transfer port listens and the host decode workers are
  // told to connect to ("": the bind address; 127.0.0.1 when that is 0.0.0.0).
  std::string transfer_host = "127.0.0.1";
  std::string transfer_advertise;
  // 0: any free port. -1 (unset): --role prefill listens on any free port, --role both
  // does not listen (it still pulls as a decode worker).
  int transfer_port = -1;
  double transfer_ttl_s = 60;      // pinned blocks not pulled by then are released
  double transfer_timeout_s = 10;  // a pull's connect + transfer deadline (decode side)
  KvTransferFail on_fail = KvTransferFail::kError;
  // Disk tier: off while dir is empty.
  std::string disk_dir;
  double disk_gb = 0;
};

// The served model's K/V identity: what a transfer and a disk file must match.
struct KvIdentity {
  std::string model;  // fingerprint of the model file (size, hash of header and samples)
  int32_t tp = 1;
};

// A request's kv_transfer_params (vLLM's field name and convention).
struct KvTransferRequest {
  bool do_remote_decode = false;  // a prefill request: pin the prompt's blocks and offer them
  // A decode request: pull from here.
  std::string remote_host;
  int remote_port = 0;
  uint64_t remote_handle = 0;
  bool has_remote() const { return remote_handle != 0; }
};
// Absent field: nullopt. A malformed one: a 400.
std::variant<std::optional<KvTransferRequest>, http::ApiError> parse_kv_transfer_params(
    const nlohmann::ordered_json& body);

// Counters of the decode side's pulls and the disk tier's reads (the servers' own stats live
// in KvTransferServer and KvDiskTier).
struct KvTierStats {
  uint64_t pulls = 0, pull_failures = 0, pull_recomputes = 0;
  uint64_t pulled_blocks = 0, pulled_bytes = 0, skipped_blocks = 0;  // skipped: cached already
  uint64_t pulled_states = 0;  // recurrent states pulled with the blocks
  double pull_seconds = 0;
  uint64_t disk_loaded_blocks = 0;  // blocks read back from disk into the prefix cache
  uint64_t disk_loaded_states = 0;  // recurrent states read back (each with its blocks)
  uint64_t disk_offered = 0;        // newly cached blocks handed to the disk writer
};

class KvTiers {
 public:
  // Engine thread, in the model loader. Starts the transfer server (prefill, both) and opens
  // the disk tier, and installs the bridge's pin and after-step hooks.
  static Result<std::unique_ptr<KvTiers>> start(const KvTierConfig& config,
                                                const KvIdentity& identity, Engine& engine,
                                                EngineBridge& bridge);
  ~KvTiers();  // stops the transfer server (releasing every pin) and flushes the disk tier
  KvTiers(const KvTiers&) = delete;
  KvTiers& operator=(const KvTiers&) = delete;

  ServeRole role() const { return config_.role; }
  // HTTP thread: checks a request's kv_transfer_params against this role (400 when it asks
  // for something this role does not do).
  std::optional<http::ApiError> check(const KvTransferRequest& request, bool stream) const;
  // HTTP thread: the K/V to import for `prompts` before they are admitted: pulled from the
  // remote prefill worker when `remote` names one, else read from the disk tier. A failed pull
  // is an error (502) under --kv-transfer-fail error, nothing (recompute) otherwise.
  std::variant<std::vector<PrefixImport>, http::ApiError> prepare(
      const std::vector<std::vector<int32_t>>& prompts, const KvTransferRequest* remote);
  // The kv_transfer_params of a prefill answer (null when nothing was pinned).
  nlohmann::ordered_json transfer_params(const RequestChannel& done) const;
  // Appends this component's Prometheus lines to a /metrics page.
  void render_metrics(std::string& out) const;
  KvTierStats stats() const;
  const KvTransferServer* transfer_server() const { return transfer_.get(); }
  const KvDiskTier* disk() const { return disk_.get(); }

 private:
  KvTiers(const KvTierConfig& config, EngineBridge& bridge) : config_(config), bridge_(bridge) {}
  // Blocks [first, n) of `prompt`: probe what is cached here, then pull or read the rest.
  std::variant<std::optional<PrefixImport>, http::ApiError> pull(const std::vector<int32_t>& prompt,
                                                                 const KvTransferRequest& remote);
  std::optional<PrefixImport> read_disk(const std::vector<int32_t>& prompt);
  // Leading full blocks of `prompt` in the engine's prefix cache now (waits for the step in
  // progress); nullopt when the engine does not answer.
  std::optional<int32_t> cached_blocks(const std::vector<int32_t>& prompt) const;
  void after_step(Engine& engine);
  // Recurrent models: newly saved checkpoints to the state directory of the disk tier.
  void write_states(Engine& engine);

  const KvTierConfig config_;
  EngineBridge& bridge_;
  std::string advertise_host_;
  KvCompat compat_;  // the model, the executor's block layout tag, the block size, tp
  size_t bytes_per_block_ = 0;
  // For prefix_hashes() only (const, and it reads nothing a step changes): any thread.
  const KvCacheManager* kv_ = nullptr;
  std::unique_ptr<KvTransferServer> transfer_;
  std::unique_ptr<KvDiskTier> disk_;
  // Models with recurrent layers: their saved states (checkpoints), moved with the blocks.
  std::string state_layout_;  // the executor's state layout tag ("": no recurrent layers)
  size_t state_bytes_ = 0;    // one state
  std::unique_ptr<KvDiskTier> state_disk_;  // <disk dir>/state: files named by chain hash
  mutable std::mutex mu_;
  KvTierStats stats_;
};

}  // namespace sluice::server
