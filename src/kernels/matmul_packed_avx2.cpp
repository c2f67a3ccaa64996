// AVX2 kernels over PackedWeights (packed.h), the same packed layout as the AVX-512 VNNI ones:
// a 64-byte vector [16 rows][4 bytes] is two 256-bit halves, rows 0-7 and rows 8-15, so one
// vpmaddubsw + vpmaddwd against the broadcast 4 activation bytes gives lane r = row r's partial
// dot, with no horizontal sums.
//
// vpmaddubsw (u8 x s8, int16 pair sums that saturate past 32767) sets what each type may sum in
// 16 bits before widening:
//   Q4_0, Q4_K: q in [0, 15]: a pair sum <= 2 * 15 * 127 = 3810, so the int16 sums of 8 vectors
//     (one block / sub-block) fit and are widened once (one vpmaddwd per 8 vpmaddubsw);
//   Q6_K: q in [0, 63]: <= 16002, two vectors per 16-bit sum;
//   Q8_0: stored q + 128 for vpdpbusd; here q = stored ^ 0x80 is signed and the product goes
//     through the sign trick (|q| as u8 times sign(q) * x as s8, <= 2 * 128 * 127 = 32512): one
//     widening per vector, and no bias term.
// Integer sums are exact, and each output takes one f32 fused multiply-add per block in column
// order (Q4_K: per sub-block, then its minimum), whatever the tile: a row's result does not
// depend on the batch it was computed in or the thread count.
//
// Tiles: NH halves (8 rows each) x NX activation rows. Decode (few rows) takes both halves of a
// group at once, so every 64-byte line of the weight stream is read once, in order; prefill
// takes one half x 4 activation rows (16 ymm registers: 4 f32 + 4 int accumulators and the
// decoded weights).
#define SLUICE_PACKED_NS kern_avx2
#define SLUICE_TARGET __attribute__((target("avx2,fma,f16c")))
#define SLUICE_PACKED_VNNI 0
#include "kernels/matmul_packed_avx2.inc"
