/* kvq's page layout as data: the one definition of where every byte of a cache page lives.
 *
 * Header-only C (C99 and C++, host and CUDA device code), no kvq library needed: an engine can
 * include it in its own kernels and fuse kvq's page write or read into them, as FlashInfer's
 * page.cuh allows. The host layout (kvq::PageLayout), the CPU reference backend, the CUDA kernels
 * and `kvq layout --svg` all take their offsets from the functions below; docs/format.md draws
 * the pages they describe.
 *
 * A page (T = block_size tokens, H = num_kv_heads, D = head_size, S = D / group_size groups):
 *
 *     [ K side | V side ]       side = [ data region | scale region ]   (no scale region for
 *                                                                        fp8 and bf16 pages)
 *     data row (t, h): data_base + t * data_t + h * data_h               D * elem_bits / 8 bytes
 *     scale (t, h, g): scale_base + (t & ~3) * scale_t4 + (t & 3) * scale_t1 + h * scale_h
 *                      + (g / scale_group_div) * scale_gq + (g % scale_group_div) * scale_gr
 *
 * A scale arrangement is the six scale terms of that affine map (CuTe's shape:stride in all but
 * name), filled in by kvq_page_desc_init() and nowhere else. With rt / rh the bytes between two
 * tokens' / heads' scale rows (HND: rt = S, rh = T * S; NHD: rt = H * S, rh = S):
 *
 *     linear          t4 = t1 = rt, h = rh, group_div = S,     gq = 0,  gr = 1
 *     sm100_swizzled  t4 = rt, t1 = 1, h = rh, group_div = S/4, gq = rt, gr = 4
 *
 * sm100_swizzled is trtllm-gen's 4-token interleave: each block of 4 tokens x S groups of a head's
 * [T, S] tile is stored transposed, so the 4 tokens' scales of one group form one 32-bit word:
 *
 *     S = 8, tokens 0..3 (HND tile offsets):   t=0 t=1 t=2 t=3
 *                                        g=0     0   1   2   3     <- one 32-bit word
 *                                        g=1     4   5   6   7
 *                                        ...
 *                                        g=7    28  29  30  31
 *
 * Offsets are 32-bit (kvq_page_desc_init refuses pages of 2^32 bytes or more); a cache byte is
 * page_index * page_bytes + offset, computed in 64 bits. */
#ifndef KVQ_ABI_PAGE_H
#define KVQ_ABI_PAGE_H

#include <stdint.h>

#if defined(__CUDACC__)
#define KVQ_PAGE_FN static __host__ __device__ __forceinline__
#else
#define KVQ_PAGE_FN static inline
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* Values are stable: they cross the plugin boundary and are stored in cache files. */
enum kvq_format {
  KVQ_FORMAT_NVFP4 = 1,    /* E2M1 values, one E4M3 scale per 16 elements */
  KVQ_FORMAT_FP8_E4M3 = 2, /* one byte per element, no scale region */
  KVQ_FORMAT_FP8_E5M2 = 3,
  KVQ_FORMAT_BF16 = 4 /* unquantized */
};

enum kvq_order {
  KVQ_ORDER_HND = 0, /* head-major: each head's tokens contiguous (trtllm-gen, FlashInfer HND) */
  KVQ_ORDER_NHD = 1  /* token-major: each token's heads contiguous */
};

enum kvq_scale_arrangement {
  KVQ_SCALES_LINEAR = 0,
  KVQ_SCALES_SM100_SWIZZLED = 1,
  KVQ_SCALES_NONE = -1 /* formats without a scale region */
};

/* Why kvq_page_desc_init refused a geometry (0: it did not). */
enum kvq_page_refusal {
  KVQ_PAGE_OK = 0,
  KVQ_PAGE_BAD_FORMAT = 1,       /* format */
  KVQ_PAGE_BAD_ORDER = 2,        /* order */
  KVQ_PAGE_BAD_ARRANGEMENT = 3,  /* k_scales or v_scales (side in *side) */
  KVQ_PAGE_NOT_POSITIVE = 4,     /* a size < 1 */
  KVQ_PAGE_HEAD_SIZE_GROUPS = 5, /* head_size % group_size != 0 */
  KVQ_PAGE_SWIZZLE_TOKENS = 6,   /* sm100_swizzled with block_size % 4 != 0 */
  KVQ_PAGE_SWIZZLE_GROUPS = 7,   /* sm100_swizzled with (head_size / 16) % 4 != 0 */
  KVQ_PAGE_TOO_LARGE = 8,        /* page_bytes >= 2^32 */
  KVQ_PAGE_CACHE_TOO_LARGE = 9   /* num_blocks * page_bytes >= 2^63 */
};

/* One side's (K's or V's) affine maps. */
typedef struct kvq_side_map {
  uint32_t data_base;  /* data region start within the page */
  uint32_t data_t;     /* bytes between the rows of consecutive tokens of one head */
  uint32_t data_h;     /* bytes between the rows of consecutive heads of one token */
  uint32_t scale_base; /* scale region start (== the region's end for formats without scales) */
  uint32_t scale_t4;
  uint32_t scale_t1;
  uint32_t scale_h;
  uint32_t scale_gq;
  uint32_t scale_gr;
  uint32_t scale_group_div; /* >= 1 */
} kvq_side_map;

