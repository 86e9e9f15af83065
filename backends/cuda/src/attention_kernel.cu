// Paged decode attention over kvq's pages (flash-decoding with tensor cores; docs/attention.md).
//
// One CTA = 4 warps = one (split, kv head, 16-query-head tile, sequence). Its tokens go to the
// warps 16 at a time (tile i to warp i % 4). Per tile a warp
//   1. copies the tile's raw K and V rows (and nvfp4 scale bytes) from the pages into its own
//      shared-memory ring with cp.async, STAGES - 1 tiles ahead of the one it computes, so many
//      bytes are in flight without holding registers (the tile's block-table entry is read one
//      tile earlier still);
//   2. S = Q K^T with mma.m16n8k16 (M: the 16 query heads, N: 8 tokens, K: 16 of head_size), in
//      f16 with K dequantized on the fly (fp8: the hardware pair conversion; nvfp4: E2M1 moved
//      into E4M3 bytes of value / 64, that conversion, times the group scale; both exact) and
//      bf16 queries scaled into f16 by a power of two per head; a bf16 cache with bf16 queries
//      runs it in bf16;
//   3. the online softmax in f32 (exp2 domain; the per-tensor or per-head K scale, the head's
//      power of two and softmax_scale folded into one multiply of S; O rescaled only when a
//      row's maximum moved);
//   4. O += P V with mma.m16n8k16 (M: heads, N: 8 of head_size, K: 16 tokens): P in f16 against
//      V's exact f16 values (nvfp4, fp8), or as bf16 hi + lo halves against a bf16 cache.
// Each thread's fragments take a permuted slice of head_size (the dot product does not care; the
// output positions follow the permutation), so each thread reads contiguous bytes of a row:
//   QK: thread (g = lane / 4, t = lane % 4) holds K elements t * D/4 + 4s .. + 3 of token g at
//       k-step s (virtual columns 2t, 2t+1, 2t+8, 2t+9), Q the same elements of heads g, g + 8;
//       nvfp4 takes the 8 elements of k-steps 2u, 2u+1 even ones first (Attend::k_elem);
//   PV: thread (g, t) holds V elements g * D/8 + j of tokens 2t, 2t+1, 2t+8, 2t+9 at n-tile j,
//       and accumulates O elements 2t * D/8 + j, (2t + 1) * D/8 + j of heads g, g + 8 (nvfp4:
//       j's low 3 bits through Attend::v_elem).
// A token left out (past the end, or on a page outside the cache) has its rows zero-filled in
// shared memory and its score masked to -inf, so its P of 0 meets finite values.
// The warps' (max, sum, O) merge in shared memory; with one split the CTA writes the output,
// otherwise (normalized O, log2-sum-exp) per split into the workspace and the reduce kernel
// merges them.
//
// Out-of-range device values: a block id outside [0, num_blocks) drops its page's tokens from
// the softmax (never read) and is counted once per table entry by the kv-head-0 CTAs; a seq_len
// < 0 or past the table makes the sequence empty (zeros), counted once by one CTA; a device K or
// V scale outside the scale rule leaves its (sequence, kv head) out (zeros), counted once.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <cmath>

#include "attention_kernel.h"
#include "attention_query_scale.h"
#include "cuda_util.h"
#include "e2m1_to_e4m3.h"
#include "kvq/core/scale_rule.h"

namespace kvq::cuda {
namespace {

constexpr int kThreads = kAttentionWarps * 32;

template <int Format, int D>
struct Geometry {
  static constexpr int kBits = Format == KVQ_FORMAT_NVFP4 ? 4 : Format == KVQ_FORMAT_BF16 ? 16 : 8;
  static constexpr int kRowBytes = D * kBits / 8;
  static constexpr int kGroups = Format == KVQ_FORMAT_NVFP4 ? D / 16 : 0;  // scale bytes a row
  static constexpr int kKStride = kRowBytes;       // K rows in a stage: 4 lanes read one row
  static constexpr int kVStride = kRowBytes + 16;  // V rows: padded against bank conflicts
  static constexpr int kKData = 16 * kKStride;
  static constexpr int kVData = 16 * kVStride;
  static constexpr int kScales = 16 * kGroups;  // per side
  static constexpr int kStageBytes = (kKData + kVData + 2 * kScales + 15) / 16 * 16;
  static constexpr int kStages = kStageBytes * kAttentionWarps <= 12 * 1024   ? 4
                                 : kStageBytes * kAttentionWarps <= 40 * 1024 ? 3
                                                                              : 2;
  static constexpr int kQBytes = D * 32;  // Q fragments: [D / 16 k-steps][32 lanes] x 16 bytes
  static constexpr int kRingBytes = kAttentionWarps * kStages * kStageBytes;
  static constexpr int kMaskBytes = kAttentionWarps * kStages * 4;
  static constexpr int kMergeBytes = (kAttentionWarps * 16 * D + 2 * kAttentionWarps * 16) * 4;
  static constexpr int kSharedBytes =
      kQBytes + (kRingBytes + kMaskBytes > kMergeBytes ? kRingBytes + kMaskBytes : kMergeBytes);
  // The K bytes one thread reads per row (a quarter row) in pieces of up to 16 bytes.
  static constexpr int kQuarter = kRowBytes / 4;
  static constexpr int kPiece = kQuarter < 16 ? kQuarter : 16;
  static constexpr int kPieces = kQuarter / kPiece;
  static constexpr int kStepsPerPiece = kPiece * 8 / kBits / 4;  // 4 elements a k-step
  static_assert(kPieces * kStepsPerPiece == D / 16, "k-steps cover head_size");
};

// ---- small device helpers ----------------------------------------------------------------------

__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

__device__ __forceinline__ void copy_async(void* dst, const uint8_t* src, int bytes) {
  const uint32_t d = smem_addr(dst);
  switch (bytes) {
    case 16: asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(d), "l"(src)); break;
    case 8: asm volatile("cp.async.ca.shared.global [%0], [%1], 8;" ::"r"(d), "l"(src)); break;
    case 4: asm volatile("cp.async.ca.shared.global [%0], [%1], 4;" ::"r"(d), "l"(src)); break;
    case 2: *static_cast<uint16_t*>(dst) = __ldg(reinterpret_cast<const uint16_t*>(src)); break;
    default: *static_cast<uint8_t*>(dst) = __ldg(src); break;
  }
}

// `bytes` from src + offset into dst, or zeros where src is null (a token left out).
__device__ __forceinline__ void copy_or_zero(void* dst, const uint8_t* src, uint32_t offset,
                                             int bytes) {
  if (src != nullptr) {
    copy_async(dst, src + offset, bytes);
    return;
  }
  switch (bytes) {
    case 16: *static_cast<uint4*>(dst) = make_uint4(0u, 0u, 0u, 0u); break;
    case 8: *static_cast<uint2*>(dst) = make_uint2(0u, 0u); break;
    case 4: *static_cast<uint32_t*>(dst) = 0u; break;
    case 2: *static_cast<uint16_t*>(dst) = 0u; break;
    default: *static_cast<uint8_t*>(dst) = 0u; break;
  }
}

constexpr int log2_of(int v) {
  return v <= 1 ? 0 : 1 + log2_of(v / 2);
}

__device__ __forceinline__ void commit_group() {
  asm volatile("cp.async.commit_group;" ::: "memory");
}

template <int N>
__device__ __forceinline__ void wait_group() {
  asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory");
}

template <bool Bf16>
__device__ __forceinline__ void mma16816(float (&c)[4], const uint4& a, uint32_t b0, uint32_t b1) {
  if constexpr (Bf16) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%0,%1,%2,%3};"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a.x), "r"(a.y), "r"(a.z), "r"(a.w), "r"(b0), "r"(b1));
  } else {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%0,%1,%2,%3};"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a.x), "r"(a.y), "r"(a.z), "r"(a.w), "r"(b0), "r"(b1));
  }
}

