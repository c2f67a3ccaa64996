// The KV transfer's wire format (kv_transfer.h): encoders and strict parsers, no I/O.
#include <algorithm>
#include <cstring>

#include "base/crc32c.h"
#include "kv_io/kv_transfer.h"

namespace sluice {

namespace {

// Fixed payload sizes: PULL's fields before its strings and tokens, OK's before its layout.
constexpr size_t kPullFixedBytes = 8 + 4 + 4 + 4 + 4 + 4 + 4;  // handle..tp, 2 lengths, n_tokens
// first, n, bytes/block, layout length, state_at, state bytes, state layout length
constexpr size_t kOkFixedBytes = 4 + 4 + 8 + 4 + 4 + 8 + 4;
constexpr size_t kErrorFixedBytes = 2 + 4;  // code, length
constexpr size_t kPairBytes = 8;            // {i32, u32}: BLOCK head, END, ACK

void put_u16(std::vector<uint8_t>& out, uint16_t v) {
  out.push_back(uint8_t(v));
  out.push_back(uint8_t(v >> 8));
}
void put_u32(std::vector<uint8_t>& out, uint32_t v) {
  for (int i = 0; i < 4; ++i) out.push_back(uint8_t(v >> (8 * i)));
}
void put_u64(std::vector<uint8_t>& out, uint64_t v) {
  for (int i = 0; i < 8; ++i) out.push_back(uint8_t(v >> (8 * i)));
}
void put_string(std::vector<uint8_t>& out, std::string_view s, size_t max_bytes) {
  s = s.substr(0, max_bytes);
  put_u32(out, uint32_t(s.size()));
  out.insert(out.end(), s.begin(), s.end());
}
void store_u32(uint8_t* p, uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = uint8_t(v >> (8 * i));
}
uint32_t load_u32(const uint8_t* p) {
  return uint32_t(p[0]) | uint32_t(p[1]) << 8 | uint32_t(p[2]) << 16 | uint32_t(p[3]) << 24;
}

// The 12-byte message header.
void put_header(std::vector<uint8_t>& out, KvMessageType type, size_t payload_bytes) {
  put_u32(out, kKvMagic);
  put_u16(out, kKvVersion);
  put_u16(out, uint16_t(type));
  put_u32(out, uint32_t(payload_bytes));
}

// Reads a payload front to back. Reads past the end yield 0 and set `short_read`; callers
// check the sizes that matter (strings, tokens) before allocating for them.
class Reader {
 public:
  explicit Reader(std::span<const uint8_t> bytes) : bytes_(bytes) {}
  size_t left() const { return bytes_.size() - pos_; }
  bool short_read() const { return short_read_; }

  const uint8_t* take(size_t n) {
    if (left() < n) {
      short_read_ = true;
      pos_ = bytes_.size();
      return nullptr;
    }
    const uint8_t* p = bytes_.data() + pos_;
    pos_ += n;
    return p;
  }
  uint16_t u16() {
    const uint8_t* p = take(2);
    return p ? uint16_t(p[0] | p[1] << 8) : 0;
  }
  uint32_t u32() {
    const uint8_t* p = take(4);
    return p ? load_u32(p) : 0;
  }
  uint64_t u64() {
    const uint8_t* p = take(8);
    return p ? uint64_t(load_u32(p)) | uint64_t(load_u32(p + 4)) << 32 : 0;
  }
  int32_t i32() { return int32_t(u32()); }
  // A u32 length and that many bytes, at most `max_bytes`.
  Status string(const char* what, size_t max_bytes, std::string& out) {
    const uint32_t n = u32();
    if (n > max_bytes) return make_error(what, " of ", n, " bytes (at most ", max_bytes, ")");
    if (n > left()) return make_error(what, " of ", n, " bytes runs past the message");
    const uint8_t* p = take(n);
    out.assign(reinterpret_cast<const char*>(p), n);
    return Status();
  }

