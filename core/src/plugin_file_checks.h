#pragma once
// Private to core: what can be told about a plugin file from its bytes and its permissions alone,
// before dlopen maps it. Two kinds of file must never reach dlopen:
//
// - A truncated or foreign ELF file. glibc maps each loadable segment at its recorded size even
//   where the file ends sooner, and the first touch of a page past the end kills the process with
//   SIGBUS: a plugin copy cut short (a full disk, an interrupted install) would take every kvq
//   command down with it, whatever backend the command wanted. So the ELF header is read and
//   every segment is checked to lie within the file; class, byte order, type and machine are
//   checked too, so that a plugin built for another machine is named as such.
// - A file another user could have written (as ssh refuses an insecure key): a plugin runs with
//   the rights of whoever loads it. A file that is writable by every user, by a group other than
//   root's or its owner's own, or owned by a user other than root and the one running kvq, is
//   refused; so is a file in a folder for which any of this holds (whoever can write the folder
//   can replace the file). KVQ_ALLOW_INSECURE_PLUGINS=1 loads such files anyway.
#include <filesystem>
#include <string>

namespace kvq::detail {

// The environment variable that lets insecure plugin files load when it is "1".
inline constexpr const char* kAllowInsecurePluginsEnv = "KVQ_ALLOW_INSECURE_PLUGINS";

// Whether KVQ_ALLOW_INSECURE_PLUGINS is "1" (any other value: no, and it is not an error).
bool insecure_plugins_allowed();

// Why the ELF file `file` must not be given to dlopen, "" when nothing is wrong with what its
// headers say. A file that does not start with the ELF magic passes: dlopen reads its first bytes
// with read(2), maps nothing and reports it as not a shared library.
std::string elf_header_refusal(const std::filesystem::path& file);

// Why `file` (a canonical path: its folder is the real one) is insecure, "" when only root and
// the user running kvq can change it or its folder.
std::string permission_refusal(const std::filesystem::path& file);

// The checks above in order (permissions first, skipped when `allow_insecure`), as the reason a
// plugin is listed under "not loaded"; "" when the file may be opened.
std::string plugin_file_refusal(const std::filesystem::path& file, bool allow_insecure);

}  // namespace kvq::detail