__device__ __forceinline__ uint32_t hmul2(uint32_t a, uint32_t b) {
  uint32_t d;
  asm("mul.rn.f16x2 %0, %1, %2;" : "=r"(d) : "r"(a), "r"(b));
  return d;
}

__device__ __forceinline__ uint32_t bf16x2_to_f16x2(uint32_t v) {
  const float lo = __uint_as_float(v << 16), hi = __uint_as_float(v & 0xFFFF0000u);
  const __half2 h = __floats2half2_rn(lo, hi);
  uint32_t out;
  memcpy(&out, &h, 4);
  return out;
}

// Two fp8 codes (low byte first) as f16x2, exactly.
template <int Format>
__device__ __forceinline__ uint32_t fp8x2_to_f16x2(uint32_t two) {
  const __half2_raw h =
      __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(two & 0xFFFFu),
                                 Format == KVQ_FORMAT_FP8_E4M3 ? __NV_E4M3 : __NV_E5M2);
  return static_cast<uint32_t>(h.x) | (static_cast<uint32_t>(h.y) << 16);
}

// An E4M3 scale byte as a pair of equal f16 values (exact).
__device__ __forceinline__ uint32_t scale_pair(uint8_t e4m3) {
  const uint32_t v = __nv_cvt_fp8_to_halfraw(e4m3, __NV_E4M3).x;
  return v | (v << 16);
}

// Four E4M3 bytes (from e2m1x4_to_e4m3x4) as two f16 pairs times the group scale pair `sc`:
// (byte 0, byte 1) and (byte 2, byte 3). Exact: an E2M1 value times a finite E4M3 scale, / 64,
// is a multiple of 2^-16 below 42 with at most six significant bits. One conversion an element
// pair where byte-permute lookups into f16 took five instructions.
__device__ __forceinline__ void e4m3x4_scaled(uint32_t bytes, uint32_t sc, uint32_t& p01,
                                              uint32_t& p23) {
  p01 = hmul2(fp8x2_to_f16x2<KVQ_FORMAT_FP8_E4M3>(bytes), sc);
  p23 = hmul2(fp8x2_to_f16x2<KVQ_FORMAT_FP8_E4M3>(bytes >> 16), sc);
}

template <int D, int Groups>
__device__ __forceinline__ uint8_t scale_byte(const uint8_t* sc, int copy, int tok, int group) {
  return copy == kScalesQuadWords ? sc[(tok >> 2) * Groups * 4 + group * 4 + (tok & 3)]
                                  : sc[tok * Groups + group];
}

__device__ __forceinline__ uint64_t shfl64(uint64_t v, int lane) {
  const uint32_t lo = __shfl_sync(0xFFFFFFFFu, static_cast<uint32_t>(v), lane);
  const uint32_t hi = __shfl_sync(0xFFFFFFFFu, static_cast<uint32_t>(v >> 32), lane);
  return (static_cast<uint64_t>(hi) << 32) | lo;
}

__device__ __forceinline__ void store_output(const AttentionKernelDesc& d, int64_t index, float v) {
  switch (d.output_type) {
    case kOutBf16: static_cast<__nv_bfloat16*>(d.output)[index] = __float2bfloat16_rn(v); break;
    case kOutF16: static_cast<__half*>(d.output)[index] = __float2half_rn(v); break;
    default: static_cast<float*>(d.output)[index] = v; break;
  }
}

