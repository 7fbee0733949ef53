#include "wam/pipeline.h"

#include <algorithm>
#include <map>
#include <optional>
#include <set>
#include <sstream>

namespace wam {

using nlohmann::json;

namespace {

struct FieldOrigin {
  FieldType type;
  std::string writer;  // node id
};
using FieldSet = std::map<std::string, FieldOrigin>;

std::optional<Concurrency> parse_concurrency(const json& value, const std::string& pointer,
                                             const std::string& label, Diagnostics& diagnostics) {
  if (value.is_null()) return std::nullopt;
  if (value == "serial") return Concurrency::serial();
  if (value == "unlimited") return Concurrency::unlimited();
  if (value == "auto") return Concurrency::automatic();
  if (value.is_number_integer() && value.get<int64_t>() >= 1) {
    return Concurrency::at_most(value.get<int64_t>());
  }
  diagnostics.error(
      pointer,
      "concurrency must be a positive integer, \"serial\", \"unlimited\" or \"auto\"; got " +
          value.dump(),
      label);
  return std::nullopt;
}

// Names a cycle among the nodes that Kahn's algorithm could not order: "a -> b -> a".
std::string describe_cycle(const std::vector<std::vector<size_t>>& inputs,
                           const std::vector<std::string>& ids, const std::vector<bool>& ordered) {
  size_t start = 0;
  while (ordered[start]) ++start;
  // Walk backwards along inputs among unordered nodes until a node repeats.
  std::vector<size_t> path;
  std::vector<int> position(ids.size(), -1);
  size_t current = start;
  while (position[current] < 0) {
    position[current] = static_cast<int>(path.size());
    path.push_back(current);
    for (size_t input : inputs[current]) {
      if (!ordered[input]) {
        current = input;
        break;
      }
    }
  }
  // Inputs point against the data flow; list the cycle in flow order.
  std::vector<std::string> names = {ids[current]};
  for (size_t i = path.size() - 1; i > static_cast<size_t>(position[current]); --i) {
    names.push_back(ids[path[i]]);
  }
  names.push_back(ids[current]);
  return join(names, " -> ");
}

// What the validation passes share. Each pass reports into `diagnostics` and leaves what it found
// here for the passes after it.
struct Validation {
  Validation(const PipelineConfig& config, const StageRegistry& registry, Diagnostics& diagnostics)
      : config(config),
        registry(registry),
        diagnostics(diagnostics),
        count(config.nodes.size()),
        nodes(count),
        inputs(count),
        outputs(count),
        ordered(count, false) {}

