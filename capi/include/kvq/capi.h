/* kvq's C API: the host C++ API (kvq/core) as plain C functions, for callers that cannot link C++
 * -- above all the Python package, which loads libkvq_capi.so with ctypes, so that one build
 * serves every Python version (docs/python.md).
 *
 * Conventions:
 * - Every function that can fail returns a kvq_capi_status: 0 on success, else a kvq::ErrorCode
 *   (1 invalid_argument, 2 out_of_range, 3 not_found, 4 unavailable, 5 io, 6 runtime,
 *   7 internal). The message and config key of the last failure on the calling thread stay
 *   readable through kvq_capi_last_error_message() / _key() until that thread's next failure.
 * - Objects are opaque handles freed by their own *_free function (NULL is a no-op). A writer or
 *   reader keeps its backend's plugin loaded; it does not need its config or backend to live on.
 * - Strings returned as char* (JSON) are the caller's, freed with kvq_capi_string_free().
 * - Tensors cross as DLPack DLTensor* (borrowed for the call), or packed as int64 words for the
 *   callers that know a tensor's fields without a DLTensor (kvq_capi_writer_write_packed).
 */
#ifndef KVQ_CAPI_H
#define KVQ_CAPI_H

#include <dlpack/dlpack.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define KVQ_CAPI_EXPORT __attribute__((visibility("default")))
/* The C API's version: the Python package refuses a library of another major version. */
#define KVQ_CAPI_VERSION 1

typedef int32_t kvq_capi_status;
typedef struct kvq_capi_config kvq_capi_config;   /* a checked config (its layout built) */
typedef struct kvq_capi_backend kvq_capi_backend; /* an opened backend with its options */
typedef struct kvq_capi_writer kvq_capi_writer;
typedef struct kvq_capi_reader kvq_capi_reader;

KVQ_CAPI_EXPORT int32_t kvq_capi_version(void);
KVQ_CAPI_EXPORT const char* kvq_capi_kvq_version(void); /* "0.1.0" */

/* The last failure on this thread. */
KVQ_CAPI_EXPORT const char* kvq_capi_last_error_message(void);
KVQ_CAPI_EXPORT const char* kvq_capi_last_error_key(void); /* "" when no config key is at fault */

KVQ_CAPI_EXPORT void kvq_capi_string_free(char* s);

/* Log level: trace|debug|info|warn|error|off (KVQ_LOG_LEVEL, when set, wins). */
KVQ_CAPI_EXPORT kvq_capi_status kvq_capi_set_log_level(const char* level);

/* ---- config: load_config / parse_config plus the layout's checks (as the kvq commands) ---- */
KVQ_CAPI_EXPORT kvq_capi_status kvq_capi_config_load(const char* path, kvq_capi_config** out);
KVQ_CAPI_EXPORT kvq_capi_status kvq_capi_config_parse(const char* yaml, const char* source,
                                                      kvq_capi_config** out);
KVQ_CAPI_EXPORT void kvq_capi_config_free(kvq_capi_config* cfg);
/* The config and its layout as JSON: {"source", "backend", "device", "threads", "cache": {...},
 * "cache_shape": [num_blocks, page_bytes], "page_bytes", "cache_bytes", "side_bytes",
 * "layout": {metadata()}, "regions": [{name, offset, bytes, arrangement}]}. */
KVQ_CAPI_EXPORT kvq_capi_status kvq_capi_config_json(const kvq_capi_config* cfg, char** out);

/* ---- backends ---- */
/* Every plugin found on cfg's search path (cfg NULL: KVQ_PLUGIN_PATH and the installed folder)
 * with its probe, and the files that failed to load: {"plugins": [{name, version, file, formats,
 * layouts, input_dtypes, available, score, reason}], "failures": [{file, reason}]}. */
KVQ_CAPI_EXPORT kvq_capi_status kvq_capi_backends_json(const kvq_capi_config* cfg, char** out);
/* open_backend(cfg, name): name NULL or "" for the config's `backend`; device NULL or "" for the
 * config's `device`, else "auto", "cpu" or "cuda:N". */
KVQ_CAPI_EXPORT kvq_capi_status kvq_capi_backend_open(const kvq_capi_config* cfg, const char* name,
                                                      const char* device, kvq_capi_backend** out);
KVQ_CAPI_EXPORT void kvq_capi_backend_free(kvq_capi_backend* backend);
/* {"name", "version", "file", "formats", "layouts", "input_dtypes", "score", "reason"} */
KVQ_CAPI_EXPORT kvq_capi_status kvq_capi_backend_json(const kvq_capi_backend* backend, char** out);