__device__ __forceinline__ float side_scale(const AttentionKernelDesc& d, int side, int kvh) {
  const float* heads = side == 0 ? d.k_head_scales : d.v_head_scales;
  const float* ptr = side == 0 ? d.k_scale_ptr : d.v_scale_ptr;
  if (heads != nullptr) return heads[kvh];
  if (ptr != nullptr) return *ptr;
  return side == 0 ? d.k_scale : d.v_scale;
}

// ---- the main kernel ----------------------------------------------------------------------------

template <int Format, int D, bool QBf16>
struct Attend {
  using G = Geometry<Format, D>;
  static constexpr bool kVBf16 = Format == KVQ_FORMAT_BF16;  // PV in bf16 (hi + lo) or f16
  // QK in bf16 only for a bf16 cache read by bf16 queries. Every other pair runs it in f16: fp8
  // and nvfp4 values are exact in f16 (one conversion instruction per pair, none to bf16), and
  // bf16 queries become f16 once per CTA, each head scaled by a power of two (the kernel's
  // prologue).
  static constexpr bool kQkBf16 = Format == KVQ_FORMAT_BF16 && QBf16;
  // nvfp4's K and V values come out of the decode as value / 64 (e2m1x4_to_e4m3x4): the scores'
  // multiplier and the output's V scale take the 64 back.
  static constexpr float kUnit = Format == KVQ_FORMAT_NVFP4 ? 64.0f : 1.0f;

  // The head_size element that thread column t feeds the QK mma at k-step s, i = 2 r + h for B
  // register r, half h (Q's A fragment takes the same elements). Four consecutive elements a
  // k-step; nvfp4 takes each 32-bit word of 8 codes in two k-steps, even elements then odd ones.
  __device__ static constexpr int k_elem(int t, int s, int i) {
    return Format == KVQ_FORMAT_NVFP4 ? t * (D / 4) + 8 * (s >> 1) + (s & 1) + 2 * i
                                      : t * (D / 4) + 4 * s + i;
  }
  // The element of a thread's 8-element V run in PV n-tile e (v_pairs' order).
  __device__ static constexpr int v_elem(int e) {
    return Format == KVQ_FORMAT_NVFP4 ? ((e & 3) << 1) | (e >> 2) : e;
  }

  const AttentionKernelDesc& d;
  uint8_t* ring;  // this warp's stages
  int* masks;     // this warp's per-stage token masks
  int lane, seq, kvh, tile, begin, end;

  // The block id of this lane's token (lane % 16) in tile `ti`, or 0 past the end. Loaded one
  // tile ahead of its issue(), so the table read's latency hides behind a tile's math.
  __device__ __forceinline__ int table_entry(int ti) const {
    const int pos = begin + ti * 16 + (lane & 15);
    if (pos >= end) return 0;
    return d.block_tables[seq * d.table_stride[0] + d.block_div.div(pos) * d.table_stride[1]];
  }

  // Copies tile `ti` (16 tokens from begin + 16 ti; `id` = table_entry(ti)) into stage `slot`;
  // the caller commits.
  __device__ __forceinline__ void issue(int ti, int slot, int id) const {
    uint8_t* st = ring + slot * G::kStageBytes;
    const int j = lane & 15, side = lane >> 4;
    const int pos = begin + ti * 16 + j;
    bool ok = false;
    uint64_t row = 0, scales = 0;
    if (pos < end) {
      uint32_t b, tin;
      d.block_div.divmod(static_cast<uint32_t>(pos), b, tin);
      ok = id >= 0 && id < d.num_blocks;
      if (!ok && side == 0 && tin == 0 && kvh == 0 && tile == 0) {
        atomicAdd(&d.counters->block_ids, 1ull);  // once per table entry (its first token)
      }
      if (ok) {
        const uint8_t* page = d.cache + static_cast<uint64_t>(id) * d.page_bytes;
        const kvq_side_map* m = &d.side[side];
        row = reinterpret_cast<uint64_t>(page + kvq_data_offset(m, tin, kvh));
        if constexpr (Format == KVQ_FORMAT_NVFP4) {
          const int t0 = d.scale_copy[side] == kScalesQuadWords ? (tin & ~3) : tin;
          scales = reinterpret_cast<uint64_t>(page + kvq_scale_offset(m, t0, kvh, 0));
        }
      }
    }
    const unsigned mask = __ballot_sync(0xFFFFFFFFu, ok) & 0xFFFFu;
    if (lane == 0) masks[slot] = static_cast<int>(mask);

    // Data rows: 16 tokens x kRowBytes a side, in pieces of data_access bytes.
    if (d.data_access == 16) {
      copy_rows<16>(st, row);
    } else {
      copy_rows<0>(st, row);
    }
    if constexpr (Format == KVQ_FORMAT_NVFP4) {
      constexpr int S = G::kGroups;
#pragma unroll
      for (int s = 0; s < 2; ++s) {
        uint8_t* dst = st + G::kKData + G::kVData + s * G::kScales;
        const kvq_side_map& m = d.side[s];
        const int copy = d.scale_copy[s];
        if (copy == kScalesLinearWords) {                            // 16 tokens x S / 4 words
          for (int c = lane; c < (4 * S + 31) / 32 * 32; c += 32) {  // every lane shuffles
            const int tok = min(c / (S / 4), 15), word = c % (S / 4);
            const auto src = reinterpret_cast<const uint8_t*>(shfl64(scales, s * 16 + tok));
            if (c < 4 * S) copy_or_zero(dst + tok * S + 4 * word, src, 4 * word, 4);
          }
        } else if (copy == kScalesQuadWords) {  // 4 quads x S words (4 tokens of one group)
          for (int c = lane; c < (4 * S + 31) / 32 * 32; c += 32) {
            const int quad = min(c / S, 3), g = c % S;
            const auto src = reinterpret_cast<const uint8_t*>(shfl64(scales, s * 16 + 4 * quad));
            const uint32_t term = kvq_scale_group_term_qr(&m, g / (S / 4), g % (S / 4));
            const unsigned in = (mask >> (4 * quad)) & 0xFu;  // the quad's tokens taken
            if (c < 4 * S) {
              if (in == 0xFu || src == nullptr) {
                copy_or_zero(dst + quad * S * 4 + g * 4, src, term, 4);
              } else {
                // A quad cut by the end: the page's bytes for the tokens past it may be anything
                // (NaN), and their zero V rows would turn NaN: read the word, keep the taken
                // tokens' bytes (token 4 quad + i in byte i).
                const uint32_t keep =
                    ((in & 1u) | ((in & 2u) << 7) | ((in & 4u) << 14) | ((in & 8u) << 21)) * 0xFFu;
                *reinterpret_cast<uint32_t*>(dst + quad * S * 4 + g * 4) =
                    __ldg(reinterpret_cast<const uint32_t*>(src + term)) & keep;
              }
            }
          }
        } else {  // bytes, stored linear
          for (int c = lane; c < (16 * S + 31) / 32 * 32; c += 32) {
            const int tok = min(c / S, 15), g = c % S;
            const auto src = reinterpret_cast<const uint8_t*>(shfl64(scales, s * 16 + tok));
            if (c < 16 * S) {
              dst[tok * S + g] = src != nullptr ? __ldg(src + kvq_scale_group_term(&m, g)) : 0;
            }
          }
        }
      }
    }
  }

