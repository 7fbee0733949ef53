// Which shared library this process's std::filesystem functions run from. PyTorch's 2.x libraries
// export copies of them, linked statically from an older libstdc++, and the dynamic linker binds a
// name to the first library in the process that defines it: a binary that lists LibTorch ahead of
// libstdc++ runs those copies against its own compiler's headers, and on the GPU image every file
// it wrote crashed (docs/RELIABILITY.md, "Linking against LibTorch").
#pragma once

#include <string>

namespace wam {

// Empty when std::filesystem resolves into libstdc++ (or the lookup cannot tell: another standard
// library, no such symbol); else which LibTorch library it resolves into, and what to do.
std::string std_filesystem_binding_problem();

}  // namespace wam
