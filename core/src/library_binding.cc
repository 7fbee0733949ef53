#include "wam/library_binding.h"

#include <dlfcn.h>

namespace wam {

std::string std_filesystem_libtorch_library() {
  // Functions the project calls on every write, as libstdc++ names and versions them (C++11 ABI).
  // The lookup follows the process's own binding order, so it finds what the binary's calls run.
  // No std::filesystem here: this runs when those calls may be the broken ones.
  static constexpr const char* kNames[] = {
      "_ZNSt10filesystem6statusERKNS_7__cxx114pathE",
      "_ZNSt10filesystem18create_directoriesERKNS_7__cxx114pathE",
      "_ZNSt10filesystem19temp_directory_pathB5cxx11Ev"};
  for (const char* name : kNames) {
    void* address = dlvsym(RTLD_DEFAULT, name, "GLIBCXX_3.4.26");
    Dl_info info{};
    if (address == nullptr || dladdr(address, &info) == 0 || info.dli_fname == nullptr) continue;
    const std::string file = info.dli_fname;
    const std::string base = file.substr(file.rfind('/') + 1);
    if (base.rfind("libtorch", 0) == 0 || base.rfind("libc10", 0) == 0) return file;
  }
  return {};
}

}  // namespace wam
