#include "wam/limits.h"

#include <fcntl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <thread>
#include <vector>

namespace wam {

using nlohmann::json;

int64_t max_threads() {
  const int64_t cores = std::max<int64_t>(1, std::thread::hardware_concurrency());
  return kMaxThreadsPerCore * cores;
}

int64_t peak_rss_bytes() {
  rusage usage{};
  if (getrusage(RUSAGE_SELF, &usage) != 0) return 0;
  return static_cast<int64_t>(usage.ru_maxrss) * 1024;  // Linux reports kibibytes
}

std::string check_thread_count(int64_t threads) {
  if (threads >= 0 && threads <= max_threads()) return {};
  return "must be between 0 and " + std::to_string(max_threads()) + " (" +
         std::to_string(kMaxThreadsPerCore) + " x the " +
         std::to_string(max_threads() / kMaxThreadsPerCore) + " hardware threads), got " +
         std::to_string(threads);
}

std::optional<double> parse_number(std::string_view text) {
  double value = 0;
  const char* end = text.data() + text.size();
  auto [ptr, ec] = std::from_chars(text.data(), end, value);
  if (ec != std::errc() || ptr != end || text.empty() || !std::isfinite(value)) return std::nullopt;
  return value;
}

namespace {

std::string format_size(uint64_t bytes) {
  if (bytes >= (1 << 20) && bytes % (1 << 20) == 0) return std::to_string(bytes >> 20) + " MiB";
  return std::to_string(bytes) + " bytes";
}

const char* file_kind(mode_t mode) {
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISSOCK(mode)) return "a socket";
  return "a special file";
}

std::string open_error_text(int error) {
  return error == ENOENT    ? "no such file"
         : error == EACCES  ? "permission denied"
         : error == ENOTDIR ? "no such file (a parent is not a directory)"
                            : std::strerror(error);
}

// Closes the descriptor on every path out.
struct FileDescriptor {
  int fd;
  ~FileDescriptor() {
    if (fd >= 0) ::close(fd);
  }
};

}  // namespace

std::string not_regular_file_reason(mode_t mode) {
  if (S_ISREG(mode)) return {};
  return std::string("not a regular file (") + file_kind(mode) + ")";
}

std::string regular_file_problem(const std::string& path) {
  struct stat status {};
  if (::stat(path.c_str(), &status) != 0) return open_error_text(errno);
  return not_regular_file_reason(status.st_mode);
}

std::optional<std::string> read_regular_file(const std::string& path, uint64_t max_bytes,
                                             std::string& error) {
  // O_NONBLOCK: opening a FIFO for reading would otherwise wait for a writer.
  FileDescriptor file{::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC)};
  if (file.fd < 0) {
    error = open_error_text(errno);
    return std::nullopt;
  }
  struct stat status {};
  if (::fstat(file.fd, &status) != 0) {
    error = std::strerror(errno);
    return std::nullopt;
  }
  if (!S_ISREG(status.st_mode)) {
    error = not_regular_file_reason(status.st_mode);
    return std::nullopt;
  }
  const uint64_t size = static_cast<uint64_t>(status.st_size);
  auto too_large = [&](std::optional<uint64_t> known_size) {
    error = "file is larger than the " + format_size(max_bytes) + " limit" +
            (known_size ? " (" + format_size(*known_size) + ")" : std::string());
  };
  if (size > max_bytes) {
    too_large(size);
    return std::nullopt;
  }
  // Files may grow while read, and /proc files claim 0 bytes: read at most one byte past the cap.
  std::string text;
  text.resize(static_cast<size_t>(std::max<uint64_t>(size, 4096)));
  size_t used = 0;
  while (true) {
    if (used == text.size()) {
      if (used > max_bytes) {
        too_large(std::nullopt);
        return std::nullopt;
      }
      text.resize(static_cast<size_t>(std::min<uint64_t>(2 * used, max_bytes + 1)));
    }
    const ssize_t got = ::read(file.fd, text.data() + used, text.size() - used);
    if (got < 0) {
      if (errno == EINTR) continue;
      error = std::strerror(errno);
      return std::nullopt;
    }
    if (got == 0) break;
    used += static_cast<size_t>(got);
  }
  if (used > max_bytes) {
    too_large(std::nullopt);
    return std::nullopt;
  }
  text.resize(used);
  return text;
}