  // Data rows of both sides from each token's row address (`row`: lane j holds K's of token j,
  // lane 16 + j V's; 0 for a token left out, whose row is zero-filled so that its P of 0 meets
  // finite V values). W: the copy width, or 0 for d.data_access (a cache not 16-byte aligned).
  template <int W>
  __device__ __forceinline__ void copy_rows(uint8_t* st, uint64_t row) const {
    const int w = W != 0 ? W : d.data_access;
    // kRowBytes and w are powers of two: the division by pieces a token is a shift.
    const int shift = W != 0 ? log2_of(G::kRowBytes / W) : __ffs(G::kRowBytes / w) - 1;
    const int per_token = 1 << shift;
    const int chunks = 16 * per_token;
#pragma unroll
    for (int s = 0; s < 2; ++s) {
      uint8_t* dst = st + (s == 0 ? 0 : G::kKData);
      const int stride = s == 0 ? G::kKStride : G::kVStride;
#pragma unroll(W != 0 ? 4 : 1)
      for (int c = lane; c < (chunks + 31) / 32 * 32; c += 32) {  // every lane shuffles
        const int tok = min(c >> shift, 15);
        const auto src = reinterpret_cast<const uint8_t*>(shfl64(row, s * 16 + tok));
        const int part = c - (tok << shift);
        if (c < chunks) copy_or_zero(dst + tok * stride + part * w, src, part * w, w);
      }
    }
  }

  // K decode of k-step `ks` of a piece (words w) for token `tok` into the two B registers.
  __device__ __forceinline__ void k_pair(const uint32_t* w, int ks, uint32_t sc, uint32_t& b0,
                                         uint32_t& b1) const {
    if constexpr (Format == KVQ_FORMAT_NVFP4) {  // a word holds two k-steps (k_elem)
      e4m3x4_scaled(e2m1x4_to_e4m3x4(w[ks >> 1], (ks & 1) != 0), sc, b0, b1);
    } else if constexpr (Format == KVQ_FORMAT_BF16) {
      b0 = w[2 * ks];
      b1 = w[2 * ks + 1];
      if constexpr (!QBf16) {
        b0 = bf16x2_to_f16x2(b0);
        b1 = bf16x2_to_f16x2(b1);
      }
    } else {
      b0 = fp8x2_to_f16x2<Format>(w[ks]);
      b1 = fp8x2_to_f16x2<Format>(w[ks] >> 16);
    }
  }

  // 8 consecutive V elements of one token (from `src`) as 4 pairs of the PV type, pair e / 2
  // holding element v_elem(e) in its half e % 2.
  __device__ __forceinline__ void v_pairs(const uint8_t* src, uint32_t sc, uint32_t (&p)[4]) const {
    if constexpr (Format == KVQ_FORMAT_NVFP4) {
      const uint32_t codes = *reinterpret_cast<const uint32_t*>(src);
      e4m3x4_scaled(e2m1x4_to_e4m3x4(codes, false), sc, p[0], p[1]);
      e4m3x4_scaled(e2m1x4_to_e4m3x4(codes, true), sc, p[2], p[3]);
    } else if constexpr (Format == KVQ_FORMAT_BF16) {
      const uint4 v = *reinterpret_cast<const uint4*>(src);
      p[0] = v.x;
      p[1] = v.y;
      p[2] = v.z;
      p[3] = v.w;
    } else {
      const uint2 v = *reinterpret_cast<const uint2*>(src);
      p[0] = fp8x2_to_f16x2<Format>(v.x);
      p[1] = fp8x2_to_f16x2<Format>(v.x >> 16);
      p[2] = fp8x2_to_f16x2<Format>(v.y);
      p[3] = fp8x2_to_f16x2<Format>(v.y >> 16);
    }
  }

