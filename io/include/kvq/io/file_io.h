#pragma once
// Output files written whole or not at all. The bytes go to a temporary file FILE.tmp.XXXXXX in
// FILE's folder, made for this write alone (a name no file had: never an existing file, a link
// or a FIFO), are synced to disk, and the temporary is then renamed over FILE (atomic within a
// file system): a full disk, a size limit, a crash or a cancellation mid-write leaves FILE as it
// was, and no temporary behind but after a crash. Two writers of one FILE at once each write
// their own temporary, and FILE is at every moment one whole file, the one renamed last: no
// writer can truncate or refill another's bytes before its rename. A temporary a killed run left
// is never reused; each write names the ones it finds in a warning, with their size.
//
// FILE itself is either new or an existing regular file. Anything else that exists there (after
// following symbolic links) is refused before the temporary is created: the rename would replace
// a device (/dev/null, run as root), a FIFO or a socket with a regular file, and fail on a folder
// only after all the bytes were written. A symbolic link at FILE that leads to a regular file, or
// to nothing, is replaced itself: FILE becomes a regular file holding the new bytes, and the file
// the link named keeps its own bytes (the link is not written through).
#include <cstddef>
#include <filesystem>
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "kvq/core/export.h"
#include "kvq/core/file_kind.h"  // non_regular_kind

namespace kvq {

// Bytes handed to one write(2): small enough that `cancelled` is asked often on a slow disk.
inline constexpr std::size_t kFileWriteChunkBytes = std::size_t{64} << 20;

// The temporaries are named FILE + kTemporaryInfix + six letters or digits.
inline constexpr const char* kTemporaryInfix = ".tmp.";

// The temporary files of FILE's writes that exist now, sorted: FILE.tmp.XXXXXX, and FILE.tmp as
// earlier kvq versions named their one temporary. Some may be in use by a running write.
KVQ_API std::vector<std::filesystem::path> temporary_files_of(const std::filesystem::path& file);
// Those of them that no running write holds (each write locks its own until its rename): left by
// a write that was killed, and safe to remove.
KVQ_API std::vector<std::filesystem::path> stale_temporary_files_of(
    const std::filesystem::path& file);

// Told the path of the temporary file once it exists, and an empty path once it is gone (renamed
// over FILE or removed), from the writing thread: a program that removes it on a second Ctrl-C
// (kvq-demo) learns its name here.
using TemporaryFileFn = std::function<void(const std::filesystem::path&)>;

// Writes `bytes` to a new temporary file and renames it over FILE. `cancelled`, when given, is
// asked before the temporary is made, between chunks (and after a write interrupted by a signal),
// and once more when every byte is on disk, just before the rename; once it says true the
// temporary file is removed and the call returns false with FILE untouched. Throws kvq::Error (io)
// naming the file and the system's reason when it cannot be written, and kvq::Error
// (invalid_argument) when FILE exists and is not a regular file: "FILE: is a FIFO: expected a
// regular file or a new path".
KVQ_API bool write_file_atomically(const std::filesystem::path& file,
                                   std::span<const std::byte> bytes,
                                   const std::function<bool()>& cancelled = {},
                                   const TemporaryFileFn& temporary = {});
KVQ_API bool write_file_atomically(const std::filesystem::path& file, std::string_view text,
                                   const std::function<bool()>& cancelled = {},
                                   const TemporaryFileFn& temporary = {});
// The same for the concatenation of `pieces`, written in order from where they are (a file's
// header and its tensors' own memory: no copy of the whole file).
KVQ_API bool write_file_atomically(const std::filesystem::path& file,
                                   std::span<const std::span<const std::byte>> pieces,
                                   const std::function<bool()>& cancelled = {},
                                   const TemporaryFileFn& temporary = {});

// Fails now where write_file_atomically(file, ...) would fail later for a reason known in
// advance, so that a command does not do minutes of work for an output it cannot write: an empty
// path, a folder, an existing FILE that is not a regular file (a device, a FIFO, a socket; after
// following symbolic links), a parent folder that does not exist, a temporary file that cannot
// be created beside FILE (one is created and removed; FILE itself is never touched). Throws
// kvq::Error (invalid_argument) whose message starts with `what` ("--json"), then the path and the
// reason:
// "--output /dev/null: is a character device: expected a regular file or a new path".
KVQ_API void check_writable(const std::filesystem::path& file, std::string_view what);

// Whether two paths name one file: the same path, or, where both exist, the same file by another
// name (a link).
KVQ_API bool same_file(const std::filesystem::path& a, const std::filesystem::path& b);

// Refuses an output that is one of the command's inputs (the write would replace what it reads):
// the same path, or, where both exist, the same file by another name. (The temporary a write
// makes is a new file, so it is never an input.) An empty `input` (an optional flag not given)
// passes. Throws kvq::Error (invalid_argument): "--output OUT: is the
// --input file: expected a different file".
KVQ_API void check_distinct(const std::filesystem::path& output, std::string_view output_what,
                            const std::filesystem::path& input, std::string_view input_what);

}  // namespace kvq
