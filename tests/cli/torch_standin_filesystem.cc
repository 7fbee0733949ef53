// Stands in for a LibTorch library that exports std::filesystem::status (pytorch/pytorch#133437):
// the symbol under libstdc++'s name, unversioned, as PyTorch's copies are. Only looked up, never
// called (tests/cli/filesystem_binding_test.sh).
extern "C" void standin_filesystem_status() __asm__("_ZNSt10filesystem6statusERKNS_7__cxx114pathE");
extern "C" void standin_filesystem_status() {}
