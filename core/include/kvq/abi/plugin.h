/* The kvq plugin boundary: plain C, so that a backend built by any C or C++ compiler on Linux
 * x86-64 (gcc, clang, another libstdc++ or none) loads into any kvq host of the same ABI version.
 *
 * What crosses: fixed-width integers, const char*, the C structs below (each led by its size, so
 * a later minor version may append fields), function pointers, DLPack DLTensor* for tensors and
 * kvq_page_desc (kvq/abi/page.h) for the cache layout. Nothing is thrown across; C++ types,
 * allocators and loggers never cross.
 *
 *   plugin file libkvq_<name>.so exports   const kvq_plugin* kvq_plugin_entry(void);
 *   host: dlopen(RTLD_NOW | RTLD_LOCAL) -> entry() -> abi_version == KVQ_PLUGIN_ABI_VERSION ?
 *         -> init(host) -> probe() -> create_writer / create_reader / create_runtime
 *         (-> create_attention, when the descriptor has it)
 *
 * Errors: a function returns 0 (KVQ_OK) or a kvq_error_code, and then fills *err: a message
 * (and, optionally, the config key at fault) that the callee owns and keeps valid until its next
 * call on the same thread. Logging: the host hands in kvq_host::log; plugins send their lines
 * there. Objects: a plugin allocates its writers, readers and runtimes and frees them in their
 * destroy(); the host never unloads a plugin.
 *
 * C++ plugin authors use kvq/abi/plugin_cpp.h, which turns a class into these tables and the
 * tables back into exceptions-free C++; docs/plugins.md shows both sides. */
#ifndef KVQ_ABI_PLUGIN_H
#define KVQ_ABI_PLUGIN_H

#include <dlpack/dlpack.h>
#include <stddef.h>
#include <stdint.h>

#include "kvq/abi/page.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The only thing the loader compares: a plugin of another ABI version is refused by name. */
#define KVQ_PLUGIN_ABI_VERSION 2u
#define KVQ_PLUGIN_ENTRY_NAME "kvq_plugin_entry"

enum kvq_error_code {
  KVQ_OK = 0,
  KVQ_ERR_INVALID_ARGUMENT = 1, /* bad input from the caller: shapes, dtypes, values, config */
  KVQ_ERR_OUT_OF_RANGE = 2,     /* an index past its bound */
  KVQ_ERR_NOT_FOUND = 3,
  KVQ_ERR_UNAVAILABLE = 4, /* cannot run here (no CUDA device, ...) */
  KVQ_ERR_IO = 5,
  KVQ_ERR_RUNTIME = 6, /* a failure while running (a CUDA error, ...) */
  KVQ_ERR_INTERNAL = 7 /* a bug */
};

typedef struct kvq_error {
  int32_t code;        /* enum kvq_error_code */
  const char* message; /* one line; owned by the callee until its next call on this thread */
  const char* key;     /* the config key at fault ("device", "threads"), or NULL */
} kvq_error;

enum kvq_log_level {
  KVQ_LOG_TRACE = 0,
  KVQ_LOG_DEBUG = 1,
  KVQ_LOG_INFO = 2,
  KVQ_LOG_WARN = 3,
  KVQ_LOG_ERROR = 4
};

/* What the host hands a plugin once, before anything else; valid for the life of the process. */
typedef struct kvq_host {
  uint32_t struct_size;
  uint32_t abi_version;
  void* context;
  /* Thread-safe. `message` is one line of UTF-8, copied before return. */
  void (*log)(void* context, int32_t level, const char* message);
  /* Whether a line of `level` would be printed: skip formatting it otherwise. */
  int32_t (*log_enabled)(void* context, int32_t level);
} kvq_host;

typedef struct kvq_probe {
  int32_t available;
  int32_t score;      /* for `backend: auto`: the highest available score wins (reference_cpu 10) */
  const char* reason; /* why not available, or what it will use; owned by the plugin */
} kvq_probe;

/* Device as DLPack names it: kDLCPU or kDLCUDA with its ordinal. */
typedef struct kvq_device {
  int32_t type; /* DLDeviceType */
  int32_t id;
} kvq_device;

typedef struct kvq_backend_options {
  uint32_t struct_size;
  const kvq_page_desc* page; /* the cache every object made with these options works on */
  int32_t has_device;        /* 0: the backend's default device */
  kvq_device device;
  int32_t threads; /* CPU backends: worker threads, 0 = hardware concurrency */
} kvq_backend_options;

/* Element types, for kvq_requirements::input_dtypes bits (1 << value); the same values as
 * kvq::DType (kvq/core/dtype.h). */