  // qk[r]: the score multiplier of row r's head (g, g + 8).
  __device__ __forceinline__ void compute(int slot, const uint4* qfrag, const float (&qk)[2],
                                          float (&m)[2], float (&l)[2],
                                          float (&o)[D / 8][4]) const {
    const uint8_t* st = ring + slot * G::kStageBytes;
    const uint8_t* ksc = st + G::kKData + G::kVData;
    const uint8_t* vsc = ksc + G::kScales;
    const unsigned mask = static_cast<unsigned>(masks[slot]);
    const int g = lane >> 2, t = lane & 3;

    // S = Q K^T: acc[nt] covers tokens nt * 8 .. + 7.
    float acc[2][4];
#pragma unroll
    for (int nt = 0; nt < 2; ++nt) {
      acc[nt][0] = acc[nt][1] = acc[nt][2] = acc[nt][3] = 0.0f;
      const int tok = nt * 8 + g;
      const uint8_t* row = st + tok * G::kKStride + t * G::kQuarter;
#pragma unroll
      for (int pc = 0; pc < G::kPieces; ++pc) {
        uint32_t w[4];
        if constexpr (G::kPiece == 16) {
          const uint4 v = *reinterpret_cast<const uint4*>(row + pc * 16);
          w[0] = v.x;
          w[1] = v.y;
          w[2] = v.z;
          w[3] = v.w;
        } else {
          const uint2 v = *reinterpret_cast<const uint2*>(row + pc * 8);
          w[0] = v.x;
          w[1] = v.y;
          w[2] = w[3] = 0u;
        }
        uint32_t sc = 0;
#pragma unroll
        for (int ks = 0; ks < G::kStepsPerPiece; ++ks) {
          const int s = pc * G::kStepsPerPiece + ks;
          if constexpr (Format == KVQ_FORMAT_NVFP4) {
            if (ks % 4 == 0) {  // a new 16-element group
              const int group = k_elem(t, s, 0) >> 4;
              sc = scale_pair(scale_byte<D, G::kGroups>(ksc, d.scale_copy[0], tok, group));
            }
          }
          uint32_t b0, b1;
          k_pair(w, ks, sc, b0, b1);
          mma16816<kQkBf16>(acc[nt], qfrag[s * 32 + lane], b0, b1);
        }
      }
    }

    // Online softmax, rows g (r = 0) and g + 8 (r = 1), in the exp2 domain.
#pragma unroll
    for (int nt = 0; nt < 2; ++nt) {
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int tok = nt * 8 + 2 * t + (i & 1);
        acc[nt][i] = (mask >> tok) & 1u ? acc[nt][i] * qk[i >> 1] : -INFINITY;
      }
    }
    float alpha[2];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      float mx =
          fmaxf(fmaxf(acc[0][2 * r], acc[0][2 * r + 1]), fmaxf(acc[1][2 * r], acc[1][2 * r + 1]));
      mx = fmaxf(mx, __shfl_xor_sync(0xFFFFFFFFu, mx, 1));
      mx = fmaxf(mx, __shfl_xor_sync(0xFFFFFFFFu, mx, 2));
      const float m_new = fmaxf(m[r], mx);
      const float m_use = m_new == -INFINITY ? 0.0f : m_new;
      alpha[r] = exp2f(m[r] - m_use);  // exactly 1 when the maximum stays
      m[r] = m_new;
      float sum = 0.0f;
#pragma unroll
      for (int nt = 0; nt < 2; ++nt) {
#pragma unroll
        for (int i = 0; i < 2; ++i) {
          acc[nt][2 * r + i] = exp2f(acc[nt][2 * r + i] - m_use);
          sum += acc[nt][2 * r + i];
        }
      }
      l[r] = l[r] * alpha[r] + sum;
    }
    // O is rescaled only when some row's maximum moved: over a long context, rarely.
    if (__any_sync(0xFFFFFFFFu, alpha[0] != 1.0f || alpha[1] != 1.0f)) {
#pragma unroll
      for (int j = 0; j < D / 8; ++j) {
        o[j][0] *= alpha[0];
        o[j][1] *= alpha[0];
        o[j][2] *= alpha[1];
        o[j][3] *= alpha[1];
      }
    }

    // P as the A fragment: rows g, g + 8; columns (tokens) 2t, 2t+1 and 8 + 2t, 8 + 2t + 1.
    uint4 pa, pa_lo{};
    if constexpr (kVBf16) {
      auto split = [](float x, float y, uint32_t& hi, uint32_t& lo) {
        const __nv_bfloat162 h = __floats2bfloat162_rn(x, y);
        const float2 hf = __bfloat1622float2(h);
        const __nv_bfloat162 r = __floats2bfloat162_rn(x - hf.x, y - hf.y);
        memcpy(&hi, &h, 4);
        memcpy(&lo, &r, 4);
      };
      split(acc[0][0], acc[0][1], pa.x, pa_lo.x);
      split(acc[0][2], acc[0][3], pa.y, pa_lo.y);
      split(acc[1][0], acc[1][1], pa.z, pa_lo.z);
      split(acc[1][2], acc[1][3], pa.w, pa_lo.w);
    } else {
      auto pack = [](float x, float y) {
        const __half2 h = __floats2half2_rn(x, y);
        uint32_t u;
        memcpy(&u, &h, 4);
        return u;
      };
      pa.x = pack(acc[0][0], acc[0][1]);
      pa.y = pack(acc[0][2], acc[0][3]);
      pa.z = pack(acc[1][0], acc[1][1]);
      pa.w = pack(acc[1][2], acc[1][3]);
    }

    // O += P V over this thread's V slice: elements g * D/8 + 8 jb .. + 7 of tokens 2t, 2t+1,
    // 2t+8, 2t+9.
    const int toks[4] = {2 * t, 2 * t + 1, 2 * t + 8, 2 * t + 9};
#pragma unroll
    for (int jb = 0; jb < D / 64; ++jb) {
      uint32_t p[4][4];
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int tok = toks[i];
        const int elem = g * (D / 8) + 8 * jb;
        uint32_t sc = 0;
        if constexpr (Format == KVQ_FORMAT_NVFP4) {
          sc = scale_pair(scale_byte<D, G::kGroups>(vsc, d.scale_copy[1], tok, elem >> 4));
        }
        v_pairs(st + G::kKData + tok * G::kVStride + elem * G::kBits / 8, sc, p[i]);
      }
