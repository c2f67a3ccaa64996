// Row-level entry points: argument checks, the float formats (F32/F16/BF16), and dispatch of
// block types to the per-block reference codecs (quants_legacy.cpp, quants_k.cpp).
#include "gguf/quants.h"

#include <bit>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>

#include "base/fp16.h"
#include "gguf/quants_impl.h"

namespace sluice {
namespace {

static_assert(std::endian::native == std::endian::little,
              "block structs are read with memcpy and assume a little-endian host");

constexpr int64_t kMaxBlockElems = 256;

// One block type: its row functions. `src`/`dst` point at whole blocks, any alignment.
struct BlockCodec {
  GgmlType type;
  int64_t block_size;  // weights per block
  size_t type_size;    // bytes per block
  void (*dequantize)(const uint8_t* src, float* y);
  void (*quantize)(const float* x, uint8_t* dst);
};

// Blocks are copied in and out with memcpy: rows in a mapped file need not be aligned for the
// struct, and the copy is negligible next to the codec.
template <class Block>
constexpr BlockCodec codec_for(GgmlType type) {
  static_assert(Block::kElems <= kMaxBlockElems);
  return BlockCodec{
      type,
      Block::kElems,
      sizeof(Block),
      [](const uint8_t* src, float* y) {
        Block b;
        std::memcpy(&b, src, sizeof b);
        quant_ref::dequantize_block(b, y);
      },
      [](const float* x, uint8_t* dst) {
        Block b{};
        quant_ref::quantize_block(x, b);
        std::memcpy(dst, &b, sizeof b);
      },
  };
}

constexpr BlockCodec kCodecs[] = {
    codec_for<BlockQ4_0>(GgmlType::Q4_0),    codec_for<BlockQ4_1>(GgmlType::Q4_1),
    codec_for<BlockQ5_0>(GgmlType::Q5_0),    codec_for<BlockQ5_1>(GgmlType::Q5_1),
    codec_for<BlockQ8_0>(GgmlType::Q8_0),    codec_for<BlockQ8_1>(GgmlType::Q8_1),
    codec_for<BlockQ2K>(GgmlType::Q2_K),     codec_for<BlockQ3K>(GgmlType::Q3_K),
    codec_for<BlockQ4K>(GgmlType::Q4_K),     codec_for<BlockQ5K>(GgmlType::Q5_K),
    codec_for<BlockQ6K>(GgmlType::Q6_K),     codec_for<BlockQ8K>(GgmlType::Q8_K),
    codec_for<BlockIq4Nl>(GgmlType::IQ4_NL), codec_for<BlockMxfp4>(GgmlType::MXFP4),
};

const BlockCodec* find_codec(GgmlType type) {
  for (const BlockCodec& c : kCodecs) {
    if (c.type == type) return &c;
  }
  return nullptr;
}

bool is_float_type(GgmlType type) {
  return type == GgmlType::F32 || type == GgmlType::F16 || type == GgmlType::BF16;
}

std::string describe(GgmlType type) {
  const TypeTraits* tr = type_traits(uint32_t(type));
  return tr ? std::string(tr->name) : "type id " + std::to_string(uint32_t(type));
}

std::string format_float(float v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", double(v));
  return buf;
}

// Checks shared by both directions; `op` names the caller in messages.
Status check_row(const char* op, GgmlType type, bool supported, int64_t n) {
  if (!supported) {
    return make_error(op, ": unsupported type ", describe(type),
                      " (supported: f32, f16, bf16, q4_0, q4_1, q5_0, q5_1, q8_0, q8_1, q2_K, "
                      "q3_K, q4_K, q5_K, q6_K, q8_K, iq4_nl, mxfp4)");
  }
  const int64_t block_size = type_traits(type).block_size;
  if (n < 0 || n % block_size != 0) {
    return make_error(op, "(", describe(type), "): n = ", n,
                      " is not a non-negative multiple of the block size ", block_size);
  }
  return Status();
}

}  // namespace

bool can_dequantize(GgmlType type) {
  return is_float_type(type) || find_codec(type) != nullptr;
}
bool can_quantize(GgmlType type) {
  return can_dequantize(type);
}

Status dequantize_row(GgmlType type, const void* src, float* dst, int64_t n) {
  SLUICE_RETURN_IF_ERROR(check_row("dequantize_row", type, can_dequantize(type), n));
  const auto* bytes = static_cast<const uint8_t*>(src);
  switch (type) {
    case GgmlType::F32:
      if (n > 0) std::memcpy(dst, bytes, size_t(n) * sizeof(float));
      return Status();
    case GgmlType::F16:
    case GgmlType::BF16:
      for (int64_t i = 0; i < n; ++i) {
        uint16_t h;
        std::memcpy(&h, bytes + 2 * i, 2);
        dst[i] = type == GgmlType::F16 ? f16_to_f32(h) : bf16_to_f32(h);
      }
      return Status();
    default:
      break;
  }
  const BlockCodec& codec = *find_codec(type);
  const int64_t n_blocks = n / codec.block_size;
  for (int64_t i = 0; i < n_blocks; ++i) {
    codec.dequantize(bytes + size_t(i) * codec.type_size, dst + i * codec.block_size);
  }
  return Status();
}

Status quantize_row(GgmlType type, const float* src, void* dst, int64_t n) {
  SLUICE_RETURN_IF_ERROR(check_row("quantize_row", type, can_quantize(type), n));
  auto* bytes = static_cast<uint8_t*>(dst);
  switch (type) {
    case GgmlType::F32:
      if (n > 0) std::memcpy(bytes, src, size_t(n) * sizeof(float));
      return Status();
    case GgmlType::F16:
    case GgmlType::BF16:
      for (int64_t i = 0; i < n; ++i) {
        const uint16_t h = type == GgmlType::F16 ? f32_to_f16(src[i]) : f32_to_bf16(src[i]);
        std::memcpy(bytes + 2 * i, &h, 2);
      }
      return Status();
    default:
      break;
  }

  // Block formats: finite input only (ggml would write garbage scales for NaN/inf), and every
  // block must decode to finite values, which catches f16 scale overflow on huge inputs. The
  // check costs one dequantization per block.
  for (int64_t i = 0; i < n; ++i) {
    if (!std::isfinite(src[i])) {
      return make_error("quantize_row(", describe(type), "): element ", i, " is ",
                        format_float(src[i]), "; only finite values can be quantized");
    }
  }
  const BlockCodec& codec = *find_codec(type);
  const int64_t n_blocks = n / codec.block_size;
  float decoded[kMaxBlockElems];
  for (int64_t i = 0; i < n_blocks; ++i) {
    const float* x = src + i * codec.block_size;
    uint8_t* block = bytes + size_t(i) * codec.type_size;
    codec.quantize(x, block);
    codec.dequantize(block, decoded);
    for (int64_t j = 0; j < codec.block_size; ++j) {
      if (std::isfinite(decoded[j])) continue;
      float amax = 0.0f;
      for (int64_t k = 0; k < codec.block_size; ++k) amax = std::fmax(amax, std::fabs(x[k]));
      return make_error("quantize_row(", describe(type), "): block ", i, " (elements ",
                        i * codec.block_size, "..", (i + 1) * codec.block_size - 1,
                        ", max |x| = ", format_float(amax),
                        ") is out of range: its f16 scale or offset overflows");
    }
  }
  return Status();
}

}  // namespace sluice
