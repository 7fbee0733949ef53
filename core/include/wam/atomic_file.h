// Files that appear whole or not at all, and that stay once published, for every writer of the
// tree (stats, reports, datasets, parquet, videos, training state, the latent store). Readers see
// the old file or the new one, never a torn one; a crash leaves at most a temporary beside it.
#pragma once

#include <string>
#include <string_view>

namespace wam {

// A file written under a temporary name beside `path` and published over it by publish(): the
// temporary is fsynced, renamed over `path`, then the directory is fsynced so that the rename
// itself survives a crash. Without publish() the destructor removes the temporary.
//
// The temporary is `<path>.tmp.<pid>.<n>`: in the same directory (a rename is atomic only within
// one file system) and unique per process and call, so that concurrent writers of one path never
// write into each other's temporary. Errors are wam::Error naming the file and the system's reason.
class AtomicFile {
 public:
  // Creates the parent directories of `path`; opens nothing yet.
  explicit AtomicFile(std::string path);
  ~AtomicFile();
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;

  const std::string& path() const { return path_; }
  // For libraries that create the file themselves (HDF5, FFmpeg, LibTorch): they write here, and
  // publish() then syncs and renames what they wrote. Not for use together with write().
  const std::string& temporary() const { return temporary_; }

  // Appends to the temporary, which the first call creates.
  void write(std::string_view bytes);
  // Syncs the temporary, renames it over path() and syncs the directory.
  void publish();

 private:
  std::string path_;
  std::string temporary_;
  int fd_ = -1;
  bool published_ = false;
};

// Syncs a file's contents, or a directory's entries (e.g. after renaming a directory into it).
void sync_path(const std::string& path);

// Writes `bytes` to `path` through an AtomicFile.
void write_file_atomically(const std::string& path, std::string_view bytes);

}  // namespace wam