#pragma unroll
      for (int e = 0; e < 8; ++e) {
        const uint32_t sel = (e & 1) ? 0x7632u : 0x5410u;
        const uint32_t b0 = __byte_perm(p[0][e >> 1], p[1][e >> 1], sel);
        const uint32_t b1 = __byte_perm(p[2][e >> 1], p[3][e >> 1], sel);
        mma16816<kVBf16>(o[jb * 8 + e], pa, b0, b1);
        if constexpr (kVBf16) mma16816<true>(o[jb * 8 + e], pa_lo, b0, b1);
      }
    }
  }
};

// A CTA with no tokens: zeros (one split) or an empty partial (log2-sum-exp -inf).
__device__ void write_empty(const AttentionKernelDesc& d, int D, int seq, int qh0, int heads,
                            int split) {
  if (d.num_splits == 1) {
    for (int i = threadIdx.x; i < heads * D; i += blockDim.x) {
      const int h = i / D, e = i % D;
      store_output(
          d, seq * d.output_stride[0] + (qh0 + h) * d.output_stride[1] + e * d.output_stride[2],
          0.0f);
    }
  } else if (static_cast<int>(threadIdx.x) < heads) {
    d.partial_lse[(static_cast<int64_t>(seq) * d.num_q_heads + qh0 + threadIdx.x) * d.num_splits +
                  split] = -INFINITY;
  }
}

template <int Format, int D, bool QBf16>
__global__ void __launch_bounds__(kThreads, D > 128                     ? 1
                                            : Format == KVQ_FORMAT_BF16 ? 3
                                                                        : 4)
    attention_kernel(const __grid_constant__ AttentionKernelDesc d) {
  using G = Geometry<Format, D>;
  extern __shared__ __align__(16) uint8_t smem[];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int seq = blockIdx.z, split = blockIdx.x;
  const int kvh = blockIdx.y / d.head_tiles, tile = blockIdx.y % d.head_tiles;
  // Programmatic dependent launch (launch_programmatic): this grid may start while the kernel
  // before it on the stream (a cache write, say) is still running; nothing is read before the
  // wait, which returns when that kernel has finished and its writes are visible.
  asm volatile("griddepcontrol.wait;" ::: "memory");
  int len = d.seq_lens[seq * d.seq_len_stride];
  if (len < 0 || len > d.max_blocks * static_cast<int>(d.block_div.divisor)) {
    if (split == 0 && blockIdx.y == 0 && threadIdx.x == 0) {
      atomicAdd(&d.counters->seq_lens, 1ull);
    }
    len = 0;
  }
  const int begin = split * d.split_tokens;
  const int end = min(len, begin + d.split_tokens);
  const int head0 = tile * kAttentionHeadsPerTile;
  const int heads = min(kAttentionHeadsPerTile, d.group - head0);
  const int qh0 = kvh * d.group + head0;
  // Device scales meet the scale rule or the (sequence, kv head) is left out: zeros, counted once.
  const float k_scale = side_scale(d, 0, kvh), v_scale = side_scale(d, 1, kvh);
  const bool usable =
      scale_bits_usable(__float_as_uint(k_scale)) && scale_bits_usable(__float_as_uint(v_scale));
  if (!usable && split == 0 && tile == 0 && threadIdx.x == 0) {
    atomicAdd(&d.counters->scales, 1ull);
  }
  if (begin >= end || !usable) {
    write_empty(d, D, seq, qh0, heads, split);
    return;
  }

  // The first tiles' copies go out before the query is read: on a short split the page
  // loads' latency then overlaps the query's.
  uint8_t* region = smem + G::kQBytes;
  Attend<Format, D, QBf16> a{d,
                             region + warp * G::kStages * G::kStageBytes,
                             reinterpret_cast<int*>(region + G::kRingBytes) + warp * G::kStages,
                             lane,
                             seq,
                             kvh,
                             tile,
                             begin,
                             end};
  const int tiles = (end - begin + 15) / 16;
  const int mine = tiles > warp ? (tiles - warp + kAttentionWarps - 1) / kAttentionWarps : 0;

  // Tile k of this warp is the CTA's tile warp + 4 k; `next` holds the table entry of the next
  // one to issue.
  int next = mine > 0 ? a.table_entry(warp) : 0;
#pragma unroll
  for (int k = 0; k < G::kStages - 1; ++k) {
    if (k < mine) {
      const int id = next;
      next = a.table_entry(warp + (k + 1) * kAttentionWarps);
      a.issue(warp + k * kAttentionWarps, k, id);
    }
    commit_group();
  }

  auto query = [&](int h, int e) -> uint32_t {
    return h < heads ? d.query[seq * d.query_stride[0] + (qh0 + h) * d.query_stride[1] +
                               e * d.query_stride[2]]
                     : 0u;
  };
  // bf16 queries for an f16 QK: head h is multiplied by 2^query_shift(its largest magnitude)
  // (attention_query_scale.h), exactly; its scores are multiplied back.
  constexpr bool kToF16 = QBf16 && !Attend<Format, D, QBf16>::kQkBf16;
  __shared__ float q_scale[kAttentionHeadsPerTile], q_unscale[kAttentionHeadsPerTile];
  if constexpr (kToF16) {
    for (int h = warp; h < kAttentionHeadsPerTile; h += kAttentionWarps) {
      float top = 0.0f;
      for (int e = lane; e < D; e += 32) {
        top = fmaxf(top, fabsf(__uint_as_float(query(h, e) << 16)));
      }
      for (int o = 16; o > 0; o >>= 1) top = fmaxf(top, __shfl_xor_sync(0xFFFFFFFFu, top, o));
      const int shift = query_shift(top);
      if (lane == 0) {
        q_scale[h] = pow2(shift);
        q_unscale[h] = pow2(-shift);
      }
    }
    __syncthreads();
  }

  // Q fragments in shared memory, in the order the mma's A operand takes them.
  auto* qfrag = reinterpret_cast<uint4*>(smem);
  for (int i = threadIdx.x; i < D / 16 * 32; i += kThreads) {
    using A = Attend<Format, D, QBf16>;
    const int s = i >> 5, l = i & 31, g = l >> 2, t = l & 3;
    const int e0 = A::k_elem(t, s, 0), e1 = A::k_elem(t, s, 1), e2 = A::k_elem(t, s, 2),
              e3 = A::k_elem(t, s, 3);
    auto q = [&](int h, int e) -> uint32_t {
      const uint32_t bits = query(h, e);
      if constexpr (kToF16) {
        return __half_as_ushort(__float2half_rn(__uint_as_float(bits << 16) * q_scale[h]));
      }
      return bits;
    };
    qfrag[i] = make_uint4(q(g, e0) | (q(g, e1) << 16), q(g + 8, e0) | (q(g + 8, e1) << 16),
                          q(g, e2) | (q(g, e3) << 16), q(g + 8, e2) | (q(g + 8, e3) << 16));
  }
  __syncthreads();

  const float qk_scale = k_scale * d.softmax_scale_log2 * Attend<Format, D, QBf16>::kUnit;
  const float qk[2] = {kToF16 ? qk_scale * q_unscale[lane >> 2] : qk_scale,
                       kToF16 ? qk_scale * q_unscale[(lane >> 2) + 8] : qk_scale};
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};
  float o[D / 8][4];
