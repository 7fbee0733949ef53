#include "wam/error.h"

#include <algorithm>

namespace wam {

std::string Diagnostic::render() const {
  std::string out = file;
  if (!location.empty()) {
    out += ':';
    out += location;
  }
  if (!node.empty()) out += " [" + node + "]";
  out += ": ";
  out += message;
  return out;
}

void Diagnostics::error(std::string location, std::string message, std::string node) {
  items_.push_back({file_, std::move(location), std::move(node), std::move(message)});
}

void Diagnostics::error_in(std::string file, std::string location, std::string message,
                           std::string node) {
  items_.push_back({std::move(file), std::move(location), std::move(node), std::move(message)});
}

std::string Diagnostics::render() const {
  std::string out;
  for (const auto& d : items_) {
    out += d.render();
    out += '\n';
  }
  return out;
}

void Diagnostics::append(const Diagnostics& other) {
  items_.insert(items_.end(), other.items_.begin(), other.items_.end());
}

ConfigError::ConfigError(Diagnostics diagnostics)
    : Error([&] {
        std::string text = diagnostics.render();
        if (!text.empty() && text.back() == '\n') text.pop_back();
        return text;
      }()),
      diagnostics_(std::move(diagnostics)) {}

StageError::StageError(std::string node, std::string type, std::string sample_key,
                       std::string phase, std::string cause)
    : Error("[" + node + ": " + type + "] " + phase +
            (sample_key.empty() ? std::string() : " " + sample_key) + ": " + cause),
      node_(std::move(node)),
      type_(std::move(type)),
      sample_key_(std::move(sample_key)),
      phase_(std::move(phase)),
      cause_(std::move(cause)) {}

namespace {

// Optimal string alignment distance: insertions, deletions, substitutions and adjacent swaps
// ("nmae" -> "name" is one edit).
size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<std::vector<size_t>> d(a.size() + 1, std::vector<size_t>(b.size() + 1));
  for (size_t i = 0; i <= a.size(); ++i) d[i][0] = i;
  for (size_t j = 0; j <= b.size(); ++j) d[0][j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    for (size_t j = 1; j <= b.size(); ++j) {
      size_t cost = a[i - 1] == b[j - 1] ? 0 : 1;
      d[i][j] = std::min({d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + cost});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1]) {
        d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
      }
    }
  }
  return d[a.size()][b.size()];
}

}  // namespace

std::string closest_match(std::string_view word, const std::vector<std::string>& candidates) {
  // Typos are short: a long word (e.g. a 50k-character id) gets no suggestion, and is never
  // compared at a cost of size x size.
  constexpr size_t kLongestWord = 256;
  if (word.size() > kLongestWord) return {};
  std::string best;
  size_t best_distance = std::string::npos;
  for (const auto& c : candidates) {
    // At most a third of the longer word may change; the length difference alone is that many.
    const size_t longer = std::max(word.size(), c.size());
    const size_t shorter = std::min(word.size(), c.size());
    if (longer - shorter > std::max<size_t>(1, longer / 3)) continue;
    size_t d = edit_distance(word, c);
    if (d < best_distance) {
      best_distance = d;
      best = c;
    }
  }
  // Suggest only plausible typos: at most a third of the word changed (at least one edit allowed).
  size_t limit = std::max<size_t>(1, std::max(word.size(), best.size()) / 3);
  return best_distance <= limit ? best : std::string();
}

std::string shorten(std::string_view text, size_t max_chars) {
  if (text.size() <= max_chars) return std::string(text);
  // Never cut inside a UTF-8 character: back up to its first byte.
  size_t cut = max_chars;
  while (cut > 0 && (static_cast<unsigned char>(text[cut]) & 0xC0) == 0x80) --cut;
  return std::string(text.substr(0, cut)) + "... (" + std::to_string(text.size()) + " characters)";
}

std::string unknown_with_suggestion(std::string_view what, std::string_view word,
                                    const std::vector<std::string>& allowed) {
  std::string out = "unknown " + std::string(what) + " \"" + shorten(word) + "\"";
  std::string suggestion = closest_match(word, allowed);
  if (!suggestion.empty()) out += "; did you mean \"" + suggestion + "\"?";
  std::vector<std::string> shown;
  for (const auto& a : allowed) shown.push_back(shorten(a));
  out += " (allowed: " + join(shown, ", ") + ")";
  return out;
}

std::string join(const std::vector<std::string>& parts, std::string_view separator) {
  std::string out;
  for (size_t i = 0; i < parts.size(); ++i) {
    if (i) out += separator;
    out += parts[i];
  }
  return out;
}

}  // namespace wam