enum kvq_dtype {
  KVQ_DTYPE_BF16 = 0,
  KVQ_DTYPE_F16 = 1,
  KVQ_DTYPE_F32 = 2,
  KVQ_DTYPE_U8 = 3,
  KVQ_DTYPE_I32 = 4,
  KVQ_DTYPE_I64 = 5
};

/* What a writer or reader needs beyond the contract the host checks for every backend
 * (docs/plugins.md, "The contract"): the host checks these too, before the call crosses. */
enum kvq_requirement_flags {
  KVQ_REQ_LAST_DIM_CONTIGUOUS = 1u << 0, /* key/value (and read outputs): head_size stride 1 */
  KVQ_REQ_SLOTS_CONTIGUOUS = 1u << 1,    /* slot_mapping stride 1 */
  KVQ_REQ_DEVICE_SLOTS = 1u << 2,        /* slot values live on a device: the host cannot read
                                            them; out-of-range slots are skipped and counted
                                            (take_out_of_range_slots), repeats not refused */
  KVQ_REQ_DEVICE_SCALES = 1u << 3,       /* accepts k_scale_ptr / v_scale_ptr on its device */
  KVQ_REQ_HEAD_SCALES = 1u << 4          /* accepts k_head_scales / v_head_scales (fp8 pages) */
};

typedef struct kvq_requirements {
  uint32_t struct_size;
  kvq_device device;      /* where every tensor must live (resolved: no default) */
  uint32_t input_dtypes;  /* bit (1 << kvq_dtype) per accepted key/value dtype */
  uint32_t row_alignment; /* bytes every head row (and the data pointer) starts aligned to; 1 */
  uint32_t flags;         /* enum kvq_requirement_flags */
} kvq_requirements;

typedef struct kvq_write_args {
  uint32_t struct_size;
  const DLTensor* key;          /* [num_tokens, num_kv_heads, head_size] bf16 | f16 | f32 */
  const DLTensor* value;        /* same shape and dtype as key */
  const DLTensor* slot_mapping; /* [num_tokens] int64 | int32; < 0: padding, write nothing */
  const DLTensor* cache;        /* [num_blocks, page_bytes] uint8, contiguous */
  float k_scale;                /* dequantization scales, used when the pointers are NULL */
  float v_scale;
  const float* k_scale_ptr; /* or one f32 each on the writer's device (KVQ_REQ_DEVICE_SCALES) */
  const float* v_scale_ptr;
  void* stream; /* cudaStream_t for CUDA backends (NULL: the legacy default stream) */
  /* Appended in ABI 2.1; read only by a backend declaring KVQ_REQ_HEAD_SCALES (the host passes
   * NULL to others). Per-head dequantization scales [num_kv_heads] f32 on the writer's device,
   * used instead of k_scale / v_scale (which are then 1 and NULL); fp8 pages only. */
  const DLTensor* k_head_scales;
  const DLTensor* v_head_scales;
} kvq_write_args;

typedef struct kvq_read_args {
  uint32_t struct_size;
  const DLTensor* cache;        /* [num_blocks, page_bytes] uint8 */
  const DLTensor* slot_mapping; /* [num_tokens] int64 | int32; < 0: zeros */
  const DLTensor* key;          /* out: [num_tokens, num_kv_heads, head_size] f32 */
  const DLTensor* value;
  float k_scale;
  float v_scale;
  void* stream;
  const DLTensor* k_head_scales; /* as kvq_write_args's (ABI 2.1) */
  const DLTensor* v_head_scales;
} kvq_read_args;

/* Every function below is called with the host's contract already checked: the plugin checks
 * only what it declared in its kvq_requirements (and may trust the rest). */
typedef struct kvq_writer kvq_writer;
typedef struct kvq_writer_ops {
  uint32_t struct_size;
  void (*destroy)(kvq_writer* self);
  const kvq_requirements* (*requirements)(const kvq_writer* self);
  int32_t (*write)(kvq_writer* self, const kvq_write_args* args, kvq_error* err);
  /* Slots skipped since the last call (devices count them instead of checking on the host);
   * synchronizes with the writes issued so far and resets the count. */
  int32_t (*take_out_of_range_slots)(kvq_writer* self, int64_t* count, kvq_error* err);
} kvq_writer_ops;
struct kvq_writer {
  const kvq_writer_ops* ops;
};

typedef struct kvq_reader kvq_reader;
typedef struct kvq_reader_ops {
  uint32_t struct_size;
  void (*destroy)(kvq_reader* self);
  const kvq_requirements* (*requirements)(const kvq_reader* self);
  int32_t (*read)(kvq_reader* self, const kvq_read_args* args, kvq_error* err);
} kvq_reader_ops;
struct kvq_reader {
  const kvq_reader_ops* ops;
};