typedef struct kvq_page_desc {
  int32_t format;      /* enum kvq_format */
  int32_t order;       /* enum kvq_order: how the maps were made (the maps decide) */
  int32_t scales[2];   /* enum kvq_scale_arrangement of K and V */
  uint32_t elem_bits;  /* 4 (nvfp4), 8 (fp8), 16 (bf16) */
  uint32_t group_size; /* elements sharing one scale byte (16 for nvfp4); 0: no scales */
  int64_t num_blocks;
  int64_t block_size;   /* T: tokens per page */
  int64_t num_kv_heads; /* H */
  int64_t head_size;    /* D */
  uint32_t page_bytes;  /* < 2^32 */
  uint32_t side_bytes;  /* page_bytes / 2 */
  uint32_t row_bytes;   /* data bytes of one head row: D * elem_bits / 8 */
  uint32_t groups;      /* S = D / group_size scale bytes per head row; 0 without scales */
  kvq_side_map side[2]; /* 0 = K, 1 = V */
} kvq_page_desc;

/* ---- offsets (side 0 = K, 1 = V; t < block_size, h < num_kv_heads, g < groups) ---- */

/* The first data byte of head row (t, h). Element e of the row is at + e * elem_bits / 8 (nvfp4:
 * the pair of elements 2k, 2k+1 shares byte k, the even one in the low nibble). */
KVQ_PAGE_FN uint32_t kvq_data_offset(const kvq_side_map* m, uint32_t t, uint32_t h) {
  return m->data_base + t * m->data_t + h * m->data_h;
}

/* The group part of a scale offset from g's quotient and remainder by scale_group_div (a kernel
 * divides with its own faster division, then calls this). */
KVQ_PAGE_FN uint32_t kvq_scale_group_term_qr(const kvq_side_map* m, uint32_t q, uint32_t r) {
  return q * m->scale_gq + r * m->scale_gr;
}

/* The group part of a scale offset: a kernel thread whose group never changes computes it once. */
KVQ_PAGE_FN uint32_t kvq_scale_group_term(const kvq_side_map* m, uint32_t g) {
  return kvq_scale_group_term_qr(m, g / m->scale_group_div, g % m->scale_group_div);
}

/* The scale byte of group g of head row (t, h), from kvq_scale_group_term(m, g). */
KVQ_PAGE_FN uint32_t kvq_scale_offset_from_term(const kvq_side_map* m, uint32_t t, uint32_t h,
                                                uint32_t group_term) {
  return m->scale_base + (t & ~3u) * m->scale_t4 + (t & 3u) * m->scale_t1 + h * m->scale_h +
         group_term;
}

KVQ_PAGE_FN uint32_t kvq_scale_offset(const kvq_side_map* m, uint32_t t, uint32_t h, uint32_t g) {
  return kvq_scale_offset_from_term(m, t, h, kvq_scale_group_term(m, g));
}

/* ---- names: the words configs, cache files and messages use ---- */

KVQ_PAGE_FN const char* kvq_format_name(int32_t format) {
  return format == KVQ_FORMAT_NVFP4      ? "nvfp4"
         : format == KVQ_FORMAT_FP8_E4M3 ? "fp8_e4m3"
         : format == KVQ_FORMAT_FP8_E5M2 ? "fp8_e5m2"
         : format == KVQ_FORMAT_BF16     ? "bf16"
                                         : "?";
}

KVQ_PAGE_FN const char* kvq_order_name(int32_t order) {
  return order == KVQ_ORDER_HND ? "HND" : order == KVQ_ORDER_NHD ? "NHD" : "?";
}

KVQ_PAGE_FN const char* kvq_scale_arrangement_name(int32_t arrangement) {
  return arrangement == KVQ_SCALES_LINEAR           ? "linear"
         : arrangement == KVQ_SCALES_SM100_SWIZZLED ? "sm100_swizzled"
         : arrangement == KVQ_SCALES_NONE           ? "none"
                                                    : "?";
}

/* ---- building a descriptor: the one place a format, an order or an arrangement becomes numbers */

KVQ_PAGE_FN uint32_t kvq_format_elem_bits(int32_t format) {
  return format == KVQ_FORMAT_NVFP4                                       ? 4u
         : format == KVQ_FORMAT_FP8_E4M3 || format == KVQ_FORMAT_FP8_E5M2 ? 8u
         : format == KVQ_FORMAT_BF16                                      ? 16u
                                                                          : 0u;
}

KVQ_PAGE_FN uint32_t kvq_format_group_size(int32_t format) {
  return format == KVQ_FORMAT_NVFP4 ? 16u : 0u;
}

/* Fills *d, or returns why not (enum kvq_page_refusal; *bad_side says which side's arrangement
 * for KVQ_PAGE_BAD_ARRANGEMENT and the swizzle refusals). Formats without scales take
 * KVQ_SCALES_NONE for both sides. */