 private:
  std::span<const uint8_t> bytes_;
  size_t pos_ = 0;
  bool short_read_ = false;
};

// The payload of a whole message of type `want`, which must be exactly header + payload.
Result<std::span<const uint8_t>> payload_of(std::span<const uint8_t> message, KvMessageType want) {
  SLUICE_ASSIGN_OR_RETURN(const KvMessageHeader h, parse_message_header(message));
  if (h.type != want)
    return make_error("expected a ", to_string(want), " message, got ", to_string(h.type));
  if (message.size() != kKvHeaderBytes + h.payload_bytes)
    return make_error(to_string(want), " message of ", message.size(), " bytes, its header says ",
                      kKvHeaderBytes + h.payload_bytes);
  return message.subspan(kKvHeaderBytes);
}

}  // namespace

const char* to_string(KvMessageType type) {
  switch (type) {
    case KvMessageType::kPull:
      return "PULL";
    case KvMessageType::kOk:
      return "OK";
    case KvMessageType::kError:
      return "ERROR";
    case KvMessageType::kBlock:
      return "BLOCK";
    case KvMessageType::kEnd:
      return "END";
    case KvMessageType::kAck:
      return "ACK";
    case KvMessageType::kState:
      return "STATE";
  }
  return "unknown";
}

std::string compat_mismatch(const KvCompat& mine, const KvCompat& theirs) {
  std::string out;
  auto add = [&](const std::string& s) {
    if (!out.empty()) out += "; ";
    out += s;
  };
  if (mine.model != theirs.model)
    add("model differs (here: " + mine.model + ", there: " + theirs.model + ")");
  if (mine.layout != theirs.layout)
    add("KV layout differs (here: " + mine.layout + ", there: " + theirs.layout + ")");
  if (mine.block_size != theirs.block_size)
    add("block size " + std::to_string(mine.block_size) + " here, " +
        std::to_string(theirs.block_size) + " there");
  if (mine.tp != theirs.tp)
    add("tensor-parallel degree " + std::to_string(mine.tp) + " here, " +
        std::to_string(theirs.tp) + " there");
  return out;
}

Result<KvMessageHeader> parse_message_header(std::span<const uint8_t> bytes) {
  if (bytes.size() < kKvHeaderBytes)
    return make_error("message header of ", bytes.size(), " bytes (", kKvHeaderBytes, " needed)");
  Reader r(bytes.first(kKvHeaderBytes));
  const uint32_t magic = r.u32();
  const uint16_t version = r.u16();
  const uint16_t type = r.u16();
  const uint32_t payload = r.u32();
  if (magic != kKvMagic) {
    char text[5] = {};
    for (int i = 0; i < 4; ++i) {
      const char c = char(bytes[size_t(i)]);
      text[i] = c >= 0x20 && c < 0x7f ? c : '.';
    }
    return make_error("bad magic '", text, "' (not the KV transfer protocol)");
  }
  if (version != kKvVersion)
    return make_error("unsupported KV transfer protocol version ", version, " (this side speaks ",
                      kKvVersion, ")");
  size_t min_payload = 0, max_payload = 0;
  switch (KvMessageType(type)) {
    case KvMessageType::kPull:
      min_payload = kPullFixedBytes;
      max_payload = kPullFixedBytes + 2 * kKvMaxStringBytes + 4 * kKvMaxTokens;
      break;
    case KvMessageType::kOk:
      min_payload = kOkFixedBytes;
      max_payload = kOkFixedBytes + 2 * kKvMaxStringBytes;
      break;
    case KvMessageType::kError:
      min_payload = kErrorFixedBytes;
      max_payload = kErrorFixedBytes + kKvMaxErrorBytes;
      break;
    case KvMessageType::kBlock:
    case KvMessageType::kState:
      min_payload = kPairBytes;
      max_payload = kPairBytes + kKvMaxBytesPerBlock;
      break;
    case KvMessageType::kEnd:
    case KvMessageType::kAck:
      min_payload = max_payload = kPairBytes;
      break;
    default:
      return make_error("unknown KV transfer message type ", type);
  }
  const KvMessageType t = KvMessageType(type);
  if (payload < min_payload || payload > max_payload)
    return make_error(to_string(t), " payload of ", payload, " bytes (", min_payload, " to ",
                      max_payload, " allowed)");
  return KvMessageHeader{t, payload};
}

std::vector<uint8_t> encode_pull_message(const PullMessage& pull) {
  const std::string_view model = std::string_view(pull.compat.model).substr(0, kKvMaxStringBytes);
  const std::string_view layout = std::string_view(pull.compat.layout).substr(0, kKvMaxStringBytes);
  const size_t n_tokens = std::min(pull.tokens.size(), kKvMaxTokens);
  std::vector<uint8_t> out;
  const size_t payload = kPullFixedBytes + model.size() + layout.size() + 4 * n_tokens;
  out.reserve(kKvHeaderBytes + payload);
  put_header(out, KvMessageType::kPull, payload);
  put_u64(out, pull.handle);
  put_u32(out, uint32_t(pull.first_block));
  put_u32(out, uint32_t(pull.compat.block_size));
  put_u32(out, uint32_t(pull.compat.tp));
  put_string(out, model, kKvMaxStringBytes);
  put_string(out, layout, kKvMaxStringBytes);
  put_u32(out, uint32_t(n_tokens));
  const size_t at = out.size();
  out.resize(at + 4 * n_tokens);
  for (size_t i = 0; i < n_tokens; ++i) store_u32(&out[at + 4 * i], uint32_t(pull.tokens[i]));
  return out;
}

Result<PullMessage> parse_pull_message(std::span<const uint8_t> message) {
  SLUICE_ASSIGN_OR_RETURN(const auto payload, payload_of(message, KvMessageType::kPull));
  Reader r(payload);
  PullMessage p;
  p.handle = r.u64();
  p.first_block = r.i32();
  p.compat.block_size = r.i32();
  p.compat.tp = r.i32();
  SLUICE_RETURN_IF_ERROR(r.string("PULL model", kKvMaxStringBytes, p.compat.model));
  SLUICE_RETURN_IF_ERROR(r.string("PULL layout", kKvMaxStringBytes, p.compat.layout));
  const uint32_t n_tokens = r.u32();
  if (r.short_read()) return make_error("PULL message truncated");
  if (n_tokens > kKvMaxTokens)
    return make_error("PULL of ", n_tokens, " tokens (at most ", kKvMaxTokens, ")");
  if (r.left() != 4 * size_t(n_tokens))
    return make_error("PULL of ", n_tokens, " tokens carries ", r.left(), " bytes of tokens");
  if (p.first_block < 0) return make_error("PULL from block ", p.first_block);
  p.tokens.resize(n_tokens);
  const uint8_t* t = r.take(4 * size_t(n_tokens));
  for (size_t i = 0; i < n_tokens; ++i) p.tokens[i] = int32_t(load_u32(t + 4 * i));
  return p;
}

std::vector<uint8_t> encode_reply_header(const ReplyHeader& reply) {
  std::vector<uint8_t> out;
  if (reply.ok) {
    const std::string_view layout = std::string_view(reply.layout).substr(0, kKvMaxStringBytes);
    const std::string_view state_layout =
        std::string_view(reply.state_layout).substr(0, kKvMaxStringBytes);
    put_header(out, KvMessageType::kOk, kOkFixedBytes + layout.size() + state_layout.size());
    put_u32(out, uint32_t(reply.first_block));
    put_u32(out, uint32_t(reply.n_blocks));
    put_u64(out, reply.bytes_per_block);
    put_string(out, layout, kKvMaxStringBytes);
    put_u32(out, uint32_t(reply.state_at));
    put_u64(out, reply.state_bytes);
    put_string(out, state_layout, kKvMaxStringBytes);
  } else {
    const std::string_view msg = std::string_view(reply.message).substr(0, kKvMaxErrorBytes);
    put_header(out, KvMessageType::kError, kErrorFixedBytes + msg.size());
    put_u16(out, uint16_t(reply.code));
    put_string(out, msg, kKvMaxErrorBytes);
  }
  return out;
}

Result<ReplyHeader> parse_reply_header(std::span<const uint8_t> message) {
  SLUICE_ASSIGN_OR_RETURN(const KvMessageHeader h, parse_message_header(message));
  if (h.type != KvMessageType::kOk && h.type != KvMessageType::kError)
    return make_error("expected an OK or ERROR reply, got ", to_string(h.type));
  SLUICE_ASSIGN_OR_RETURN(const auto payload, payload_of(message, h.type));
  Reader r(payload);
  ReplyHeader reply;
  if (h.type == KvMessageType::kError) {
    reply.code = KvErrorCode(r.u16());
    SLUICE_RETURN_IF_ERROR(r.string("ERROR message", kKvMaxErrorBytes, reply.message));
  } else {
    reply.ok = true;
    reply.first_block = r.i32();
    reply.n_blocks = r.i32();
    reply.bytes_per_block = r.u64();
    SLUICE_RETURN_IF_ERROR(r.string("OK layout", kKvMaxStringBytes, reply.layout));
    reply.state_at = r.i32();
    reply.state_bytes = r.u64();
    SLUICE_RETURN_IF_ERROR(r.string("OK state layout", kKvMaxStringBytes, reply.state_layout));
    // The layout's length may swallow the state fields' bytes: then they run short.
    if (r.short_read()) return make_error("OK message truncated");
    if (reply.first_block < 0 || reply.n_blocks < 0)
      return make_error("OK for blocks [", reply.first_block, ", +", reply.n_blocks, ")");
    if (reply.bytes_per_block > kKvMaxBytesPerBlock ||
        (reply.n_blocks > 0 && reply.bytes_per_block == 0))
      return make_error("OK with ", reply.bytes_per_block, " bytes per block (1 to ",
                        kKvMaxBytesPerBlock, " allowed)");
    if (reply.state_at == 0
            ? reply.state_bytes != 0 || !reply.state_layout.empty()
            : reply.state_at <= reply.first_block ||
                  int64_t(reply.state_at) > int64_t(reply.first_block) + reply.n_blocks ||
                  reply.state_bytes == 0 || reply.state_bytes > kKvMaxBytesPerBlock)
      return make_error("OK with a state after block ", reply.state_at, " of ", reply.state_bytes,
                        " bytes for blocks [", reply.first_block, ", +", reply.n_blocks, ")");
  }
  if (r.left() != 0) return make_error(to_string(h.type), " has ", r.left(), " trailing bytes");
  return reply;
}

void encode_frame_head(const FrameHead& head, uint64_t data_bytes, uint8_t* out) {
  std::vector<uint8_t> v;
  v.reserve(kKvFrameHeadBytes);
  if (head.end) {
    put_header(v, KvMessageType::kEnd, kPairBytes);
  } else {
    put_header(v, head.state ? KvMessageType::kState : KvMessageType::kBlock,
               kPairBytes + std::min(data_bytes, kKvMaxBytesPerBlock));
  }
  put_u32(v, uint32_t(head.index));
  put_u32(v, head.crc);
  std::memcpy(out, v.data(), kKvFrameHeadBytes);
}

Result<FrameHead> parse_block_frame_header(std::span<const uint8_t> head, uint64_t bytes_per_block,
                                           uint64_t state_bytes) {
  if (head.size() != kKvFrameHeadBytes)
    return make_error("block frame head of ", head.size(), " bytes (", kKvFrameHeadBytes, ")");
  SLUICE_ASSIGN_OR_RETURN(const KvMessageHeader h, parse_message_header(head));
  FrameHead f;
  if (h.type == KvMessageType::kBlock) {
    if (h.payload_bytes != kPairBytes + bytes_per_block)
      return make_error("BLOCK frame of ", h.payload_bytes - kPairBytes, " bytes (the OK said ",
                        bytes_per_block, ")");
  } else if (h.type == KvMessageType::kState && state_bytes > 0) {
    if (h.payload_bytes != kPairBytes + state_bytes)
      return make_error("STATE frame of ", h.payload_bytes - kPairBytes, " bytes (the OK said ",
                        state_bytes, ")");
    f.state = true;
  } else if (h.type == KvMessageType::kEnd) {
    f.end = true;
  } else {
    return make_error("expected a BLOCK", state_bytes > 0 ? ", STATE" : "", " or END frame, got ",
                      to_string(h.type));
  }
  Reader r(head.subspan(kKvHeaderBytes));
  f.index = r.i32();
  f.crc = r.u32();
  if (f.index < 0) return make_error(to_string(h.type), " frame with index ", f.index);
  return f;
}

std::vector<uint8_t> encode_ack_message(const AckMessage& ack) {
  std::vector<uint8_t> out;
  put_header(out, KvMessageType::kAck, kPairBytes);
  put_u32(out, uint32_t(ack.n_blocks));
  put_u32(out, ack.crc);
  return out;
}

Result<AckMessage> parse_ack_message(std::span<const uint8_t> message) {
  SLUICE_ASSIGN_OR_RETURN(const auto payload, payload_of(message, KvMessageType::kAck));
  Reader r(payload);
  AckMessage ack;
  ack.n_blocks = r.i32();
  ack.crc = r.u32();
  if (ack.n_blocks < 0) return make_error("ACK of ", ack.n_blocks, " blocks");
  return ack;
}

uint32_t kv_crc_chain(uint32_t chain, uint32_t block_crc) {
  uint8_t le[4];
  store_u32(le, block_crc);
  return crc32c(le, 4, chain);
}

int32_t common_full_blocks(std::span<const int32_t> offered, int32_t n_offered_blocks,
                           std::span<const int32_t> pulled, int32_t block_size) {
  if (block_size <= 0 || n_offered_blocks <= 0) return 0;
  const size_t bs = size_t(block_size);
  const size_t n = std::min({size_t(n_offered_blocks), offered.size() / bs, pulled.size() / bs});
  for (size_t i = 0; i < n; ++i) {
    if (!std::equal(offered.begin() + i * bs, offered.begin() + (i + 1) * bs,
                    pulled.begin() + i * bs))
      return int32_t(i);
  }
  return int32_t(n);
}

}  // namespace sluice
