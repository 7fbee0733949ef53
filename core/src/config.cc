#include "wam/config.h"

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <filesystem>
#include <set>

#include "wam/limits.h"
#include "wam/params.h"

namespace fs = std::filesystem;
using nlohmann::json;

namespace wam {

std::string pointer_append(const std::string& pointer, const std::string& key) {
  std::string escaped;
  for (char c : key) {
    if (c == '~')
      escaped += "~0";
    else if (c == '/')
      escaped += "~1";
    else
      escaped += c;
  }
  return pointer + "/" + escaped;
}

namespace {

// Text from outside JSON files (command-line overrides, environment variables) must be UTF-8
// before it becomes a JSON string: dumping one that is not throws (files are checked by the
// parser). The JSON library's strict serialiser is the check.
bool is_utf8(const std::string& text) {
  try {
    (void)json(text).dump();
    return true;
  } catch (const json::type_error&) {
    return false;
  }
}

// The text with each invalid UTF-8 byte shown as U+FFFD, for naming it in a message.
std::string printable(const std::string& text) {
  const std::string quoted = json(text).dump(-1, ' ', false, json::error_handler_t::replace);
  return quoted.substr(1, quoted.size() - 2);
}

}  // namespace

std::optional<json> read_json_file(const std::string& file, Diagnostics& diagnostics) {
  std::string error;
  auto text = read_regular_file(file, kMaxConfigFileBytes, error);
  if (!text) {
    diagnostics.error_in(file, "", "cannot read file: " + error);
    return std::nullopt;
  }
  JsonTextError parse_error;
  auto value = parse_json_text(*text, parse_error);
  if (!value) diagnostics.error_in(file, parse_error.location, parse_error.message);
  return value;
}

namespace {

// The files whose "extends" are being followed, the loaded one first.
struct ExtendsChain {
  std::vector<std::string> files;   // as named in messages
  std::vector<fs::path> canonical;  // as compared to find a cycle
};

// A deriving file's "nodes": node id -> merge patch of the base's node with that id.
void patch_nodes(json& base, const json& patches, const std::string& file,
                 const std::string& base_file, Diagnostics& diagnostics) {
  if (!patches.is_object()) {
    diagnostics.error_in(file, "/nodes",
                         "in a pipeline that extends another, \"nodes\" maps node ids of the base "
                         "to patches, e.g. {\"step\": {\"params\": {\"mode\": \"eager\"}}}");
    return;
  }
  auto nodes = base.find("nodes");
  if (nodes == base.end() || !nodes->is_array()) {
    diagnostics.error_in(file, "/nodes",
                         "the base pipeline " + base_file + " has no \"nodes\" array to patch");
    return;
  }
  std::vector<std::string> ids;
  for (const auto& node : *nodes) {
    if (node.is_object() && node.value("id", json()).is_string()) ids.push_back(node["id"]);
  }
  for (auto it = patches.begin(); it != patches.end(); ++it) {
    const std::string pointer = pointer_append("/nodes", it.key());
    json* target = nullptr;
    for (auto& node : *nodes) {
      if (node.is_object() && node.value("id", json()) == it.key()) target = &node;
    }
    if (!target) {
      const std::string suggestion = closest_match(it.key(), ids);
      std::vector<std::string> shown;
      for (const auto& id : ids) shown.push_back(shorten(id));
      diagnostics.error_in(
          file, pointer,
          "no node \"" + shorten(it.key()) + "\" in the base pipeline " + base_file +
              (suggestion.empty() ? "" : "; did you mean \"" + suggestion + "\"?") +
              " (nodes: " + join(shown, ", ") + ")");
    } else if (!it->is_object()) {
      diagnostics.error_in(file, pointer,
                           "a node patch is an object merged over the base's node, e.g. "
                           "{\"params\": {\"mode\": \"eager\"}}");
    } else {
      target->merge_patch(*it);
    }
  }
}

// Records the includes `document` names as named in `file`; a null one is removed by the patch.
void note_includes(const json& document, const std::string& file,
                   std::map<std::string, std::string>& include_files) {
  auto include = document.find("include");
  if (include == document.end() || !include->is_object()) return;
  for (auto it = include->begin(); it != include->end(); ++it) {
    if (it->is_null()) {
      include_files.erase(it.key());
    } else {
      include_files[it.key()] = file;
    }
  }
}

// The document of `file` with its "extends" chain followed; includes named on the way are
// recorded with the file that names them (their paths are relative to that file's project).
std::optional<json> resolve_extends_of(const std::string& file, ExtendsChain& chain,
                                       std::map<std::string, std::string>& include_files,
                                       Diagnostics& diagnostics) {
  std::optional<json> document = read_json_file(file, diagnostics);
  if (!document) return std::nullopt;
  if (!document->is_object()) {
    diagnostics.error_in(
        file, "", "a pipeline file holds a JSON object, got " + detail::json_type_name(*document));
    return std::nullopt;
  }
  auto extends = document->find("extends");
  if (extends == document->end()) {
    note_includes(*document, file, include_files);
    return document;
  }
  const bool named = extends->is_string() && !extends->get_ref<const std::string&>().empty() &&
                     extends->get_ref<const std::string&>().find('\0') == std::string::npos;
  if (!named) {
    diagnostics.error_in(file, "/extends",
                         "\"extends\" names the pipeline file this one derives from, relative to "
                         "this file's folder, e.g. \"robotwin_online.json\"");
    return std::nullopt;
  }
  fs::path base = extends->get<std::string>();
  if (base.is_relative()) base = fs::path(file).parent_path() / base;
  const std::string base_file = base.lexically_normal().string();
  std::error_code ec;
  if (!fs::exists(base, ec)) {
    diagnostics.error_in(file, "/extends", "base pipeline " + base_file + " does not exist");
    return std::nullopt;
  }
  const fs::path canonical = fs::weakly_canonical(base, ec);
  if (std::find(chain.canonical.begin(), chain.canonical.end(), canonical) !=
      chain.canonical.end()) {
    diagnostics.error_in(file, "/extends",
                         "extends cycle: " + join(chain.files, " -> ") + " -> " + base_file);
    return std::nullopt;
  }
  if (chain.files.size() >= kMaxExtendsChain) {
    diagnostics.error_in(file, "/extends",
                         "extends chain longer than " + std::to_string(kMaxExtendsChain) + ": " +
                             join(chain.files, " -> ") + " -> " + base_file);
    return std::nullopt;
  }
  chain.files.push_back(base_file);
  chain.canonical.push_back(canonical);
  std::optional<json> resolved = resolve_extends_of(base_file, chain, include_files, diagnostics);
  if (!resolved) return std::nullopt;
  document->erase("extends");
  if (auto nodes = document->find("nodes"); nodes != document->end()) {
    patch_nodes(*resolved, *nodes, file, base_file, diagnostics);
    document->erase(nodes);
  }
  note_includes(*document, file, include_files);
  resolved->merge_patch(*document);
  return resolved;
}

}  // namespace

ResolvedDocument resolve_extends(const std::string& file, Diagnostics& diagnostics) {
  ExtendsChain chain;
  chain.files.push_back(file);
  std::error_code ec;
  chain.canonical.push_back(fs::weakly_canonical(file, ec));
  ResolvedDocument resolved;
  resolved.document = resolve_extends_of(file, chain, resolved.include_files, diagnostics);
  return resolved;
}

namespace {

// The variables with project defaults, as the reference sets them (docs/DESIGN.md section 5.8): a
// default is `base`'s value (when named) followed by `tail`.
struct KnownVariable {
  const char* name;
  const char* base;
  const char* tail;
};
constexpr KnownVariable kKnownVariables[] = {
    {"WAM_DATA_ROOT", nullptr, "data"},
    {"LIBERO_DATA_ROOT", "WAM_DATA_ROOT", "/libero"},
    {"ROBOTWIN_DATA_ROOT", "WAM_DATA_ROOT", "/robotwin"},
    {"WAM_CACHE_ROOT", nullptr, ".cache/wam"},
    {"WAM_LATENT_CACHE", "WAM_CACHE_ROOT", "/latents"},
    {"WAM_COMPILE_CACHE", "WAM_CACHE_ROOT", "/torch_compile"},
    {"WAM_OUTPUT_ROOT", nullptr, "runs"},
    {"WAM_CHECKPOINT_ROOT", nullptr, "checkpoints"},
};

}  // namespace

std::optional<std::string> environment_value(const std::string& name) {
  if (const char* value = std::getenv(name.c_str()); value && *value) return std::string(value);
  for (const KnownVariable& known : kKnownVariables) {
    if (name == known.name) {
      return (known.base ? *environment_value(known.base) : std::string()) + known.tail;
    }
  }
  return std::nullopt;
}

std::string describe_environment() {
  std::string out = "environment (${VAR} in pipeline and config files):\n";
  for (const KnownVariable& known : kKnownVariables) {
    const char* set = std::getenv(known.name);
    out += "  " + std::string(known.name) + "=" + *environment_value(known.name) +
           (set && *set ? "\n" : "  (default)\n");
  }
  return out;
}

namespace {

bool is_name_start(char c) { return std::isalpha(static_cast<unsigned char>(c)) || c == '_'; }
bool is_name_char(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; }

// ${NAME} or ${NAME:-default} (the default runs to the first '}'), scanned without a regex: a
// std::regex recurses per character and overflows the stack on long strings.
std::string expand_string(const std::string& text, const std::string& file,
                          const std::string& pointer, Diagnostics& diagnostics) {
  std::string out;
  size_t copied = 0;
  for (size_t start = text.find("${"); start != std::string::npos;
       start = text.find("${", start + 1)) {
    if (start < copied) continue;  // inside the reference just expanded
    size_t i = start + 2;
    if (i >= text.size() || !is_name_start(text[i])) continue;
    while (i < text.size() && is_name_char(text[i])) ++i;
    const std::string name = text.substr(start + 2, i - start - 2);
    std::optional<std::string> fallback;
    if (text.compare(i, 2, ":-") == 0) {
      const size_t close = text.find('}', i + 2);
      if (close == std::string::npos) continue;
      fallback = text.substr(i + 2, close - i - 2);
      i = close;
    }
    if (i >= text.size() || text[i] != '}') continue;
    out.append(text, copied, start - copied);
    copied = i + 1;
    if (auto value = environment_value(name)) {
      if (!is_utf8(*value)) {
        diagnostics.error_in(file, pointer,
                             "environment variable " + name + " is not UTF-8 text: \"" +
                                 shorten(printable(*value)) + "\"");
      }
      out += *value;
    } else if (fallback) {
      out += *fallback;
    } else {
      diagnostics.error_in(file, pointer,
                           "environment variable " + name + " is not set; export it or write ${" +
                               name + ":-default}");
    }
  }
  out.append(text, copied, std::string::npos);
  return out;
}

// What resolving the $refs of one pipeline has used so far, and the chain being resolved.
struct RefResolution {
  std::vector<std::string> chain;  // targets ("include/pointer") whose values are being resolved
  // Includes named but not loaded (already reported): a $ref into one leaves the node's params
  // incomplete instead of adding an error per reference and per param it would have filled.
  std::set<std::string> unloaded_includes;
  bool incomplete = false;  // the params being resolved reference an unloaded include
  size_t resolutions = 0;
  size_t values = 0;     // JSON values copied in from fragments
  bool stopped = false;  // a limit was reported: resolve nothing more
};

// Counts the values of `value`, stopping early past `limit`.
size_t count_values(const json& value, size_t limit) {
  size_t count = 0;
  std::vector<const json*> pending = {&value};
  while (!pending.empty() && count <= limit) {
    const json* current = pending.back();
    pending.pop_back();
    ++count;
    if (current->is_structured()) {
      for (const auto& child : *current) pending.push_back(&child);
    }
  }
  return count;
}

// {"$ref": "include/pointer", ...siblings}: the fragment value, with siblings merged over it.
// `depth` is the nesting of `value` in the resolved params: refs may nest what they bring in, so
// the depth limit is checked again here, as are cycles and the total size brought in.
void resolve_refs(json& value, const PipelineConfig& config, const std::string& pointer,
                  Diagnostics& diagnostics, RefResolution& state, size_t depth) {
  if (state.stopped || !value.is_structured()) return;
  if (depth >= kMaxJsonDepth) {
    diagnostics.error(pointer, "nested deeper than " + std::to_string(kMaxJsonDepth) +
                                   " levels once $refs are resolved");
    state.stopped = true;
    return;
  }
  if (value.is_array()) {
    for (size_t i = 0; i < value.size(); ++i) {
      resolve_refs(value[i], config, pointer + "/" + std::to_string(i), diagnostics, state,
                   depth + 1);
    }
    return;
  }
  auto ref = value.find("$ref");
  if (ref == value.end()) {
    for (auto it = value.begin(); it != value.end(); ++it) {
      resolve_refs(it.value(), config, pointer_append(pointer, it.key()), diagnostics, state,
                   depth + 1);
    }
    return;
  }
  const std::string ref_pointer = pointer_append(pointer, "$ref");
  if (!ref->is_string()) {
    diagnostics.error(ref_pointer, "$ref must be a string \"include/json/pointer\"");
    return;
  }
  const std::string target = ref->get<std::string>();
  const std::string include = target.substr(0, target.find('/'));
  const std::string inner = target.size() > include.size() ? target.substr(include.size()) : "";
  auto fragment = config.includes.find(include);
  if (state.unloaded_includes.count(include)) {
    state.incomplete = true;
    return;
  }
  if (fragment == config.includes.end()) {
    std::vector<std::string> names;
    for (const auto& [name, content] : config.includes) names.push_back(name);
    diagnostics.error(ref_pointer, unknown_with_suggestion("include", include, names));
    return;
  }
  const std::string& include_file = config.include_files.at(include);
  if (std::find(state.chain.begin(), state.chain.end(), target) != state.chain.end()) {
    std::vector<std::string> cycle(std::find(state.chain.begin(), state.chain.end(), target),
                                   state.chain.end());
    cycle.push_back(target);
    diagnostics.error(ref_pointer, "$ref cycle: " + join(cycle, " -> ") + " (" + include_file +
                                       " refers back to a value that contains the reference)");
    return;
  }
  if (++state.resolutions > kMaxRefResolutions) {
    diagnostics.error(ref_pointer, "more than " + std::to_string(kMaxRefResolutions) +
                                       " $ref substitutions in one pipeline");
    state.stopped = true;
    return;
  }
  const json* found = nullptr;
  try {
    found = &fragment->second.at(json::json_pointer(inner));
  } catch (const json::exception&) {
    diagnostics.error(ref_pointer, "\"" + inner + "\" does not exist in include \"" + include +
                                       "\" (" + include_file + ")");
    return;
  }
  state.values += count_values(*found, kMaxRefExpandedValues);
  if (state.values > kMaxRefExpandedValues) {
    diagnostics.error(ref_pointer, "$refs bring in more than " +
                                       std::to_string(kMaxRefExpandedValues) +
                                       " JSON values in one pipeline");
    state.stopped = true;
    return;
  }
  if (state.chain.size() >= kMaxRefChain) {
    diagnostics.error(ref_pointer, "$ref chain longer than " + std::to_string(kMaxRefChain) + ": " +
                                       join(state.chain, " -> ") + " -> " + target);
    state.stopped = true;
    return;
  }
  // Keys beside $ref are resolved where they are written; the referenced value with `target` on
  // the chain, so that a reference back into it is a cycle.
  json siblings = std::move(value);
  siblings.erase("$ref");
  resolve_refs(siblings, config, pointer, diagnostics, state, depth);
  json resolved = *found;
  state.chain.push_back(target);
  resolve_refs(resolved, config, pointer, diagnostics, state, depth);
  state.chain.pop_back();
  if (!siblings.empty()) {
    if (!resolved.is_object()) {
      diagnostics.error(pointer, "keys beside $ref need the referenced value to be an object");
      value = json::object();
      return;
    }
    resolved.update(siblings);
  }
  value = std::move(resolved);
}

// Include paths written in a pipeline file are relative to its project root: the nearest ancestor
// of the file that has a configs/ folder (else the working directory), so pipelines/ and configs/
// stay siblings.
fs::path include_root(const std::string& file) {
  fs::path dir = fs::absolute(file).parent_path();
  for (fs::path p = dir; !p.empty(); p = p.parent_path()) {
    std::error_code ec;
    if (fs::is_directory(p / "configs", ec)) return p;
    if (p == p.parent_path()) break;
  }
  return fs::current_path();
}

const std::vector<std::string> kTopLevelKeys = {"version", "name",     "description",
                                                "include", "settings", "nodes"};
const std::vector<std::string> kNodeKeys = {"id",          "type",     "inputs",     "params",
                                            "concurrency", "on_error", "description"};

}  // namespace

namespace {

void expand_environment_at(json& value, const std::string& file, const std::string& pointer,
                           Diagnostics& diagnostics, size_t depth) {
  if (value.is_string()) {
    const auto& text = value.get_ref<const std::string&>();
    if (text.find("${") != std::string::npos) {
      value = expand_string(text, file, pointer, diagnostics);
    }
    return;
  }
  if (!value.is_structured()) return;
  // Files are refused deeper than this when parsed; a value built in code is checked here.
  if (depth >= kMaxJsonDepth) {
    diagnostics.error_in(file, pointer,
                         "nested deeper than " + std::to_string(kMaxJsonDepth) + " levels");
    return;
  }
  if (value.is_array()) {
    for (size_t i = 0; i < value.size(); ++i) {
      expand_environment_at(value[i], file, pointer + "/" + std::to_string(i), diagnostics,
                            depth + 1);
    }
  } else {
    for (auto it = value.begin(); it != value.end(); ++it) {
      expand_environment_at(it.value(), file, pointer_append(pointer, it.key()), diagnostics,
                            depth + 1);
    }
  }
}

}  // namespace

void expand_environment(json& value, const std::string& file, const std::string& pointer,
                        Diagnostics& diagnostics) {
  expand_environment_at(value, file, pointer, diagnostics, 0);
}

void apply_override(json& document, const std::string& assignment, Diagnostics& diagnostics) {
  auto fail = [&](const std::string& message) {
    diagnostics.error_in("--set " + shorten(printable(assignment), 200), "", message);
  };
  if (!is_utf8(assignment)) {
    fail("not UTF-8 text (invalid bytes shown as U+FFFD)");
    return;
  }
  const size_t equals = assignment.find('=');
  if (equals == std::string::npos || equals == 0) {
    fail("expected path.to.key=VALUE");
    return;
  }
  const std::string path = assignment.substr(0, equals);
  const std::string text = assignment.substr(equals + 1);
  JsonTextError parse_error;
  std::optional<json> parsed = parse_json_text(text, parse_error);
  if (!parsed &&
      (parse_error.number_overflow || parse_error.message.rfind("JSON nested", 0) == 0)) {
    fail(parse_error.message);
    return;
  }
  const json value = parsed ? std::move(*parsed) : json(text);  // not JSON: take it as a string

  std::vector<std::string> keys;
  for (size_t start = 0;;) {
    size_t dot = path.find('.', start);
    keys.push_back(path.substr(start, dot - start));
    if (dot == std::string::npos) break;
    start = dot + 1;
  }
  if (keys.size() + json_depth(value) > kMaxJsonDepth) {
    fail("nested deeper than " + std::to_string(kMaxJsonDepth) + " levels");
    return;
  }
  json* target = &document;
  for (size_t i = 0; i < keys.size(); ++i) {
    const std::string& key = keys[i];
    if (key.empty()) {
      fail("empty key in \"" + path + "\"");
      return;
    }
    const bool last = i + 1 == keys.size();
    if (target->is_array()) {
      json* element = nullptr;
      const bool by_index = key.find_first_not_of("0123456789") == std::string::npos;
      if (by_index) {
        // Out of range of size_t is no element either.
        if (auto index = parse_integer<size_t>(key); index && *index < target->size()) {
          element = &(*target)[*index];
        }
      } else {
        for (auto& item : *target) {
          if (item.is_object() && item.value("id", json()) == key) element = &item;
        }
      }
      if (!element) {
        fail("no element \"" + shorten(key) + "\" in " +
             (i ? keys[i - 1] : std::string("document")) +
             (by_index ? " (" + std::to_string(target->size()) + " elements)" : std::string()));
        return;
      }
      if (last) *element = value;
      target = element;
    } else {
      if (target->is_null()) *target = json::object();
      if (!target->is_object()) {
        fail("\"" + keys[i - 1] + "\" is not an object");
        return;
      }
      if (last) (*target)[key] = value;
      target = &(*target)[key];
    }
  }
}

namespace {

// Unknown top-level keys, "version" and "name".
void check_top_level(const json& document, PipelineConfig& config, Diagnostics& diagnostics) {
  for (auto it = document.begin(); it != document.end(); ++it) {
    if (it.key() == "extends") {
      diagnostics.error("/extends",
                        "\"extends\" is followed before --set overrides apply; write "
                        "it in the pipeline file");
      continue;
    }
    bool known = false;
    for (const auto& k : kTopLevelKeys) known = known || k == it.key();
    if (!known) {
      diagnostics.error(pointer_append("", it.key()),
                        unknown_with_suggestion("top-level key", it.key(), kTopLevelKeys));
    }
  }
  const json version = document.value("version", json());
  if (version != json(1)) {
    diagnostics.error("/version", version.is_null()
                                      ? "missing \"version\": this format is version 1"
                                      : "unsupported version " + version.dump() + "; expected 1");
  }
  const json name = document.value("name", json());
  if (!name.is_string() || name.get<std::string>().empty()) {
    diagnostics.error("/name", "\"name\" must be a non-empty string");
  } else {
    config.name = name.get<std::string>();
  }
}

// Where an include's path was written: in a pipeline file (relative to that file's project root,
// problems at its /include/<name>) or in a `--set include.<name>=PATH` (relative to the working
// directory, as a shell user expects; problems name the option).
struct IncludeOrigin {
  std::string file;  // the pipeline file that names it; the loaded file for --set
  bool command_line = false;
};

// Reads one include, `named` where `origin` says, into `config`. False when it was not loaded
// (the problem is reported).
bool load_include(const std::string& name, const json& named, const IncludeOrigin& origin,
                  PipelineConfig& config, Diagnostics& diagnostics) {
  const std::string where =
      origin.command_line
          ? "--set include." + name + "=" +
                shorten(printable(named.is_string() ? named.get<std::string>() : named.dump()))
          : origin.file;
  const std::string pointer = origin.command_line ? "" : pointer_append("/include", name);
  if (!named.is_string()) {
    diagnostics.error_in(where, pointer, "expected a file path string");
    return false;
  }
  const std::string& text_path = named.get_ref<const std::string&>();
  if (text_path.empty() || text_path.find('\0') != std::string::npos) {
    diagnostics.error_in(where, pointer,
                         "expected a file path, got \"" +
                             std::string(text_path.empty() ? "" : "...\\u0000...") + "\"");
    return false;
  }
  fs::path path = text_path;
  std::error_code ec;
  if (path.is_relative()) {
    path = (origin.command_line ? fs::current_path(ec) : include_root(origin.file)) / path;
  }
  // As written when absolute, else relative to the working directory.
  std::string shown =
      fs::path(text_path).is_absolute() ? text_path : fs::relative(path, ec).string();
  if (ec || shown.empty()) shown = path.string();
  if (!fs::exists(path, ec)) {
    diagnostics.error_in(where, pointer, "included file " + shown + " does not exist");
    return false;
  }
  if (fs::equivalent(path, origin.file, ec)) {
    diagnostics.error_in(where, pointer,
                         "the pipeline includes itself; include config fragments "
                         "(configs/...), which hold values, not pipelines");
    return false;
  }
  std::string error;
  auto text = read_regular_file(path.string(), kMaxConfigFileBytes, error);
  if (!text) {
    diagnostics.error_in(where, pointer, "cannot read included file " + shown + ": " + error);
    return false;
  }
  JsonTextError parse_error;
  auto fragment = parse_json_text(*text, parse_error);
  if (!fragment) {
    diagnostics.error_in(shown, parse_error.location, parse_error.message);
    return false;
  }
  expand_environment(*fragment, shown, "", diagnostics);
  config.includes[name] = std::move(*fragment);
  config.include_files[name] = shown;
  return true;
}

// One element of "nodes", with its params' $refs resolved.
std::optional<NodeConfig> parse_node(const json& node, const std::string& pointer,
                                     const PipelineConfig& config, RefResolution& refs,
                                     Diagnostics& diagnostics) {
  if (!node.is_object()) {
    diagnostics.error(pointer, "a node is an object {\"id\", \"type\", \"inputs\", \"params\"}");
    return std::nullopt;
  }
  NodeConfig nc;
  nc.pointer = pointer;
  for (auto it = node.begin(); it != node.end(); ++it) {
    bool known = false;
    for (const auto& k : kNodeKeys) known = known || k == it.key();
    if (!known) {
      diagnostics.error(pointer_append(pointer, it.key()),
                        unknown_with_suggestion("node key", it.key(), kNodeKeys));
    }
  }
  if (auto id = node.find("id"); id != node.end() && id->is_string()) {
    nc.id = id->get<std::string>();
  } else {
    diagnostics.error(pointer + "/id",
                      id == node.end() ? "missing \"id\"" : "\"id\" must be a string");
  }
  if (auto type = node.find("type"); type != node.end() && type->is_string()) {
    nc.type = type->get<std::string>();
  } else {
    diagnostics.error(pointer + "/type",
                      type == node.end() ? "missing \"type\"" : "\"type\" must be a string");
  }
  if (auto inputs = node.find("inputs"); inputs != node.end()) {
    if (!inputs->is_array()) {
      diagnostics.error(pointer + "/inputs", "\"inputs\" must be an array of node ids");
    } else {
      for (size_t k = 0; k < inputs->size(); ++k) {
        if ((*inputs)[k].is_string()) {
          nc.inputs.push_back((*inputs)[k].get<std::string>());
        } else {
          diagnostics.error(pointer + "/inputs/" + std::to_string(k), "expected a node id string");
        }
      }
    }
  }
  if (auto params = node.find("params"); params != node.end()) {
    nc.params = *params;
    refs.incomplete = false;
    resolve_refs(nc.params, config, pointer + "/params", diagnostics, refs, 1);
    nc.params_incomplete = refs.incomplete;
  }
  if (auto concurrency = node.find("concurrency"); concurrency != node.end()) {
    nc.concurrency = *concurrency;
  }
  if (auto on_error = node.find("on_error"); on_error != node.end()) {
    if (auto error = enum_from_json(*on_error, nc.on_error, "on_error policy")) {
      diagnostics.error(pointer + "/on_error", *error);
    }
  }
  return nc;
}

}  // namespace

PipelineConfig load_pipeline_config(const std::string& file, const LoadOptions& options,
                                    Diagnostics& diagnostics) {
  PipelineConfig config;
  config.file = file;
  diagnostics.set_file(file);
  ResolvedDocument resolved = resolve_extends(file, diagnostics);
  if (!resolved.document) return config;
  json& document = *resolved.document;
  const json includes_as_written = document.value("include", json());
  for (const auto& assignment : options.overrides) {
    apply_override(document, assignment, diagnostics);
  }
  if (json_depth(document) > kMaxJsonDepth) {  // overrides may nest a value deeper
    diagnostics.error("", "nested deeper than " + std::to_string(kMaxJsonDepth) +
                              " levels once --set overrides are applied");
    return config;
  }
  // Each include with where its path was written: a pipeline file of the extends chain, or --set.
  std::map<std::string, IncludeOrigin> origins;
  for (const auto& [name, written_in] : resolved.include_files) origins[name] = {written_in};
  if (auto include = document.find("include"); include != document.end() && include->is_object()) {
    for (auto it = include->begin(); it != include->end(); ++it) {
      if (!includes_as_written.is_object() || includes_as_written.value(it.key(), json()) != *it) {
        origins[it.key()] = {file, true};
      }
    }
  }
  expand_environment(document, file, "", diagnostics);
  check_top_level(document, config, diagnostics);
  if (auto settings = document.find("settings"); settings != document.end()) {
    config.settings = *settings;
  }

  RefResolution refs;
  if (auto include = document.find("include"); include != document.end()) {
    if (!include->is_object()) {
      diagnostics.error("/include",
                        "\"include\" maps names to config files, e.g. "
                        "{\"data\": \"configs/data/robotwin.json\"}");
    } else {
      for (auto it = include->begin(); it != include->end(); ++it) {
        auto origin = origins.find(it.key());
        if (!load_include(it.key(), it.value(),
                          origin == origins.end() ? IncludeOrigin{file} : origin->second, config,
                          diagnostics)) {
          refs.unloaded_includes.insert(it.key());
        }
      }
    }
  }

  const json nodes = document.value("nodes", json());
  if (!nodes.is_array() || nodes.empty()) {
    diagnostics.error("/nodes", "\"nodes\" must be a non-empty array of stage nodes");
    return config;
  }
  for (size_t i = 0; i < nodes.size(); ++i) {
    auto node = parse_node(nodes[i], "/nodes/" + std::to_string(i), config, refs, diagnostics);
    if (node) config.nodes.push_back(std::move(*node));
  }
  return config;
}

}  // namespace wam
