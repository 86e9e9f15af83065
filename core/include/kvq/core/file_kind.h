#pragma once
// What kind of file a path names, for messages that refuse it: core's plugin loader (dlopen of a
// FIFO blocks until something writes to it) and kvq/io's output checks both ask.
#include <filesystem>
#include <string>

#include "kvq/core/export.h"

namespace kvq {

// What an existing `file` is when it is not a regular file, following symbolic links ("a FIFO",
// "a character device", "a folder", ...); "" for a regular file, a missing one, or one stat(2)
// cannot see (opening it then reports why). An output's rename would replace such a file by a
// regular one (with --output /dev/null, run as root, the system's /dev/null), and dlopen of a FIFO
// blocks until something writes to it.
KVQ_API std::string non_regular_kind(const std::filesystem::path& file);

}  // namespace kvq
