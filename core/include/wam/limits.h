// What hostile input may cost: bounded reads, bounded JSON, checked number conversions, a bounded
// thread count. Every file a config, a pipeline or an include names is read through here; so are
// the numbers typed on the command line. The limits are listed in docs/RELIABILITY.md.
#pragma once

#include <sys/types.h>

#include <charconv>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <system_error>
#include <type_traits>

#include <nlohmann/json.hpp>

namespace wam {

// Deepest nesting of arrays and objects accepted in a JSON file or value.
constexpr size_t kMaxJsonDepth = 256;
// Largest config, pipeline or include file read (64 MiB).
constexpr uint64_t kMaxConfigFileBytes = uint64_t{64} << 20;
// Most {"$ref": ...} substitutions in one pipeline, nested ones included (bounds "billion laughs"
// fragments whose values refer to each other many times over).
constexpr size_t kMaxRefResolutions = 10000;
// Longest chain of $refs whose values refer to further $refs.
constexpr size_t kMaxRefChain = 64;
// Longest chain of pipeline files each extending the next ("extends").
constexpr size_t kMaxExtendsChain = 16;
// Most JSON values that $refs copy into one pipeline, all substitutions together.
constexpr size_t kMaxRefExpandedValues = 1000000;
// Worker threads per hardware thread at most (settings.threads, --threads).
constexpr int64_t kMaxThreadsPerCore = 4;

// The largest thread count accepted: kMaxThreadsPerCore x the hardware threads (at least 1).
int64_t max_threads();
// "must be between 0 and 8 (4 x the 2 hardware threads), got 100000" (empty when ok).
std::string check_thread_count(int64_t threads);
// This process's peak resident set size so far, in bytes (getrusage's ru_maxrss).
int64_t peak_rss_bytes();

// The whole text as a base-10 integer of type T, or nothing when it is not one or out of range.
template <class T>
std::optional<T> parse_integer(std::string_view text) {
  static_assert(std::is_integral_v<T> && !std::is_same_v<T, bool>);
  T value{};
  const char* end = text.data() + text.size();
  auto [ptr, ec] = std::from_chars(text.data(), end, value);
  if (ec != std::errc() || ptr != end || text.empty()) return std::nullopt;
  return value;
}

// The whole text as a finite number, or nothing.
std::optional<double> parse_number(std::string_view text);

// The one wording of every refusal of a file that is not a regular one, for a file's st_mode:
// "not a regular file (a FIFO)", "... (a directory)", ...; empty for a regular file.
std::string not_regular_file_reason(mode_t mode);
// Empty when `path` is a regular file (links followed); else why it may not be opened as one,
// without opening it (opening a FIFO blocks): "no such file", "not a regular file (a FIFO)", ...
// For libraries that open files themselves (FFmpeg); open() then fstat() where the code opens.
std::string regular_file_problem(const std::string& path);

// Reads a whole regular file of at most `max_bytes`. Refuses FIFOs, devices and directories
// (reading them blocks or never ends). On failure returns nothing and sets `error`, e.g.
// "not a regular file (a character device)" or "file is larger than the 64 MiB limit (83886080
// bytes)".
std::optional<std::string> read_regular_file(const std::string& path, uint64_t max_bytes,
                                             std::string& error);

// Where and why JSON text failed to parse: `location` is "line:col", `message` e.g.
// "malformed JSON: ..." or "JSON nested deeper than 256 levels".
struct JsonTextError {
  std::string location;
  std::string message;
  bool number_overflow = false;  // a number beyond a double's range (1e309)
};

// Parses JSON text, refusing nesting deeper than `max_depth` before building anything (the
// recursive walks over values rely on it) and numbers a double cannot hold.
std::optional<nlohmann::json> parse_json_text(std::string_view text, JsonTextError& error,
                                              size_t max_depth = kMaxJsonDepth);

// Nesting depth of a value (a scalar is 0, [] is 1), computed without recursion.
size_t json_depth(const nlohmann::json& value);

}  // namespace wam
