#include "wam/atomic_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <utility>

#include "wam/error.h"

namespace wam {

namespace {

std::string errno_text() { return std::strerror(errno); }

std::string unique_temporary(const std::string& path) {
  static std::atomic<uint64_t> counter{0};
  return path + ".tmp." + std::to_string(::getpid()) + "." + std::to_string(counter++);
}

}  // namespace

AtomicFile::AtomicFile(std::string path)
    : path_(std::move(path)), temporary_(unique_temporary(path_)) {
  const std::filesystem::path parent = std::filesystem::path(path_).parent_path();
  if (!parent.empty()) {
    std::error_code ignored;  // a directory that cannot be made fails the write, with its reason
    std::filesystem::create_directories(parent, ignored);
  }
}

AtomicFile::~AtomicFile() {
  if (fd_ >= 0) ::close(fd_);
  if (!published_) ::unlink(temporary_.c_str());
}

void AtomicFile::write(std::string_view bytes) {
  if (fd_ < 0) {
    fd_ = ::open(temporary_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd_ < 0) throw Error("cannot write " + temporary_ + ": " + errno_text());
  }
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::write(fd_, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) throw Error("cannot write " + temporary_ + ": " + errno_text());
    done += static_cast<size_t>(n);
  }
}

void AtomicFile::publish() {
  if (fd_ < 0 && ::access(temporary_.c_str(), F_OK) != 0) write({});  // nothing written: empty
  if (fd_ >= 0) {
    const int fd = std::exchange(fd_, -1);
    if (::fsync(fd) != 0) {
      const std::string why = errno_text();
      ::close(fd);
      throw Error("cannot write " + temporary_ + ": " + why);
    }
    if (::close(fd) != 0) throw Error("cannot write " + temporary_ + ": " + errno_text());
  } else {
    sync_path(temporary_);  // written by a library through temporary()
  }
  if (::rename(temporary_.c_str(), path_.c_str()) != 0) {
    throw Error("cannot rename " + temporary_ + " to " + path_ + ": " + errno_text());
  }
  published_ = true;
  const std::filesystem::path parent = std::filesystem::path(path_).parent_path();
  sync_path(parent.empty() ? "." : parent.string());
}

// File systems that cannot sync a directory say EINVAL; there a rename is as durable as they make
// it.
void sync_path(const std::string& file) {
  const int fd = ::open(file.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw Error("cannot sync " + file + ": " + errno_text());
  if (::fsync(fd) != 0 && errno != EINVAL) {
    const std::string why = errno_text();
    ::close(fd);
    throw Error("cannot sync " + file + ": " + why);
  }
  ::close(fd);
}

void write_file_atomically(const std::string& path, std::string_view bytes) {
  AtomicFile file(path);
  file.write(bytes);
  file.publish();
}

}  // namespace wam