namespace {

// 1-based line and column of the byte at `offset`.
std::string line_column(std::string_view text, size_t offset) {
  size_t line = 1, column = 1;
  for (size_t i = 0; i < offset && i < text.size(); ++i) {
    if (text[i] == '\n') {
      ++line;
      column = 1;
    } else {
      ++column;
    }
  }
  return std::to_string(line) + ":" + std::to_string(column);
}

// The offset of the first '[' or '{' nested deeper than `max_depth`, outside strings.
std::optional<size_t> too_deep_at(std::string_view text, size_t max_depth) {
  size_t depth = 0;
  bool in_string = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\') {
        ++i;
      } else if (c == '"') {
        in_string = false;
      }
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > max_depth) return i;
    } else if ((c == ']' || c == '}') && depth > 0) {
      --depth;
    }
  }
  return std::nullopt;
}

// nlohmann's DOM builder, keeping where and why a parse failed instead of throwing (its exception
// for a number overflow carries no position).
class PositionedDomParser : public nlohmann::detail::json_sax_dom_parser<json> {
 public:
  explicit PositionedDomParser(json& result) : json_sax_dom_parser(result, false) {}

  template <class Exception>
  bool parse_error(std::size_t position, const std::string& token, const Exception& ex) {
    position_ = position;
    id_ = ex.id;
    message_ = ex.what();
    // Drop nlohmann's "[json.exception.parse_error.101] parse error at line L, column C: ".
    if (auto colon = message_.find(": "); colon != std::string::npos && ex.id < 400) {
      message_.erase(0, colon + 2);
    } else if (auto bracket = message_.find("] "); bracket != std::string::npos) {
      message_.erase(0, bracket + 2);
    }
    return json_sax_dom_parser::parse_error(position, token, ex);
  }

  size_t position_ = 0;
  int id_ = 0;
  std::string message_;
};

}  // namespace

std::optional<json> parse_json_text(std::string_view text, JsonTextError& error, size_t max_depth) {
  if (auto at = too_deep_at(text, max_depth)) {
    error.location = line_column(text, *at);
    error.message = "JSON nested deeper than " + std::to_string(max_depth) + " levels";
    return std::nullopt;
  }
  json result;
  PositionedDomParser parser(result);
  const bool ok = json::sax_parse(text, &parser);
  if (ok && !parser.is_errored()) return result;
  // nlohmann reports the 1-based offset of the offending character.
  error.location = line_column(text, parser.position_);
  error.number_overflow = parser.id_ == 406;
  if (error.number_overflow) {
    const size_t open = parser.message_.find('\'');
    const size_t close = parser.message_.rfind('\'');
    const std::string number =
        open < close ? parser.message_.substr(open + 1, close - open - 1) : std::string("value");
    // Where the number starts (nlohmann's position is past it).
    if (size_t start = text.rfind(number, parser.position_); start != std::string_view::npos) {
      error.location = line_column(text, start);
    }
    error.message = "number " + number + " is out of range (a double holds at most 1.8e308)";
  } else {
    error.message = "malformed JSON: " + parser.message_;
  }
  return std::nullopt;
}

size_t json_depth(const json& value) {
  size_t deepest = 0;
  std::vector<std::pair<const json*, size_t>> pending = {{&value, 0}};
  while (!pending.empty()) {
    auto [current, depth] = pending.back();
    pending.pop_back();
    if (!current->is_structured()) continue;
    deepest = std::max(deepest, depth + 1);
    for (const auto& child : *current) pending.emplace_back(&child, depth + 1);
  }
  return deepest;
}

}  // namespace wam
