#pragma once
// Output files written whole or not at all. The bytes go to FILE.tmp in FILE's folder, are synced
// to disk, and FILE.tmp is then renamed over FILE (atomic within a file system): a full disk, a
// size limit, a crash or a cancellation mid-write leaves FILE as it was, and no FILE.tmp behind.
// FILE.tmp is kvq's: one a dead run left is reused, but a symbolic link or other non-file there
// is refused, and so is a second process writing the same FILE at once (FILE.tmp is locked).
#include <cstddef>
#include <filesystem>
#include <functional>
#include <span>
#include <string_view>

#include "kvq/core/export.h"

namespace kvq {

// Bytes handed to one write(2): small enough that `cancelled` is asked often on a slow disk.
inline constexpr std::size_t kFileWriteChunkBytes = std::size_t{64} << 20;

// FILE.tmp: where write_file_atomically puts the bytes before the rename.
KVQ_API std::filesystem::path temporary_path_for(const std::filesystem::path& file);

// Writes `bytes` to FILE.tmp and renames it over FILE. `cancelled`, when given, is asked between
// chunks (and after a write interrupted by a signal); once it says true the temporary file is
// removed and the call returns false with FILE untouched. Throws kvq::Error (io) naming the file
// and the system's reason when it cannot be written.
KVQ_API bool write_file_atomically(const std::filesystem::path& file,
                                   std::span<const std::byte> bytes,
                                   const std::function<bool()>& cancelled = {});
KVQ_API bool write_file_atomically(const std::filesystem::path& file, std::string_view text,
                                   const std::function<bool()>& cancelled = {});
// The same for the concatenation of `pieces`, written in order from where they are (a file's
// header and its tensors' own memory: no copy of the whole file).
KVQ_API bool write_file_atomically(const std::filesystem::path& file,
                                   std::span<const std::span<const std::byte>> pieces,
                                   const std::function<bool()>& cancelled = {});

// Fails now where write_file_atomically(file, ...) would fail later for a reason known in
// advance, so that a command does not do minutes of work for an output it cannot write: an empty
// path, a folder, a parent folder that does not exist, a FILE.tmp that cannot be created (it is
// created and removed; FILE itself is never touched). Throws kvq::Error (invalid_argument) whose
// message starts with `what` ("--json"), then the path and the reason.
KVQ_API void check_writable(const std::filesystem::path& file, std::string_view what);

// Whether two paths name one file: the same path, or, where both exist, the same file by another
// name (a link).
KVQ_API bool same_file(const std::filesystem::path& a, const std::filesystem::path& b);

// Refuses an output that is one of the command's inputs (the write would replace what it reads):
// the same path, or, where both exist, the same file by another name; and an output whose FILE.tmp
// is the input (the write would truncate it). An empty `input` (an optional flag not given)
// passes. Throws kvq::Error (invalid_argument): "--output OUT: is the
// --input file: expected a different file".
KVQ_API void check_distinct(const std::filesystem::path& output, std::string_view output_what,
                            const std::filesystem::path& input, std::string_view input_what);

}  // namespace kvq
