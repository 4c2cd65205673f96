// Bounded input (runtime/common/bounded_file.h) and throttled logging (log::Throttle): what every
// reader of a file that may be hostile, and every log line a stranger can trigger, relies on.
#include <sys/stat.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <thread>

#include "runtime/common/bounded_file.h"
#include "runtime/common/log.h"

using namespace grapevine;
namespace fs = std::filesystem;

namespace {

std::string freshDir() {
  const std::string dir = std::string(GRAPEVINE_BINARY_DIR) + "/bounded_input_test";
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

}  // namespace

TEST_CASE("readRegularFile: the whole of a regular file within the limit, nothing else") {
  const std::string dir = freshDir();
  std::ofstream(dir + "/ok") << "hello";
  auto ok = readRegularTextFile(dir + "/ok", 5);
  REQUIRE(ok.isOk());
  CHECK(*ok == "hello");
  CHECK(readRegularFile(dir + "/ok", 5)->size() == 5);

  const auto refused = [](const std::string& path, std::uint64_t limit, ErrorCode code,
                          const std::string& why) {
    INFO(path);
    const auto r = readRegularFile(path, limit);
    REQUIRE_FALSE(r.isOk());
    CHECK(r.status().code() == code);
    CHECK_THAT(r.status().message(), Catch::Contains(path));
    CHECK_THAT(r.status().message(), Catch::Contains(why));
  };
  refused(dir + "/ok", 4, ErrorCode::kInvalidArgument, "5 bytes; at most 4");
  refused(dir + "/missing", 100, ErrorCode::kNotFound, "no such file");
  refused(dir, 100, ErrorCode::kInvalidArgument, "a directory");
  fs::create_symlink("/dev/zero", dir + "/zero");
  refused(dir + "/zero", UINT64_MAX, ErrorCode::kInvalidArgument, "a device");
  // A FIFO without a writer: opening it for reading would block forever.
  REQUIRE(::mkfifo((dir + "/fifo").c_str(), 0600) == 0);
  refused(dir + "/fifo", 100, ErrorCode::kInvalidArgument, "a FIFO");
  // A 64 GB sparse file is refused from its size, not read.
  std::ofstream(dir + "/sparse") << "x";
  REQUIRE(::truncate((dir + "/sparse").c_str(), 64ll << 30) == 0);
  refused(dir + "/sparse", 1 << 20, ErrorCode::kInvalidArgument, "68719476736 bytes");
}

TEST_CASE("printable: control and non-ASCII bytes escaped, long text cut") {
  CHECK(printable("host:21001") == "host:21001");
  CHECK(printable(std::string("\x1b[2J\x00\xff", 6)) == "\\x1b[2J\\x00\\xff");
  CHECK(printable("a\\b") == "a\\x5cb");  // a backslash cannot fake an escape
  CHECK(printable(std::string(100, 'a'), 10) == std::string(10, 'a') + "...");
}

TEST_CASE("log throttle: the first at once, then one line per interval saying what was skipped") {
  log::Throttle t(std::chrono::milliseconds(200));
  CHECK(t.due());
  CHECK(t.skipped().empty());
  int due = 0;
  for (int i = 0; i < 1000; ++i) due += t.due() ? 1 : 0;
  // 1000 calls take far less than 200 ms here; whatever the machine does, at most a few are due.
  CHECK(due <= 5);
  CHECK(t.total() == 1001);
  std::this_thread::sleep_for(std::chrono::milliseconds(250));
  REQUIRE(t.due());
  if (due == 0) {
    CHECK(t.skipped() == " (1000 more since the last line)");
  } else {
    CHECK_THAT(t.skipped(), Catch::Contains("more since the last line"));
  }
  CHECK(t.total() == 1002);
}
