// Which shared library this process's std::filesystem functions run from. PyTorch's 2.x libraries
// export copies of them, linked statically from an older libstdc++, and the dynamic linker binds a
// name to the first library in the process that defines it: a binary that lists LibTorch ahead of
// libstdc++ runs those copies against its own compiler's headers, and on the GPU image every file
// it wrote crashed (docs/RELIABILITY.md, "Linking against LibTorch").
#pragma once

#include <string>

namespace wam {

// The path of the LibTorch library (libtorch*, libc10*) that std::filesystem runs from in this
// process; empty when it runs from libstdc++ (or the lookup cannot tell: another standard
// library, no such symbol).
std::string std_filesystem_libtorch_library();

}  // namespace wam