  const PipelineConfig& config;
  const StageRegistry& registry;
  Diagnostics& diagnostics;
  const size_t count;
  std::vector<ValidatedNode> nodes;         // in file order until the pipeline is assembled
  std::vector<std::string> ids;             // as written, in file order
  std::map<std::string, size_t> index_of;   // valid, unique ids
  std::vector<std::vector<size_t>> inputs;  // accepted edges, by file index
  std::vector<std::vector<size_t>> outputs;
  std::vector<size_t> order;  // topological; short of `count` when there is a cycle
  std::vector<bool> ordered;
};

// [A-Za-z_][A-Za-z0-9_-]*, scanned: std::regex recurses per character (a 50k-character id
// overflowed the stack).
bool is_valid_id(const std::string& id) {
  auto letter = [](char c) { return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || c == '_'; };
  if (id.empty() || !letter(id[0])) return false;
  return std::all_of(id.begin(), id.end(),
                     [&](char c) { return letter(c) || (c >= '0' && c <= '9') || c == '-'; });
}

// Each node as declared; ids well formed and unique.
void check_ids(Validation& v) {
  for (size_t i = 0; i < v.count; ++i) {
    const NodeConfig& nc = v.config.nodes[i];
    ValidatedNode& node = v.nodes[i];
    node.id = nc.id;
    node.type = nc.type;
    node.pointer = nc.pointer;
    node.on_error = nc.on_error;
    v.ids.push_back(nc.id);
    if (nc.id.empty()) continue;  // reported while loading
    if (!is_valid_id(nc.id)) {
      v.diagnostics.error(nc.pointer + "/id", "invalid id \"" + shorten(nc.id) +
                                                  "\": use letters, digits, '_' and '-', "
                                                  "starting with a letter or '_'");
    } else if (!v.index_of.emplace(nc.id, i).second) {
      v.diagnostics.error(nc.pointer + "/id", "duplicate id \"" + nc.id + "\" (first used at " +
                                                  v.config.nodes[v.index_of[nc.id]].pointer + ")");
    }
  }
}

// Stage types resolved, params parsed, contracts declared, concurrency overrides applied.
void build_stages(Validation& v) {
  for (size_t i = 0; i < v.count; ++i) {
    const NodeConfig& nc = v.config.nodes[i];
    ValidatedNode& node = v.nodes[i];
    if (nc.type.empty()) continue;
    const StageInfo* info = v.registry.find(nc.type);
    if (!info) {
      v.diagnostics.error(nc.pointer + "/type",
                          unknown_with_suggestion("stage type", nc.type, v.registry.types()),
                          node.label());
      continue;
    }
    node.kind = info->kind;
    if (nc.params_incomplete) continue;  // its include's problem is reported; no stage is built
    // A stage's constructor, check() or declare() that throws is a problem with its params, not a
    // crash of validation: it is reported at them like any other.
    try {
      node.stage = info->create(nc.params, nc.pointer + "/params", v.diagnostics, node.label(),
                                &node.params);
      if (node.stage) {
        node.stage->declare(node.contract);
        node.concurrency = node.contract.default_concurrency();
        // A stage safe to run in parallel gets as many workers as it proves it can use.
        if (node.concurrency.limit == Concurrency::kUnlimited) {
          node.concurrency = Concurrency::automatic();
        }
      }
    } catch (const std::exception& e) {
      node.stage.reset();
      node.contract = Contract();
      v.diagnostics.error(nc.pointer + "/params", std::string("rejected: ") + e.what(),
                          node.label());
    }
    if (auto c = parse_concurrency(nc.concurrency, nc.pointer + "/concurrency", node.label(),
                                   v.diagnostics)) {
      node.concurrency = *c;
    }
  }
}

// Edges: every input names another node, once.
void connect_inputs(Validation& v) {
  for (size_t i = 0; i < v.count; ++i) {
    const NodeConfig& nc = v.config.nodes[i];
    std::set<std::string> seen;
    for (size_t k = 0; k < nc.inputs.size(); ++k) {
      const std::string& input = nc.inputs[k];
      const std::string pointer = nc.pointer + "/inputs/" + std::to_string(k);
      auto it = v.index_of.find(input);
      if (it == v.index_of.end()) {
        std::vector<std::string> known;
        for (const auto& [id, index] : v.index_of) known.push_back(id);
        v.diagnostics.error(pointer, unknown_with_suggestion("input node", input, known),
                            v.nodes[i].label());
      } else if (it->second == i) {
        v.diagnostics.error(pointer, "a node cannot be its own input", v.nodes[i].label());
      } else if (!seen.insert(input).second) {
        v.diagnostics.error(pointer, "input \"" + input + "\" is listed twice", v.nodes[i].label());
      } else {
        v.inputs[i].push_back(it->second);
      }
    }
  }
}

// One source, without inputs; every other node has inputs.
void check_sources(Validation& v) {
  const auto& config_nodes = v.config.nodes;
  std::vector<size_t> sources;
  for (size_t i = 0; i < v.count; ++i) {
    if (!v.nodes[i].stage && config_nodes[i].type.empty()) continue;
    const StageInfo* info = v.registry.find(v.nodes[i].type);
    if (!info) continue;
    if (info->kind == StageKind::kSource) {
      sources.push_back(i);
      if (!config_nodes[i].inputs.empty()) {
        v.diagnostics.error(config_nodes[i].pointer + "/inputs",
                            "a source takes no inputs; it starts the graph", v.nodes[i].label());
      }
    } else if (config_nodes[i].inputs.empty()) {
      v.diagnostics.error(config_nodes[i].pointer,
                          "needs \"inputs\": only a source (e.g. EpisodeSampler) starts a graph",
                          v.nodes[i].label());
    }
  }
  bool all_types_known = true;
  for (const auto& nc : config_nodes) all_types_known = all_types_known && v.registry.find(nc.type);
  if (sources.empty() && v.count > 0 && all_types_known) {
    v.diagnostics.error("/nodes",
                        "the pipeline has no source node (a stage that produces "
                        "samples, e.g. EpisodeSampler)");
  }
  for (size_t k = 1; k < sources.size(); ++k) {
    v.diagnostics.error(
        config_nodes[sources[k]].pointer,
        "a pipeline has one source; \"" + v.nodes[sources[0]].id + "\" is already the source",
        v.nodes[sources[k]].label());
  }
}

// Topological order (Kahn, stable by file order); a cycle is reported by name.
void order_topologically(Validation& v) {
  std::vector<size_t> pending(v.count);
  for (size_t i = 0; i < v.count; ++i) pending[i] = v.inputs[i].size();
  for (size_t i = 0; i < v.count; ++i) {
    for (size_t input : v.inputs[i]) v.outputs[input].push_back(i);
  }
  std::set<size_t> ready;
  for (size_t i = 0; i < v.count; ++i) {
    if (pending[i] == 0) ready.insert(i);
  }
  while (!ready.empty()) {
    size_t i = *ready.begin();
    ready.erase(ready.begin());
    v.order.push_back(i);
    v.ordered[i] = true;
    for (size_t out : v.outputs[i]) {
      if (--pending[out] == 0) ready.insert(out);
    }
  }
  if (v.order.size() != v.count) {
    size_t first = 0;
    while (v.ordered[first]) ++first;
    v.diagnostics.error(v.config.nodes[first].pointer + "/inputs",
                        "the graph has a cycle: " + describe_cycle(v.inputs, v.ids, v.ordered),
                        v.nodes[first].label());
  }
}

// Field contracts, in topological order: every read is written upstream with the type read.
void check_field_flow(Validation& v) {
  std::vector<FieldSet> available(v.count);
  // Whether every node upstream was built: below a node with bad params, what is written is
  // unknown, and the reads it would satisfy are not reported again.
  std::vector<bool> fields_known(v.count, true);
  for (size_t i : v.order) {
    ValidatedNode& node = v.nodes[i];
    const std::string& pointer = v.config.nodes[i].pointer;
    FieldSet fields;
    for (size_t input : v.inputs[i]) {
      fields_known[i] = fields_known[i] && fields_known[input];
      for (const auto& [name, origin] : available[input]) {
        auto [it, inserted] = fields.emplace(name, origin);
        if (!inserted && it->second.writer != origin.writer) {
          v.diagnostics.error(pointer,
                              "inputs carry two different fields named \"" + name +
                                  "\" (written by \"" + it->second.writer + "\" and \"" +
                                  origin.writer + "\"); rename one",
                              node.label());
        }
      }
    }
    if (!node.stage) {
      fields_known[i] = false;
      available[i] = std::move(fields);
      continue;
    }
    for (const auto& read : node.contract.read_fields()) {
      if (!fields_known[i]) break;
      auto it = fields.find(read.name);
      std::string expected(field_type_name(read.type));
      if (it == fields.end()) {
        v.diagnostics.error(pointer,
                            "reads field \"" + read.name + "\" as " + expected +
                                ", but no upstream stage writes it",
                            node.label());
      } else if (it->second.type != read.type) {
        v.diagnostics.error(pointer,
                            "reads field \"" + read.name + "\" as " + expected + ", but \"" +
                                it->second.writer + "\" writes it as " +
                                std::string(field_type_name(it->second.type)),
                            node.label());
      }
    }
    for (const auto& removed : node.contract.removed_fields()) fields.erase(removed);
    if (node.contract.is_batching()) {
      for (auto& [name, origin] : fields) {
        if (origin.type == FieldType::kString) {
          origin.type = FieldType::kJson;
        } else if (origin.type != FieldType::kJson) {
          origin.type = FieldType::kTensor;
        }
      }
    }
    for (const auto& written : node.contract.written_fields()) {
      fields[written.name] = {written.type, node.id};
    }
    available[i] = std::move(fields);
  }
}

// The nodes in topological order, with edges as indices into that order.
std::vector<ValidatedNode> in_topological_order(Validation& v) {
  std::vector<size_t> new_index(v.count);
  for (size_t k = 0; k < v.order.size(); ++k) new_index[v.order[k]] = k;
  std::vector<ValidatedNode> nodes;
  for (size_t old : v.order) {
    ValidatedNode node = std::move(v.nodes[old]);
    for (size_t input : v.inputs[old]) node.inputs.push_back(new_index[input]);
    for (size_t output : v.outputs[old]) node.outputs.push_back(new_index[output]);
    std::sort(node.outputs.begin(), node.outputs.end());
    nodes.push_back(std::move(node));
  }
  return nodes;
}

}  // namespace

ValidatedPipeline ValidatedPipeline::from_config(const PipelineConfig& config,
                                                 const StageRegistry& registry) {
  Diagnostics diagnostics(config.file);
  ValidatedPipeline pipeline;
  pipeline.file_ = config.file;
  pipeline.name_ = config.name;
  pipeline.settings_ = parse_params<Settings>(config.settings, "/settings", diagnostics);

  Validation validation(config, registry, diagnostics);
  check_ids(validation);
  build_stages(validation);
  connect_inputs(validation);
  check_sources(validation);
  order_topologically(validation);
  // Field flow needs a complete order; a cycle is already reported.
  if (validation.order.size() == validation.count) check_field_flow(validation);
  // A node with incomplete params has no stage: its include's error is in the diagnostics of
  // load_pipeline_config, which the caller holds and reports with these.
  const bool incomplete =
      std::any_of(config.nodes.begin(), config.nodes.end(),
                  [](const NodeConfig& node) { return node.params_incomplete; });
  if (!diagnostics.empty() || incomplete) throw ConfigError(std::move(diagnostics));

  pipeline.nodes_ = in_topological_order(validation);
  return pipeline;
}

const ValidatedNode* ValidatedPipeline::find(const std::string& id) const {
  for (const auto& node : nodes_) {
    if (node.id == id) return &node;
  }
  return nullptr;
}

void ValidatedPipeline::keep_upstream_of(const std::string& node_id) {
  const ValidatedNode* target = find(node_id);
  if (!target) {
    std::vector<std::string> ids;
    for (const auto& node : nodes_) ids.push_back(node.id);
    Diagnostics diagnostics(file_);
    diagnostics.error_in("--stop-after", "", unknown_with_suggestion("node", node_id, ids));
    throw ConfigError(std::move(diagnostics));
  }
  std::vector<bool> keep(nodes_.size(), false);
  keep[static_cast<size_t>(target - nodes_.data())] = true;
  for (size_t i = nodes_.size(); i-- > 0;) {  // reverse topological: outputs before inputs
    if (!keep[i]) continue;
    for (size_t input : nodes_[i].inputs) keep[input] = true;
  }
  std::vector<size_t> new_index(nodes_.size(), 0);
  std::vector<ValidatedNode> kept;
  for (size_t i = 0; i < nodes_.size(); ++i) {
    if (!keep[i]) continue;
    new_index[i] = kept.size();
    kept.push_back(std::move(nodes_[i]));
  }
  for (auto& node : kept) {
    for (auto& input : node.inputs) input = new_index[input];
    std::vector<size_t> outputs;
    for (size_t output : node.outputs) {
      if (keep[output]) outputs.push_back(new_index[output]);
    }
    node.outputs = std::move(outputs);
  }
  nodes_ = std::move(kept);
}

json ValidatedPipeline::effective_config() const {
  json nodes = json::array();
  for (const auto& node : nodes_) {
    json inputs = json::array();
    for (size_t input : node.inputs) inputs.push_back(nodes_[input].id);
    nodes.push_back({{"id", node.id},
                     {"type", node.type},
                     {"inputs", inputs},
                     {"params", node.params},
                     {"concurrency", node.concurrency.to_string()},
                     {"on_error", std::string(enum_name(node.on_error))}});
  }
  return {
      {"version", 1}, {"name", name_}, {"settings", params_to_json(settings_)}, {"nodes", nodes}};
}

std::string ValidatedPipeline::to_dot() const {
  std::ostringstream out;
  out << "digraph \"" << name_
      << "\" {\n  rankdir=LR;\n  node [shape=box, fontname=\"Helvetica\"];\n";
  for (const auto& node : nodes_) {
    out << "  \"" << node.id << "\" [label=\"" << node.id << "\\n" << node.type;
    if (node.concurrency.limit != 1) out << "\\nconcurrency " << node.concurrency.to_string();
    out << "\"" << (node.kind == StageKind::kSource ? ", shape=ellipse" : "") << "];\n";
  }
  for (const auto& node : nodes_) {
    for (size_t output : node.outputs) {
      out << "  \"" << node.id << "\" -> \"" << nodes_[output].id << "\";\n";
    }
  }
  out << "}\n";
  return out.str();
}

ValidatedPipeline load_pipeline(const std::string& file, const LoadOptions& options,
                                const StageRegistry& registry) {
  Diagnostics diagnostics(file);
  PipelineConfig config = load_pipeline_config(file, options, diagnostics);
  std::optional<ValidatedPipeline> pipeline;
  try {
    pipeline = ValidatedPipeline::from_config(config, registry);
  } catch (const ConfigError& e) {
    diagnostics.append(e.diagnostics());
  }
  if (!diagnostics.empty()) throw ConfigError(std::move(diagnostics));
  return std::move(*pipeline);
}

}  // namespace wam