/* ---- writers ---- */
KVQ_CAPI_EXPORT kvq_capi_status kvq_capi_writer_create(const kvq_capi_backend* backend,
                                                       kvq_capi_writer** out);
KVQ_CAPI_EXPORT void kvq_capi_writer_free(kvq_capi_writer* writer);
/* "cpu" or "cuda:N", valid as long as the writer. */
KVQ_CAPI_EXPORT const char* kvq_capi_writer_device(const kvq_capi_writer* writer);
/* KVCacheWriter::write: key, value [T, H, D]; slot_mapping [T]; cache [num_blocks, page_bytes]
 * u8. k_scale_ptr / v_scale_ptr: NULL, or one f32 on the writer's device (read by the kernel).
 * stream: a cudaStream_t (NULL: the legacy default stream); ignored on the CPU. */
KVQ_CAPI_EXPORT kvq_capi_status kvq_capi_writer_write(kvq_capi_writer* writer, const DLTensor* key,
                                                      const DLTensor* value, const DLTensor* cache,
                                                      const DLTensor* slot_mapping, float k_scale,
                                                      float v_scale, const float* k_scale_ptr,
                                                      const float* v_scale_ptr, void* stream);
/* The same with the four tensors (key, value, cache, slot_mapping, in this order) packed as
 * int64 words, each tensor [data, device_type (DLDeviceType), device_id, dtype_code
 * (DLDataTypeCode), dtype_bits, ndim, shape[ndim]..., strides[ndim]... (elements)]; `words`
 * holds `count` of them. Lanes are 1 and byte_offset 0. */
KVQ_CAPI_EXPORT kvq_capi_status kvq_capi_writer_write_packed(
    kvq_capi_writer* writer, const int64_t* words, int64_t count, float k_scale, float v_scale,
    const float* k_scale_ptr, const float* v_scale_ptr, void* stream);
/* KVCacheWriter::take_out_of_range_slots: slots skipped on the device since the last call. */
KVQ_CAPI_EXPORT kvq_capi_status kvq_capi_writer_take_out_of_range_slots(kvq_capi_writer* writer,
                                                                        int64_t* count);

/* ---- readers ---- */
KVQ_CAPI_EXPORT kvq_capi_status kvq_capi_reader_create(const kvq_capi_backend* backend,
                                                       kvq_capi_reader** out);
KVQ_CAPI_EXPORT void kvq_capi_reader_free(kvq_capi_reader* reader);
KVQ_CAPI_EXPORT const char* kvq_capi_reader_device(const kvq_capi_reader* reader);
/* KVCacheReader::read into key and value, [T, H, D] f32. */
KVQ_CAPI_EXPORT kvq_capi_status kvq_capi_reader_read(kvq_capi_reader* reader, const DLTensor* cache,
                                                     const DLTensor* slot_mapping,
                                                     const DLTensor* key, const DLTensor* value,
                                                     float k_scale, float v_scale, void* stream);
/* The same with the four tensors (cache, slot_mapping, key, value) packed as for writes. */
KVQ_CAPI_EXPORT kvq_capi_status kvq_capi_reader_read_packed(kvq_capi_reader* reader,
                                                            const int64_t* words, int64_t count,
                                                            float k_scale, float v_scale,
                                                            void* stream);

/* ---- cache files: the safetensors file of `kvq write --output` and `kvq read --cache` ---- */
/* Writes `cache` (host memory, [num_blocks, page_bytes] u8 in cfg's layout) with the layout and
 * the scales in __metadata__, whole or not at all. */
KVQ_CAPI_EXPORT kvq_capi_status kvq_capi_cache_file_save(const kvq_capi_config* cfg,
                                                         const char* path, const DLTensor* cache,
                                                         float k_scale, float v_scale);
/* Loads `path`, checks its layout against cfg's and copies its pages into `cache` (host memory,
 * [num_blocks, page_bytes] u8, contiguous). has_*_scale: 1 when the file records that scale. */
KVQ_CAPI_EXPORT kvq_capi_status kvq_capi_cache_file_load(const kvq_capi_config* cfg,
                                                         const char* path, const DLTensor* cache,
                                                         float* k_scale, int32_t* has_k_scale,
                                                         float* v_scale, int32_t* has_v_scale);

#ifdef __cplusplus
}
#endif
#endif /* KVQ_CAPI_H */
