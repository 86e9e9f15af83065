#pragma once
// Output files written whole or not at all. The bytes go to FILE.tmp in FILE's folder, are synced
// to disk, and FILE.tmp is then renamed over FILE (atomic within a file system): a full disk, a
// size limit, a crash or a cancellation mid-write leaves FILE as it was, and no FILE.tmp behind.
// FILE.tmp is kvq's: one a dead run left is reused, but a symbolic link or other non-file there
// is refused, and so is a second process writing the same FILE at once (FILE.tmp is locked).
//
// FILE itself is either new or an existing regular file. Anything else that exists there (after
// following symbolic links) is refused before FILE.tmp is created: the rename would replace a
// device (/dev/null, run as root), a FIFO or a socket with a regular file, and fail on a folder
// only after all the bytes were written. A symbolic link at FILE that leads to a regular file, or
// to nothing, is replaced itself: FILE becomes a regular file holding the new bytes, and the file
// the link named keeps its own bytes (the link is not written through).
#include <cstddef>
#include <filesystem>
#include <functional>
#include <span>
#include <string>
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
// and the system's reason when it cannot be written, and kvq::Error (invalid_argument) when FILE
// exists and is not a regular file: "FILE: is a FIFO: expected a regular file or a new path".
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
// path, a folder, an existing FILE that is not a regular file (a device, a FIFO, a socket; after
// following symbolic links), a parent folder that does not exist, a FILE.tmp that cannot be
// created (it is created and removed; FILE itself is never touched). Throws kvq::Error
// (invalid_argument) whose message starts with `what` ("--json"), then the path and the reason:
// "--output /dev/null: is a character device: expected a regular file or a new path".
KVQ_API void check_writable(const std::filesystem::path& file, std::string_view what);

// What an existing `file` is when it is not a regular file, following symbolic links ("a FIFO",
// "a character device", "a folder", ...); "" for a regular file, a missing one, or one stat(2)
// cannot see (opening it then reports why). An output's rename would replace such a file by a
// regular one (with --output /dev/null, run as root, the system's /dev/null), and dlopen of a FIFO
// blocks until something writes to it.
KVQ_API std::string non_regular_kind(const std::filesystem::path& file);

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