enum kvq_copy_kind { KVQ_COPY_H2D = 0, KVQ_COPY_D2H = 1, KVQ_COPY_D2D = 2 };

/* Memory and copies on the device a backend's writers use, so that kvq's programs stage tensors
 * without a GPU API of their own. CPU backends have none (the host serves host memory). */
typedef struct kvq_runtime kvq_runtime;
typedef struct kvq_runtime_ops {
  uint32_t struct_size;
  void (*destroy)(kvq_runtime* self);
  kvq_device (*device)(const kvq_runtime* self);
  const char* (*device_name)(const kvq_runtime* self); /* "NVIDIA H200 (sm_90)" */
  void* (*stream)(const kvq_runtime* self);            /* the stream writes should use */
  int32_t (*allocate)(kvq_runtime* self, size_t bytes, void** out, kvq_error* err);
  int32_t (*release)(kvq_runtime* self, void* ptr, kvq_error* err);
  int32_t (*copy)(kvq_runtime* self, void* dst, const void* src, size_t bytes, int32_t kind,
                  kvq_error* err);
  int32_t (*fill)(kvq_runtime* self, void* dst, uint8_t byte, size_t bytes, kvq_error* err);
  int32_t (*synchronize)(kvq_runtime* self, kvq_error* err);
  /* The optional timing extension (`kvq bench`): NULL when the runtime has none. Runs
   * launch(context, stream) warmup + iterations times and writes each timed iteration's
   * milliseconds to out[0 .. iterations); with graph != 0 each iteration is one replay of a CUDA
   * graph of launches_per_graph launches, reported per launch. */
  int32_t (*time)(kvq_runtime* self, int32_t (*launch)(void* context, void* stream), void* context,
                  int32_t warmup, int32_t iterations, int32_t graph, int32_t launches_per_graph,
                  double* out, kvq_error* err);
  /* Device-to-device copy bandwidth (bytes read + written per second) with `bytes` buffers: the
   * ceiling a memory-bound kernel is compared with. NULL when the runtime has none. */
  int32_t (*copy_bandwidth)(kvq_runtime* self, size_t bytes, double* bytes_per_second,
                            kvq_error* err);
} kvq_runtime_ops;
struct kvq_runtime {
  const kvq_runtime_ops* ops;
};

/* ---- decode attention (appended in ABI 2.2: a plugin whose kvq_plugin ends before
 * create_attention has none) ----------------------------------------------------------------
 *
 * One new query token per sequence attends over that sequence's cached K and V:
 *
 *   out[s, q, :] = sum_j softmax_j(softmax_scale * Q[s, q, :] . K[s, j, kv(q), :]) V[s, j, kv(q),
 * :]
 *
 * over the tokens j < seq_lens[s], token j living in page block_tables[s, j / block_size] at
 * row j % block_size; kv(q) = q / (num_q_heads / num_kv_heads) (GQA). K and V are the pages'
 * dequantized values (docs/format.md), each side times its scale (k_scale / v_scale, the device
 * pointer, or the head's k_head_scales / v_head_scales entry). docs/attention.md. */
typedef struct kvq_attention_args {
  uint32_t struct_size;
  const DLTensor* query;        /* [num_seqs, num_q_heads, head_size] bf16 | f16 */
  const DLTensor* block_tables; /* [num_seqs, max_blocks_per_seq] int32 */
  const DLTensor* seq_lens;     /* [num_seqs] int32: 0 = padding (zeros out), else
                                   1 .. max_blocks_per_seq * block_size */
  const DLTensor* cache;        /* [num_blocks, page_bytes] uint8, contiguous */
  const DLTensor* output;       /* out: [num_seqs, num_q_heads, head_size] bf16 | f16 | f32 */
  float k_scale;                /* dequantization scales, used when the pointers are NULL */
  float v_scale;
  const float* k_scale_ptr; /* or one f32 each on the device (KVQ_REQ_DEVICE_SCALES) */
  const float* v_scale_ptr;
  const DLTensor* k_head_scales; /* as kvq_write_args's (KVQ_REQ_HEAD_SCALES), or NULL */
  const DLTensor* v_head_scales;
  float softmax_scale; /* > 0 and finite (the host fills in 1 / sqrt(head_size) by default) */
  /* [workspace_bytes] uint8 on the device, workspace_bytes(num_seqs, num_q_heads,
   * max_blocks_per_seq) long at least; NULL when that is 0. Scratch for split-KV partial results:
   * allocated by the caller once, so attend() allocates nothing and can be captured in a graph. */
  const DLTensor* workspace;
  void* stream; /* cudaStream_t for CUDA backends (NULL: the legacy default stream) */
} kvq_attention_args;

