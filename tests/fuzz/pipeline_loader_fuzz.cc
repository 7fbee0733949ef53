// Fuzz target: the pipeline loader and validator (layers 1 and 2), torch-free. One input is up to
// four parts separated by NUL bytes (which JSON text never holds):
//
//   pipeline JSON \0 fragment a \0 fragment b \0 overrides, one `path.to.key=VALUE` per line
//
// written to pipelines/p.json, configs/fuzz/a.json and configs/fuzz/b.json of a scratch project
// root that also holds a copy of the shipped configs/ and pipelines/, so the shipped pipelines (the
// seeds) resolve their includes and bases, and fuzzed ones may include "configs/fuzz/a.json" or
// extend "robotwin_online.json". The pipeline is loaded and validated against the test stages
// (tests/testing/test_stages.h).
//
// The oracle: loading returns a pipeline or throws ConfigError whose every diagnostic names a
// file and says something. Anything else escaping (std::bad_alloc, json::exception,
// std::out_of_range, ...) or any sanitizer report is a finding.
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>
#include <vector>

#include "fuzz/fuzz_files.h"
#include "testing/test_stages.h"
#include "wam/pipeline.h"

namespace {

namespace fs = std::filesystem;

const fs::path& scratch_root() {
  static const fs::path root = [] {
    fs::path dir = wam::fuzz::make_scratch_dir("wam-fuzz");
    std::error_code ec;
    fs::copy(fs::path(WAM_SOURCE_DIR) / "configs", dir / "configs", fs::copy_options::recursive,
             ec);
    fs::copy(fs::path(WAM_SOURCE_DIR) / "pipelines", dir / "pipelines", fs::copy_options::recursive,
             ec);
    fs::create_directories(dir / "configs/fuzz");
    fs::create_directories(dir / "pipelines");
    return dir;
  }();
  return root;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  const std::vector<std::string_view> parts = wam::fuzz::split_at_nul(input, 4);
  const fs::path& root = scratch_root();
  const std::string pipeline = (root / "pipelines/p.json").string();
  wam::fuzz::write_or_remove(pipeline, &parts[0]);
  wam::fuzz::write_or_remove(root / "configs/fuzz/a.json", parts.size() > 1 ? &parts[1] : nullptr);
  wam::fuzz::write_or_remove(root / "configs/fuzz/b.json", parts.size() > 2 ? &parts[2] : nullptr);
  wam::LoadOptions options;
  if (parts.size() > 3) {
    for (size_t start = 0; start <= parts[3].size() && options.overrides.size() < 16;) {
      size_t end = parts[3].find('\n', start);
      if (end == std::string_view::npos) end = parts[3].size();
      if (end > start) options.overrides.emplace_back(parts[3].substr(start, end - start));
      start = end + 1;
    }
  }
  try {
    wam::ValidatedPipeline validated =
        wam::load_pipeline(pipeline, options, wam::testing::test_registry());
    // A valid pipeline: what validate, graph and --print-config show.
    (void)validated.effective_config().dump(2);
    (void)validated.to_dot();
  } catch (const wam::ConfigError& e) {
    if (e.diagnostics().empty()) std::abort();
    for (const auto& d : e.diagnostics().items()) {
      if (d.file.empty() || d.message.empty()) std::abort();  // an error naming nothing
    }
  }
  return 0;
}