#pragma unroll
  for (int j = 0; j < D / 8; ++j) o[j][0] = o[j][1] = o[j][2] = o[j][3] = 0.0f;

  for (int k = 0; k < mine; ++k) {
    const int ahead = k + G::kStages - 1;
    if (ahead < mine) {
      const int id = next;
      next = a.table_entry(warp + (ahead + 1) * kAttentionWarps);
      a.issue(warp + ahead * kAttentionWarps, ahead % G::kStages, id);
    }
    commit_group();
    wait_group<G::kStages - 1>();
    __syncwarp();
    a.compute(k % G::kStages, qfrag, qk, m, l, o);
    __syncwarp();
  }
  wait_group<0>();
  // The reduce kernel (or whatever follows) may launch once every CTA is past its tiles; it
  // waits for this grid to finish before reading.
  asm volatile("griddepcontrol.launch_dependents;");
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    l[r] += __shfl_xor_sync(0xFFFFFFFFu, l[r], 1);
    l[r] += __shfl_xor_sync(0xFFFFFFFFu, l[r], 2);
  }
  __syncthreads();  // every warp is done with its ring: the region becomes the merge buffer

  auto* merged = reinterpret_cast<float*>(region);  // [warp][16 heads][D]
  float* wm = merged + kAttentionWarps * 16 * D;    // [warp][16]
  float* wl = wm + kAttentionWarps * 16;
  {
    const int g = lane >> 2, t = lane & 3;
    float* mine_o = merged + warp * 16 * D;
#pragma unroll
    for (int j = 0; j < D / 8; ++j) {
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        const int col = (j & ~7) | Attend<Format, D, QBf16>::v_elem(j & 7);
        mine_o[(g + 8 * r) * D + (2 * t) * (D / 8) + col] = o[j][2 * r];
        mine_o[(g + 8 * r) * D + (2 * t + 1) * (D / 8) + col] = o[j][2 * r + 1];
      }
    }
    if (t == 0) {
      wm[warp * 16 + g] = m[0];
      wm[warp * 16 + g + 8] = m[1];
      wl[warp * 16 + g] = l[0];
      wl[warp * 16 + g + 8] = l[1];
    }
  }
  __syncthreads();

  for (int i = threadIdx.x; i < heads * D; i += kThreads) {
    const int h = i / D, e = i % D;
    float top = -INFINITY;
#pragma unroll
    for (int w = 0; w < kAttentionWarps; ++w) top = fmaxf(top, wm[w * 16 + h]);
    float sum = 0.0f, acc = 0.0f;
    if (top != -INFINITY) {
#pragma unroll
      for (int w = 0; w < kAttentionWarps; ++w) {
        const float f = exp2f(wm[w * 16 + h] - top);
        sum += wl[w * 16 + h] * f;
        acc += merged[(w * 16 + h) * D + e] * f;
      }
    }
    const float value = sum > 0.0f ? acc / sum * (v_scale * Attend<Format, D, QBf16>::kUnit) : 0.0f;
    const int64_t qh = qh0 + h;
    if (d.num_splits == 1) {
      store_output(d, seq * d.output_stride[0] + qh * d.output_stride[1] + e * d.output_stride[2],
                   value);
    } else {
      const int64_t p = (static_cast<int64_t>(seq) * d.num_q_heads + qh) * d.num_splits + split;
      d.partial_out[p * D + e] = value;
      if (e == 0) d.partial_lse[p] = sum > 0.0f ? top + log2f(sum) : -INFINITY;
    }
  }
}

