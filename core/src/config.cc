#include "wam/config.h"

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>

#include "wam/params.h"

namespace fs = std::filesystem;
using nlohmann::json;

namespace wam {

std::string pointer_append(const std::string& pointer, const std::string& key) {
  std::string escaped;
  for (char c : key) {
    if (c == '~') escaped += "~0";
    else if (c == '/') escaped += "~1";
    else escaped += c;
  }
  return pointer + "/" + escaped;
}

std::optional<json> read_json_file(const std::string& file, Diagnostics& diagnostics) {
  std::ifstream in(file, std::ios::binary);
  if (!in) {
    diagnostics.error_in(file, "", std::string("cannot read file: ") +
                                       (fs::exists(file) ? "permission denied" : "no such file"));
    return std::nullopt;
  }
  std::stringstream buffer;
  buffer << in.rdbuf();
  const std::string text = buffer.str();
  try {
    return json::parse(text);
  } catch (const json::parse_error& e) {
    // nlohmann reports the 1-based offset of the offending character.
    size_t byte = std::min<size_t>(e.byte, text.size());
    size_t line = 1, column = 1;
    for (size_t i = 0; i < byte; ++i) {
      if (text[i] == '\n') {
        ++line;
        column = 1;
      } else {
        ++column;
      }
    }
    std::string message = e.what();
    // Drop nlohmann's "[json.exception.parse_error.101] parse error at line L, column C: " prefix.
    if (auto colon = message.find(": "); colon != std::string::npos) message.erase(0, colon + 2);
    diagnostics.error_in(file, std::to_string(line) + ":" + std::to_string(column),
                         "malformed JSON: " + message);
    return std::nullopt;
  }
}

std::optional<std::string> environment_value(const std::string& name) {
  if (const char* value = std::getenv(name.c_str()); value && *value) return std::string(value);
  // Project defaults, as the reference system's configs/train.yaml sets them.
  if (name == "WAM_DATA_ROOT") return std::string("data");
  if (name == "WAM_CACHE_ROOT") return std::string(".cache/wam");
  if (name == "WAM_LATENT_CACHE") return *environment_value("WAM_CACHE_ROOT") + "/latents";
  if (name == "WAM_COMPILE_CACHE") return *environment_value("WAM_CACHE_ROOT") + "/torch_compile";
  if (name == "WAM_OUTPUT_ROOT") return std::string("runs");
  if (name == "WAM_CHECKPOINT_ROOT") return std::string("checkpoints");
  if (name == "LIBERO_DATA_ROOT") return *environment_value("WAM_DATA_ROOT") + "/libero";
  if (name == "ROBOTWIN_DATA_ROOT") return *environment_value("WAM_DATA_ROOT") + "/robotwin";
  return std::nullopt;
}

namespace {

std::string expand_string(const std::string& text, const std::string& file,
                          const std::string& pointer, Diagnostics& diagnostics) {
  static const std::regex reference(R"(\$\{([A-Za-z_][A-Za-z0-9_]*)(:-([^}]*))?\})");
  std::string out;
  auto begin = std::sregex_iterator(text.begin(), text.end(), reference);
  size_t last = 0;
  for (auto it = begin; it != std::sregex_iterator(); ++it) {
    const std::smatch& m = *it;
    out.append(text, last, m.position(0) - last);
    last = m.position(0) + m.length(0);
    std::string name = m[1];
    if (auto value = environment_value(name)) {
      out += *value;
    } else if (m[2].matched) {
      out += m[3].str();
    } else {
      diagnostics.error_in(file, pointer,
                           "environment variable " + name + " is not set; export it or write ${" +
                               name + ":-default}");
    }
  }
  out.append(text, last, std::string::npos);
  return out;
}

// {"$ref": "include/pointer", ...siblings}: the fragment value, with siblings merged over it.
void resolve_refs(json& value, const PipelineConfig& config, const std::string& pointer,
                  Diagnostics& diagnostics) {
  if (value.is_array()) {
    for (size_t i = 0; i < value.size(); ++i) {
      resolve_refs(value[i], config, pointer + "/" + std::to_string(i), diagnostics);
    }
    return;
  }
  if (!value.is_object()) return;
  auto ref = value.find("$ref");
  if (ref == value.end()) {
    for (auto it = value.begin(); it != value.end(); ++it) {
      resolve_refs(it.value(), config, pointer_append(pointer, it.key()), diagnostics);
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
  if (fragment == config.includes.end()) {
    std::vector<std::string> names;
    for (const auto& [name, content] : config.includes) names.push_back(name);
    diagnostics.error(ref_pointer, unknown_with_suggestion("include", include, names));
    return;
  }
  json resolved;
  try {
    resolved = fragment->second.at(json::json_pointer(inner));
  } catch (const json::exception&) {
    diagnostics.error(ref_pointer, "\"" + inner + "\" does not exist in include \"" + include +
                                       "\" (" + config.include_files.at(include) + ")");
    return;
  }
  json siblings = value;
  siblings.erase("$ref");
  if (!siblings.empty()) {
    if (!resolved.is_object()) {
      diagnostics.error(pointer, "keys beside $ref need the referenced value to be an object");
      return;
    }
    resolved.update(siblings);
  }
  value = std::move(resolved);
  resolve_refs(value, config, pointer, diagnostics);
}

// Include paths are relative to the project root: the nearest ancestor of the pipeline file that
// has a configs/ folder (else the working directory), so pipelines/ and configs/ stay siblings.
fs::path include_root(const std::string& file) {
  fs::path dir = fs::absolute(file).parent_path();
  for (fs::path p = dir; !p.empty(); p = p.parent_path()) {
    if (fs::is_directory(p / "configs")) return p;
    if (p == p.parent_path()) break;
  }
  return fs::current_path();
}

const std::vector<std::string> kTopLevelKeys = {"version", "name", "description",
                                                "include", "settings", "nodes"};
const std::vector<std::string> kNodeKeys = {"id", "type", "inputs", "params",
                                            "concurrency", "on_error", "description"};

}  // namespace

void expand_environment(json& value, const std::string& file, const std::string& pointer,
                        Diagnostics& diagnostics) {
  if (value.is_string()) {
    const auto& text = value.get_ref<const std::string&>();
    if (text.find("${") != std::string::npos) {
      value = expand_string(text, file, pointer, diagnostics);
    }
  } else if (value.is_array()) {
    for (size_t i = 0; i < value.size(); ++i) {
      expand_environment(value[i], file, pointer + "/" + std::to_string(i), diagnostics);
    }
  } else if (value.is_object()) {
    for (auto it = value.begin(); it != value.end(); ++it) {
      expand_environment(it.value(), file, pointer_append(pointer, it.key()), diagnostics);
    }
  }
}

void apply_override(json& document, const std::string& assignment, Diagnostics& diagnostics) {
  auto fail = [&](const std::string& message) {
    diagnostics.error_in("--set " + assignment, "", message);
  };
  const size_t equals = assignment.find('=');
  if (equals == std::string::npos || equals == 0) {
    fail("expected path.to.key=VALUE");
    return;
  }
  const std::string path = assignment.substr(0, equals);
  const std::string text = assignment.substr(equals + 1);
  json value = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (value.is_discarded()) value = text;  // not JSON: take it as a string

  std::vector<std::string> keys;
  for (size_t start = 0;;) {
    size_t dot = path.find('.', start);
    keys.push_back(path.substr(start, dot - start));
    if (dot == std::string::npos) break;
    start = dot + 1;
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
      if (key.find_first_not_of("0123456789") == std::string::npos) {
        size_t index = std::stoul(key);
        if (index < target->size()) element = &(*target)[index];
      } else {
        for (auto& item : *target) {
          if (item.is_object() && item.value("id", json()) == key) element = &item;
        }
      }
      if (!element) {
        fail("no element \"" + key + "\" in " + (i ? keys[i - 1] : std::string("document")));
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

PipelineConfig load_pipeline_config(const std::string& file, const LoadOptions& options,
                                    Diagnostics& diagnostics) {
  PipelineConfig config;
  config.file = file;
  diagnostics.set_file(file);
  auto document = read_json_file(file, diagnostics);
  if (!document) return config;
  if (!document->is_object()) {
    diagnostics.error("", "a pipeline file holds a JSON object, got " +
                               detail::json_type_name(*document));
    return config;
  }
  for (const auto& assignment : options.overrides) {
    apply_override(*document, assignment, diagnostics);
  }
  expand_environment(*document, file, "", diagnostics);

  for (auto it = document->begin(); it != document->end(); ++it) {
    bool known = false;
    for (const auto& k : kTopLevelKeys) known = known || k == it.key();
    if (!known) {
      diagnostics.error(pointer_append("", it.key()),
                        unknown_with_suggestion("top-level key", it.key(), kTopLevelKeys));
    }
  }
  const json version = document->value("version", json());
  if (version != json(1)) {
    diagnostics.error("/version", version.is_null()
                                      ? "missing \"version\": this format is version 1"
                                      : "unsupported version " + version.dump() + "; expected 1");
  }
  const json name = document->value("name", json());
  if (!name.is_string() || name.get<std::string>().empty()) {
    diagnostics.error("/name", "\"name\" must be a non-empty string");
  } else {
    config.name = name.get<std::string>();
  }
  if (auto settings = document->find("settings"); settings != document->end()) {
    config.settings = *settings;
  }

  if (auto include = document->find("include"); include != document->end()) {
    if (!include->is_object()) {
      diagnostics.error("/include", "\"include\" maps names to config files, e.g. "
                                    "{\"data\": \"configs/data/robotwin.json\"}");
    } else {
      const fs::path root = include_root(file);
      for (auto it = include->begin(); it != include->end(); ++it) {
        const std::string pointer = pointer_append("/include", it.key());
        if (!it->is_string()) {
          diagnostics.error(pointer, "expected a file path string");
          continue;
        }
        fs::path path = it->get<std::string>();
        if (path.is_relative()) path = root / path;
        const std::string shown = fs::relative(path).string();
        if (!fs::exists(path)) {
          diagnostics.error(pointer, "included file " + shown + " does not exist");
          continue;
        }
        auto fragment = read_json_file(path.string(), diagnostics);
        if (!fragment) continue;
        expand_environment(*fragment, shown, "", diagnostics);
        config.includes[it.key()] = std::move(*fragment);
        config.include_files[it.key()] = shown;
      }
    }
  }

  const json nodes = document->value("nodes", json());
  if (!nodes.is_array() || nodes.empty()) {
    diagnostics.error("/nodes", "\"nodes\" must be a non-empty array of stage nodes");
    return config;
  }
  for (size_t i = 0; i < nodes.size(); ++i) {
    const std::string pointer = "/nodes/" + std::to_string(i);
    const json& node = nodes[i];
    if (!node.is_object()) {
      diagnostics.error(pointer, "a node is an object {\"id\", \"type\", \"inputs\", \"params\"}");
      continue;
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
            diagnostics.error(pointer + "/inputs/" + std::to_string(k),
                              "expected a node id string");
          }
        }
      }
    }
    if (auto params = node.find("params"); params != node.end()) {
      nc.params = *params;
      resolve_refs(nc.params, config, pointer + "/params", diagnostics);
    }
    if (auto concurrency = node.find("concurrency"); concurrency != node.end()) {
      nc.concurrency = *concurrency;
    }
    if (auto on_error = node.find("on_error"); on_error != node.end()) {
      if (auto error = enum_from_json(*on_error, nc.on_error, "on_error policy")) {
        diagnostics.error(pointer + "/on_error", *error);
      }
    }
    config.nodes.push_back(std::move(nc));
  }
  return config;
}

}  // namespace wam
