// Layer 1: the pipeline file as plain data. Reads the JSON, follows "extends", applies `--set`
// overrides, loads the included config fragments, expands ${VAR} references and resolves {"$ref":
// "include/pointer"} values. Problems are collected, never thrown one at a time.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "wam/error.h"
#include "wam/params.h"

namespace wam {

// What a node does when processing a sample throws: stop the run, or drop the sample and count it.
enum class OnError { kFail, kSkip };
constexpr auto enum_names(OnError) {
  return std::array{EnumName{OnError::kFail, "fail"}, EnumName{OnError::kSkip, "skip"}};
}

struct NodeConfig {
  std::string id;
  std::string type;
  std::vector<std::string> inputs;
  nlohmann::json params = nlohmann::json::object();  // includes resolved
  nlohmann::json concurrency;                        // null when not set in the file
  OnError on_error = OnError::kFail;
  std::string pointer;  // "/nodes/3"
  // A $ref in params names an include that could not be loaded (reported once, at the include):
  // the params are not validated, as every param it would have filled would be reported again.
  bool params_incomplete = false;
};

struct PipelineConfig {
  std::string file;
  std::string name;
  nlohmann::json settings = nlohmann::json::object();
  std::map<std::string, nlohmann::json> includes;    // name -> fragment content
  std::map<std::string, std::string> include_files;  // name -> resolved path
  std::vector<NodeConfig> nodes;
};

struct LoadOptions {
  std::vector<std::string> overrides;  // "path.to.key=VALUE", VALUE parsed as JSON else a string
};

// Never throws for content problems: they go to `diagnostics`. Throws nothing else either; a
// config with diagnostics must not be used.
PipelineConfig load_pipeline_config(const std::string& file, const LoadOptions& options,
                                    Diagnostics& diagnostics);

// A pipeline file after its "extends" chain is followed, before `--set` overrides apply.
struct ResolvedDocument {
  std::optional<nlohmann::json> document;  // nothing when a file of the chain cannot be used
  std::map<std::string, std::string> include_files;  // include name -> the file that names it
};

// A pipeline file may derive from another: {"extends": "robotwin_online.json", ...patch}. The base
// (a path relative to the deriving file's folder) is resolved first, with its own "extends"; the
// rest of the file is merged over it as a JSON Merge Patch (RFC 7386: objects merge key by key,
// null removes a key, any other value replaces), except "nodes", which maps node ids of the base
// to a merge patch of that node. Problems name the deriving file and the pointer of the patch.
ResolvedDocument resolve_extends(const std::string& file, Diagnostics& diagnostics);

// Reads and parses one JSON file; parse errors are reported as
// `file:line:col: malformed JSON: ...`.
std::optional<nlohmann::json> read_json_file(const std::string& file, Diagnostics& diagnostics);

// Expands ${VAR} and ${VAR:-default} in every string of `value`. Known project variables
// (WAM_DATA_ROOT, WAM_CACHE_ROOT, WAM_LATENT_CACHE, WAM_COMPILE_CACHE, ...) have defaults.
void expand_environment(nlohmann::json& value, const std::string& file, const std::string& pointer,
                        Diagnostics& diagnostics);
// The value of a variable with the project's defaults applied; empty when unset and unknown.
std::optional<std::string> environment_value(const std::string& name);
// One line per variable with a project default, as ${VAR} expands now: `  NAME=VALUE`, followed
// by `  (default)` when it is not set (what `--print-config` shows).
std::string describe_environment();

// Applies one `path.to.key=VALUE` override. Array elements are addressed by index or, for arrays
// of objects with an "id", by that id (`nodes.decode.params.mode=sparse`).
void apply_override(nlohmann::json& document, const std::string& assignment,
                    Diagnostics& diagnostics);

std::string pointer_append(const std::string& pointer, const std::string& key);

}  // namespace wam