KVQ_PAGE_FN int32_t kvq_page_desc_init(kvq_page_desc* d, int32_t format, int32_t order,
                                       int32_t k_scales, int32_t v_scales, int64_t num_blocks,
                                       int64_t block_size, int64_t num_kv_heads, int64_t head_size,
                                       int32_t* bad_side) {
  const uint32_t bits = kvq_format_elem_bits(format);
  const uint32_t group = kvq_format_group_size(format);
  const int32_t arrangements[2] = {k_scales, v_scales};
  int32_t s;
  *bad_side = 0;
  if (bits == 0u) return KVQ_PAGE_BAD_FORMAT;
  if (order != KVQ_ORDER_HND && order != KVQ_ORDER_NHD) return KVQ_PAGE_BAD_ORDER;
  for (s = 0; s < 2; ++s) {
    const int32_t a = arrangements[s];
    const int ok = group == 0u ? a == KVQ_SCALES_NONE
                               : a == KVQ_SCALES_LINEAR || a == KVQ_SCALES_SM100_SWIZZLED;
    if (!ok) {
      *bad_side = s;
      return KVQ_PAGE_BAD_ARRANGEMENT;
    }
  }
  if (num_blocks < 1 || block_size < 1 || num_kv_heads < 1 || head_size < 1) {
    return KVQ_PAGE_NOT_POSITIVE;
  }
  if (group != 0u && head_size % (int64_t)group != 0) return KVQ_PAGE_HEAD_SIZE_GROUPS;
  {
    /* Every product below is checked against 2^32 before it is taken in 32 bits. */
    const int64_t limit = (int64_t)1 << 32;
    const int64_t S = group != 0u ? head_size / (int64_t)group : 0;
    int64_t rows, row_bytes, data_bytes, side_bytes;
    if (block_size >= limit || num_kv_heads >= limit || head_size >= limit) {
      return KVQ_PAGE_TOO_LARGE;
    }
    rows = block_size * num_kv_heads; /* < 2^64: each factor < 2^32 */
    row_bytes = head_size * (int64_t)bits / 8;
    if (rows >= limit || row_bytes >= limit || rows > (limit - 1) / row_bytes) {
      return KVQ_PAGE_TOO_LARGE;
    }
    data_bytes = rows * row_bytes;
    side_bytes = data_bytes + rows * S; /* S <= row_bytes * 2 / 16: no overflow past 2^36 */
    if (side_bytes * 2 >= limit) return KVQ_PAGE_TOO_LARGE;
    if (num_blocks > (int64_t)(((uint64_t)1 << 63) - 1u) / (side_bytes * 2)) {
      return KVQ_PAGE_CACHE_TOO_LARGE;
    }
    for (s = 0; s < 2; ++s) {
      if (arrangements[s] == KVQ_SCALES_SM100_SWIZZLED) {
        if (block_size % 4 != 0) {
          *bad_side = s;
          return KVQ_PAGE_SWIZZLE_TOKENS;
        }
        if (S % 4 != 0) {
          *bad_side = s;
          return KVQ_PAGE_SWIZZLE_GROUPS;
        }
      }
    }
    {
      const uint32_t T = (uint32_t)block_size, H = (uint32_t)num_kv_heads;
      const uint32_t rb = (uint32_t)row_bytes, G = (uint32_t)S;
      const int hnd = order == KVQ_ORDER_HND;
      const uint32_t rt = hnd ? G : H * G; /* scale bytes between two tokens' rows */
      const uint32_t rh = hnd ? T * G : G; /* ... between two heads' rows */
      d->format = format;
      d->order = order;
      d->elem_bits = bits;
      d->group_size = group;
      d->num_blocks = num_blocks;
      d->block_size = block_size;
      d->num_kv_heads = num_kv_heads;
      d->head_size = head_size;
      d->side_bytes = (uint32_t)side_bytes;
      d->page_bytes = (uint32_t)(side_bytes * 2);
      d->row_bytes = rb;
      d->groups = G;
      for (s = 0; s < 2; ++s) {
        kvq_side_map* m = &d->side[s];
        const int swizzled = arrangements[s] == KVQ_SCALES_SM100_SWIZZLED;
        d->scales[s] = arrangements[s];
        m->data_base = (uint32_t)s * (uint32_t)side_bytes;
        m->data_t = hnd ? rb : H * rb;
        m->data_h = hnd ? T * rb : rb;
        m->scale_base = m->data_base + (uint32_t)data_bytes;
        m->scale_t4 = rt;
        m->scale_t1 = swizzled ? 1u : rt;
        m->scale_h = rh;
        m->scale_group_div = swizzled ? G / 4u : (G > 0u ? G : 1u);
        m->scale_gq = swizzled ? rt : 0u;
        m->scale_gr = swizzled ? 4u : 1u;
        if (G == 0u) m->scale_t4 = m->scale_t1 = m->scale_h = m->scale_gr = 0u;
      }
    }
  }
  return KVQ_PAGE_OK;
}

#ifdef __cplusplus
} /* extern "C" */
#endif

#undef KVQ_PAGE_FN
#endif /* KVQ_ABI_PAGE_H */
