// Error hierarchy and compiler-style diagnostics.
#pragma once

#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace wam {

// Base of every error the framework throws on purpose.
class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// One problem found in a pipeline or config file, rendered as
// `file:/json/pointer [node]: message` (or `file:line:col: message` for parse errors).
struct Diagnostic {
  std::string file;
  std::string location;  // a JSON pointer ("/nodes/3/type") or "line:col"
  std::string node;      // "id: Type" when the problem belongs to a node, else empty
  std::string message;

  std::string render() const;
};

// Collects every problem before anything is reported.
class Diagnostics {
 public:
  explicit Diagnostics(std::string file = {}) : file_(std::move(file)) {}

  void error(std::string location, std::string message, std::string node = {});
  void error_in(std::string file, std::string location, std::string message, std::string node = {});

  const std::string& file() const { return file_; }
  void set_file(std::string file) { file_ = std::move(file); }
  bool empty() const { return items_.empty(); }
  size_t size() const { return items_.size(); }
  const std::vector<Diagnostic>& items() const { return items_; }
  std::string render() const;  // one line per diagnostic
  void append(const Diagnostics& other);

 private:
  std::string file_;
  std::vector<Diagnostic> items_;
};

// A pipeline or config that cannot be used; holds every diagnostic found.
class ConfigError : public Error {
 public:
  explicit ConfigError(Diagnostics diagnostics);
  const Diagnostics& diagnostics() const { return diagnostics_; }

 private:
  Diagnostics diagnostics_;
};

// A sample field that is missing or has another type than the reader expects.
class FieldError : public Error {
 public:
  using Error::Error;
};

// A stage failed; the message names node id, type, sample key and phase.
class StageError : public Error {
 public:
  StageError(std::string node, std::string type, std::string sample_key, std::string phase,
             std::string cause);
  const std::string& node() const { return node_; }
  const std::string& type() const { return type_; }
  const std::string& sample_key() const { return sample_key_; }
  const std::string& phase() const { return phase_; }
  const std::string& cause() const { return cause_; }

 private:
  std::string node_, type_, sample_key_, phase_, cause_;
};

// The closest candidate by edit distance, or empty when nothing is close enough to suggest.
std::string closest_match(std::string_view word, const std::vector<std::string>& candidates);

// The text, or its first `max_chars` characters and "... (N characters)" when longer: what a
// message quotes from the input stays readable however long the input.
std::string shorten(std::string_view text, size_t max_chars = 80);

// `unknown X "word"; did you mean "y"? (allowed: a, b, c)`
std::string unknown_with_suggestion(std::string_view what, std::string_view word,
                                    const std::vector<std::string>& allowed);

std::string join(const std::vector<std::string>& parts, std::string_view separator);

}  // namespace wam