/* Device-side values attend() skipped since the last take (the host checks host-side values
 * before the call instead): block ids outside [0, num_blocks) named by a token < seq_len (the
 * page's tokens are left out of the softmax; counted once per table entry), seq_lens < 0 or
 * past the block table (the sequence's output is zeros; counted once per sequence), and device
 * scales (k_scale_ptr / v_scale_ptr or a head's k_head_scales / v_head_scales entry) outside the
 * scale rule (kvq/core/scale_rule.h: the (sequence, kv head)'s query heads get zeros; counted
 * once per sequence and kv head). `scales` was appended in ABI 2.3: a plugin fills it only when
 * struct_size covers it. */
typedef struct kvq_attention_counts {
  uint32_t struct_size;
  int64_t block_ids;
  int64_t seq_lens;
  int64_t scales;
} kvq_attention_counts;

typedef struct kvq_attention kvq_attention;
typedef struct kvq_attention_ops {
  uint32_t struct_size;
  void (*destroy)(kvq_attention* self);
  /* device, query dtypes (input_dtypes: bf16, f16 bits), flags: KVQ_REQ_DEVICE_SLOTS (block
   * tables and seq_lens on the device: counted, not checked), KVQ_REQ_DEVICE_SCALES,
   * KVQ_REQ_HEAD_SCALES, KVQ_REQ_LAST_DIM_CONTIGUOUS (query and output). */
  const kvq_requirements* (*requirements)(const kvq_attention* self);
  /* Bytes of workspace an attend() of this shape needs (0: none). Host-only, no device work. */
  int32_t (*workspace_bytes)(const kvq_attention* self, int64_t num_seqs, int64_t num_q_heads,
                             int64_t max_blocks_per_seq, uint64_t* bytes, kvq_error* err);
  int32_t (*attend)(kvq_attention* self, const kvq_attention_args* args, kvq_error* err);
  /* Synchronizes with the attends issued so far, fills *counts and resets them. */
  int32_t (*take_out_of_range)(kvq_attention* self, kvq_attention_counts* counts, kvq_error* err);
} kvq_attention_ops;
struct kvq_attention {
  const kvq_attention_ops* ops;
};

typedef struct kvq_plugin {
  uint32_t abi_version; /* always first: KVQ_PLUGIN_ABI_VERSION */
  uint32_t struct_size;
  const char* name;         /* unique among loaded plugins: "reference_cpu" */
  const char* version;      /* the plugin's own */
  const char* formats;      /* what it writes and reads, for `kvq backends`: "nvfp4" */
  const char* layouts;      /* "HND,NHD x linear,sm100_swizzled" */
  const char* input_dtypes; /* "bf16,f16,f32" */
  /* Called once, first; the plugin keeps *host for logging. */
  int32_t (*init)(const kvq_host* host, kvq_error* err);
  int32_t (*probe)(kvq_probe* out, kvq_error* err);
  /* Each returns a new object in *out on success. A plugin refuses a page format it does not
   * write with KVQ_ERR_INVALID_ARGUMENT and key "cache.format". */
  int32_t (*create_writer)(const kvq_backend_options* options, kvq_writer** out, kvq_error* err);
  int32_t (*create_reader)(const kvq_backend_options* options, kvq_reader** out, kvq_error* err);
  /* NULL for backends that work on host memory. */
  int32_t (*create_runtime)(const kvq_backend_options* options, kvq_runtime** out, kvq_error* err);
  /* Appended in ABI 2.2, so always last: present when struct_size reaches past it
   * (KVQ_PLUGIN_HAS_ATTENTION); NULL or absent for a backend without decode attention. */
  int32_t (*create_attention)(const kvq_backend_options* options, kvq_attention** out,
                              kvq_error* err);
} kvq_plugin;

/* The size of an ABI 2.0 descriptor (everything before the appended fields): what the loader
 * requires at least. */
#define KVQ_PLUGIN_MIN_STRUCT_SIZE offsetof(kvq_plugin, create_attention)

/* Whether descriptor *p has decode attention. */
#define KVQ_PLUGIN_HAS_ATTENTION(p)                                                       \
  ((p)->struct_size >= offsetof(kvq_plugin, create_attention) + sizeof(void (*)(void)) && \
   (p)->create_attention != NULL)

typedef const kvq_plugin* (*kvq_plugin_entry_fn)(void);

#ifdef __cplusplus
} /* extern "C" */
#endif

/* Exports `fn` (a `const kvq_plugin* fn(void)`) as the plugin's one entry point. */
#define KVQ_PLUGIN_EXPORT_ENTRY(fn)                                                            \
  extern "C" __attribute__((visibility("default"))) const kvq_plugin* kvq_plugin_entry(void) { \
    return fn();                                                                               \
  }

#endif /* KVQ_ABI_PLUGIN_H */
