#pragma once
// Ctrl-C (SIGINT) or SIGTERM: the demo stops at the next write, removes any half-written output
// and exits 128 + the signal (130 for Ctrl-C, 143 for SIGTERM: what shells report for a program
// the signal killed). A second signal exits at once (after removing the temporary file, if one is
// being written).
//
// Output files are written whole or not at all (kvq::write_file_atomically: a temporary
// FILE.tmp.XXXXXX, then renamed over FILE), so neither Ctrl-C nor a crash leaves a partial FILE
// behind.
//
// The flag is the one piece of process-wide state in kvq-demo: a signal handler can only talk to
// the program through one.
#include <exception>
#include <filesystem>
#include <string_view>

namespace kvq::demo {

// Thrown where the demo notices the flag; main turns it into interrupted_exit_status().
class Interrupted : public std::exception {
 public:
  const char* what() const noexcept override { return "interrupted"; }
};

// Installs the SIGINT and SIGTERM handler. Call first thing in main.
void install_interrupt_handler();
bool interrupted() noexcept;
// 128 + the signal that interrupted the run (130 when none did).
int interrupted_exit_status() noexcept;
// Throws Interrupted when the flag is set.
void throw_if_interrupted();

// kvq::write_file_atomically with Ctrl-C: interrupted before the rename, the temporary file is
// removed (by the handler on a second Ctrl-C) and Interrupted thrown. Throws kvq::Error (io)
// naming the file when it cannot be written.
void write_file_atomically(const std::filesystem::path& file, std::string_view text);

}  // namespace kvq::demo
