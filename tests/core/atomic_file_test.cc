#include "wam/atomic_file.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "testing/expect_error.h"
#include "testing/temp_dir.h"

namespace wam {
namespace {

namespace fs = std::filesystem;
using testing::TempDir;

std::vector<std::string> names(const fs::path& dir) {
  std::vector<std::string> found;
  for (const auto& entry : fs::directory_iterator(dir)) {
    found.push_back(entry.path().filename().string());
  }
  std::sort(found.begin(), found.end());
  return found;
}

std::string read(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), {}};
}

TEST(AtomicFileTest, PublishesOverTheOldFileAndLeavesNoTemporary) {
  TempDir dir;
  const std::string path = dir.file("sub/stats.json");  // the parent is created
  write_file_atomically(path, "old\n");
  write_file_atomically(path, "new\n");
  EXPECT_EQ(read(path), "new\n");
  EXPECT_EQ(names(dir.path() / "sub"), std::vector<std::string>{"stats.json"});
}

TEST(AtomicFileTest, TheOldFileStaysUntilPublishAndWithoutIt) {
  TempDir dir;
  const std::string path = dir.write("state.pt", "old");
  {
    AtomicFile file(path);
    file.write("half");
    EXPECT_EQ(read(path), "old");
  }
  EXPECT_EQ(read(path), "old");
  EXPECT_EQ(names(dir.path()), std::vector<std::string>{"state.pt"});
}

TEST(AtomicFileTest, ConcurrentWritersOfOnePathHaveTheirOwnTemporaryBesideIt) {
  TempDir dir;
  const std::string path = dir.file("catalog.json");
  AtomicFile first(path), second(path);
  EXPECT_NE(first.temporary(), second.temporary());
  EXPECT_EQ(fs::path(first.temporary()).parent_path(), dir.path());
  EXPECT_EQ(first.temporary().rfind(path + ".tmp.", 0), 0u) << first.temporary();
  first.write("first");
  second.write("second");
  second.publish();
  first.publish();
  EXPECT_EQ(read(path), "first");
  EXPECT_EQ(names(dir.path()), std::vector<std::string>{"catalog.json"});
}

TEST(AtomicFileTest, PublishesWhatALibraryWroteToTheTemporary) {
  TempDir dir;
  AtomicFile file(dir.file("trace.json"));
  std::ofstream(file.temporary()) << "{}";
  file.publish();
  EXPECT_EQ(read(dir.file("trace.json")), "{}");
  AtomicFile empty(dir.file("empty"));
  empty.publish();
  EXPECT_EQ(read(dir.file("empty")), "");
}

TEST(AtomicFileTest, ErrorsNameTheTemporaryAndTheReason) {
  TempDir dir;
  const std::string blocker = dir.write("file", "x");
  AtomicFile file(blocker + "/out.json");
  EXPECT_ERROR(file.write("y"), "cannot write " + file.temporary() + ": Not a directory");
  AtomicFile into_directory(dir.path().string());
  into_directory.write("y");
  EXPECT_ERROR(into_directory.publish(), "cannot rename " + into_directory.temporary() + " to " +
                                             dir.path().string() + ": Is a directory");
}

}  // namespace
}  // namespace wam
