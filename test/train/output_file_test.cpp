// util/checked_io's outputs: a regular file is replaced atomically, anything else
// that already exists is written in place (a FIFO keeps being a FIFO, a symlink
// a symlink, /dev/full a device whose failed write is an error), and an output
// path is checked at start (check_output_path).
#include <gtest/gtest.h>

#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <stdexcept>
#include <string>
#include <thread>

#include "test/temp_dir.h"
#include "util/checked_io.h"

namespace gpt2 {
namespace {

bool is_fifo(const std::string& p) {
  struct stat st;
  return lstat(p.c_str(), &st) == 0 && S_ISFIFO(st.st_mode);
}
bool is_symlink(const std::string& p) {
  struct stat st;
  return lstat(p.c_str(), &st) == 0 && S_ISLNK(st.st_mode);
}
// The message of what `f` throws ("" when it does not).
template <class F>
std::string error_of(F f) {
  try {
    f();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

TEST(OutputFile, FifoIsWrittenInPlace) {
  const std::string d = temp_dir("output_fifo"), fifo = d + "/pipe";
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  std::string got;
  std::thread reader([&] {
    std::FILE* f = std::fopen(fifo.c_str(), "rb");
    if (!f) return;
    char buf[64];
    size_t n;
    while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) got.append(buf, n);
    std::fclose(f);
  });
  write_text_file_atomic(fifo, "through the pipe");
  reader.join();
  EXPECT_EQ(got, "through the pipe");
  EXPECT_TRUE(is_fifo(fifo)) << "the FIFO was replaced by a file";
  EXPECT_FALSE(file_exists(fifo + ".tmp"));
}

TEST(OutputFile, SymlinkKeepsPointingAtItsReplacedTarget) {
  const std::string d = temp_dir("output_link");
  write_text_file_atomic(d + "/target.json", "old");
  ASSERT_EQ(symlink("target.json", (d + "/link.json").c_str()), 0);
  write_text_file_atomic(d + "/link.json", "new");
  EXPECT_TRUE(is_symlink(d + "/link.json")) << "the link was replaced by a file";
  EXPECT_EQ(read_text_file(d + "/target.json"), "new");
}

// A name of 252 to 255 characters has no room for ".tmp": its temp name must still fit the limit.
TEST(OutputFile, NamesAtTheFileSystemLimitAreWritten) {
  const std::string d = temp_dir("output_long");
  for (size_t n : {251, 252, 255}) {
    const std::string path = d + "/" + std::string(n - 5, 'e') + ".json";
    write_text_file_atomic(path, "{}");
    EXPECT_EQ(read_text_file(path), "{}") << n;
  }
  write_text_file_atomic(d + "/" + std::string(249, 'e') + ".jsonX", "other");  // the same cut, another name
  EXPECT_EQ(read_text_file(d + "/" + std::string(250, 'e') + ".json"), "{}");
  EXPECT_EQ(read_text_file(d + "/" + std::string(249, 'e') + ".jsonX"), "other");
  EXPECT_NE(error_of([&] { write_text_file_atomic(d + "/" + std::string(256, 'e'), "x"); }), "");  // past the limit
}

// A name the directory cannot hold is refused by check_name_fits, naming the
// flag, before a run does its work; up to NAME_MAX (255 here) it passes.
TEST(OutputFile, NamesPastTheFileSystemLimitAreRefusedAtStart) {
  const std::string d = temp_dir("output_name_max");
  for (size_t n : {1, 252, 255})
    EXPECT_EQ(error_of([&] { check_name_fits("--eval-json", d + "/" + std::string(n, 'e')); }), "") << n;
  const std::string err = error_of([&] { check_name_fits("--eval-json", d + "/" + std::string(256, 'e')); });
  EXPECT_NE(err.find("--eval-json " + d + "/"), std::string::npos) << err;
  EXPECT_NE(err.find(": a file name of 256 characters, more than its directory allows (NAME_MAX 255)"),
            std::string::npos) << err;
  EXPECT_NE(error_of([] { check_name_fits("--log-jsonl", std::string(256, 'e')); }), "");  // the current directory
  EXPECT_NE(error_of([&] { check_name_fits("--save-hf", d + "/new/" + std::string(300, 'e')); }), "");  // not made yet
}

// Reading a pipe that stays silent: while_waiting runs in the wait (a stop
// check throws there), so the reader is not held until the writer closes it.
TEST(OutputFile, ReadAllBytesWaitsInSlices) {
  const std::string d = temp_dir("read_slices");
  const std::string fifo = d + "/silent";
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  std::thread writer([&] {  // opens the pipe and keeps it open, writing nothing, for 3 s
    FILE* w = std::fopen(fifo.c_str(), "w");
    std::this_thread::sleep_for(std::chrono::seconds(3));
    if (w) std::fclose(w);
  });
  int waits = 0;
  const auto t0 = std::chrono::steady_clock::now();
  const std::string err = error_of([&] {
    read_all_bytes(fifo, [&] {
      if (++waits == 2) throw std::runtime_error("stop");
    });
  });
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  writer.join();
  EXPECT_EQ(err, "stop");
  EXPECT_LT(s, 2.0) << "the wait ended only when the pipe closed";
  write_text_file_atomic(d + "/text", std::string("a\0b", 3));
  EXPECT_EQ(read_all_bytes(d + "/text", [] { ADD_FAILURE() << "a file's bytes are there at once"; }),
            std::string("a\0b", 3));
}

TEST(OutputFile, DeviceIsNotReplacedAndAFailedWriteIsAnError) {
  struct stat st;
  ASSERT_EQ(stat("/dev/full", &st), 0) << "this test needs /dev/full";
  ASSERT_TRUE(S_ISCHR(st.st_mode));
  const std::string err = error_of([] { write_text_file_atomic("/dev/full", std::string(1 << 16, 'x')); });
  EXPECT_NE(err.find("/dev/full: write failed"), std::string::npos) << err;
  ASSERT_EQ(stat("/dev/full", &st), 0);
  EXPECT_TRUE(S_ISCHR(st.st_mode)) << "/dev/full was replaced";
  EXPECT_FALSE(file_exists("/dev/full.tmp"));
}

TEST(OutputFile, OutputPathsAreCheckedAtStart) {
  const std::string d = temp_dir("output_check");
  write_text_file_atomic(d + "/file", "x");
  EXPECT_EQ(error_of([&] { check_output_path("--eval-json", d + "/r.json", false); }), "");
  EXPECT_EQ(error_of([&] { check_output_path("--eval-json", "-", false); }), "");
  EXPECT_EQ(error_of([&] { check_output_path("--eval-json", "/dev/null", false); }), "");
  const std::string missing = error_of([&] { check_output_path("--eval-json", d + "/no/r.json", false); });
  EXPECT_NE(missing.find("--eval-json " + d + "/no/r.json: directory " + d + "/no does not exist"),
            std::string::npos) << missing;
  const std::string under_file = error_of([&] { check_output_path("--save-hf", d + "/file/hf", true); });
  EXPECT_NE(under_file.find("--save-hf " + d + "/file/hf: "), std::string::npos) << under_file;
  EXPECT_FALSE(file_exists(d + "/file/hf"));
  EXPECT_EQ(error_of([&] { check_output_path("--save-hf", d + "/new/hf", true); }), "");
  struct stat st;
  EXPECT_TRUE(stat((d + "/new/hf").c_str(), &st) == 0 && S_ISDIR(st.st_mode)) << "the directory output is created";
}

}  // namespace
}  // namespace gpt2