// Merges the splits of one (query head, sequence): weights 2^(lse_i - max), skipping empty
// splits (whose partial output was never written).
template <int D>
__global__ void __launch_bounds__(128)
    attention_reduce_kernel(const __grid_constant__ AttentionKernelDesc d) {
  __shared__ float weight[kAttentionMaxSplits];
  __shared__ float part[4];
  asm volatile("griddepcontrol.wait;" ::: "memory");  // the partials are the main kernel's
  const int qh = blockIdx.x, seq = blockIdx.y, n = d.num_splits;
  const int64_t p0 = (static_cast<int64_t>(seq) * d.num_q_heads + qh) * n;
  float top = -INFINITY;
  for (int i = threadIdx.x; i < n; i += blockDim.x) top = fmaxf(top, d.partial_lse[p0 + i]);
  for (int o = 16; o > 0; o >>= 1) top = fmaxf(top, __shfl_xor_sync(0xFFFFFFFFu, top, o));
  if ((threadIdx.x & 31) == 0) part[threadIdx.x >> 5] = top;
  __syncthreads();
  top = fmaxf(fmaxf(part[0], part[1]), fmaxf(part[2], part[3]));
  __syncthreads();
  float sum = 0.0f;
  for (int i = threadIdx.x; i < n; i += blockDim.x) {
    const float lse = d.partial_lse[p0 + i];
    const float w = top == -INFINITY || lse == -INFINITY ? 0.0f : exp2f(lse - top);
    weight[i] = w;
    sum += w;
  }
  for (int o = 16; o > 0; o >>= 1) sum += __shfl_xor_sync(0xFFFFFFFFu, sum, o);
  if ((threadIdx.x & 31) == 0) part[threadIdx.x >> 5] = sum;
  __syncthreads();
  sum = part[0] + part[1] + part[2] + part[3];
  for (int e = threadIdx.x; e < D; e += blockDim.x) {
    float acc = 0.0f;
    for (int i = 0; i < n; ++i) {
      if (weight[i] != 0.0f) acc += weight[i] * d.partial_out[(p0 + i) * D + e];
    }
    store_output(d, seq * d.output_stride[0] + qh * d.output_stride[1] + e * d.output_stride[2],
                 sum > 0.0f ? acc / sum : 0.0f);
  }
}

// ---- dispatch -----------------------------------------------------------------------------------

template <int Format, int D, bool QBf16>
const void* kernel_of() {
  return reinterpret_cast<const void*>(&attention_kernel<Format, D, QBf16>);
}

template <class Fn>
auto dispatch(int32_t format, int32_t head_size, bool bf16, Fn&& fn) {
  auto by_size = [&](auto f) {
    constexpr int F = decltype(f)::value;
    auto by_q = [&](auto dd) {
      constexpr int Dv = decltype(dd)::value;
      return bf16 ? fn(kernel_of<F, Dv, true>(), Geometry<F, Dv>::kSharedBytes)
                  : fn(kernel_of<F, Dv, false>(), Geometry<F, Dv>::kSharedBytes);
    };
    switch (head_size) {
      case 64: return by_q(std::integral_constant<int, 64>{});
      case 128: return by_q(std::integral_constant<int, 128>{});
      default: return by_q(std::integral_constant<int, 256>{});
    }
  };
  switch (format) {
    case KVQ_FORMAT_FP8_E4M3: return by_size(std::integral_constant<int, KVQ_FORMAT_FP8_E4M3>{});
    case KVQ_FORMAT_FP8_E5M2: return by_size(std::integral_constant<int, KVQ_FORMAT_FP8_E5M2>{});
    case KVQ_FORMAT_BF16: return by_size(std::integral_constant<int, KVQ_FORMAT_BF16>{});
    default: return by_size(std::integral_constant<int, KVQ_FORMAT_NVFP4>{});
  }
}

}  // namespace

size_t attention_shared_bytes(int32_t format, int32_t head_size) noexcept {
  return dispatch(format, head_size, true,
                  [](const void*, int bytes) { return static_cast<size_t>(bytes); });
}

cudaError_t prepare_attention_kernels(int32_t format, int32_t head_size) noexcept {
  for (bool bf16 : {true, false}) {
    const cudaError_t err = dispatch(format, head_size, bf16, [](const void* k, int bytes) {
      return cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes);
    });
    if (err != cudaSuccess) return err;
  }
  return cudaSuccess;
}

int attention_ctas_per_sm(int32_t format, int32_t head_size) noexcept {
  int blocks = 0;
  const cudaError_t err = dispatch(format, head_size, true, [&](const void* k, int bytes) {
    return cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, k, kThreads,
                                                         static_cast<size_t>(bytes));
  });
  return err == cudaSuccess && blocks > 0 ? blocks : 1;
}

Status launch_attention(const AttentionKernelDesc& d, int32_t format, int32_t head_size,
                        bool query_bf16, int32_t num_seqs, cudaStream_t stream,
                        int ordinal) noexcept {
  if (num_seqs == 0) return Status::ok();
  const dim3 grid(static_cast<unsigned>(d.num_splits),
                  static_cast<unsigned>(d.num_kv_heads * d.head_tiles),
                  static_cast<unsigned>(num_seqs));
  if (Status s = dispatch(format, head_size, query_bf16,
                          [&](const void* kernel, int bytes) {
                            return launch_programmatic("attention kernel", kernel, &d, sizeof d,
                                                       grid, kThreads, static_cast<size_t>(bytes),
                                                       stream, ordinal);
                          });
      !s) {
    return s;
  }
  if (d.num_splits == 1) return Status::ok();
  const dim3 reduce_grid(static_cast<unsigned>(d.num_q_heads), static_cast<unsigned>(num_seqs));
  const void* reduce = head_size == 64 ? reinterpret_cast<const void*>(&attention_reduce_kernel<64>)
                       : head_size == 128
                           ? reinterpret_cast<const void*>(&attention_reduce_kernel<128>)
                           : reinterpret_cast<const void*>(&attention_reduce_kernel<256>);
  return launch_programmatic("attention reduce kernel", reduce, &d, sizeof d, reduce_grid, 128, 0,
                             stream, ordinal);
}

}  // namespace kvq::cuda
