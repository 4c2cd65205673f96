// Key files: the format keygen writes, and every reason a key file is refused.
#include "runtime/security/key.h"

#include <sys/stat.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>

using namespace grapevine;

namespace {

std::string tempPath(const std::string& name) {
  const auto dir =
      std::filesystem::temp_directory_path() / ("gv_key_test_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  return (dir / name).string();
}

void writeText(const std::string& path, const std::string& text, mode_t mode) {
  std::ofstream(path) << text;
  REQUIRE(::chmod(path.c_str(), mode) == 0);
}

}  // namespace

TEST_CASE("key: written with mode 0600, read back equal; two keys differ") {
  const std::string path = tempPath("k1");
  writeText(path, "old", 0644);  // replaced: the new file has mode 0600, not the old 0644
  const security::Key key = security::randomKey();
  REQUIRE(security::writeKeyFile(path, key, /*replace=*/true).isOk());
  struct stat st {};
  REQUIRE(::stat(path.c_str(), &st) == 0);
  CHECK((st.st_mode & 0777) == 0600);
  auto back = security::readKeyFile(path);
  REQUIRE(back.isOk());
  CHECK(*back == key);
  CHECK(security::randomKey() != key);
  // The documented text: 64 lowercase hex digits and a newline.
  const std::string text = security::formatKey(key);
  CHECK(text.size() == 65);
  CHECK(text.back() == '\n');
  CHECK(text.find_first_not_of("0123456789abcdef\n") == std::string::npos);
}

TEST_CASE("key: a file group or others can access, a missing or malformed one is refused") {
  const std::string good(64, 'a');
  SECTION("readable by others") {
    const std::string path = tempPath("k_open");
    writeText(path, good + "\n", 0644);
    auto k = security::readKeyFile(path);
    REQUIRE(!k.isOk());
    CHECK(k.status().message().find("accessible by group or others (mode 0644)") !=
          std::string::npos);
    CHECK(k.status().message().find(path) != std::string::npos);
  }
  SECTION("readable by the group") {
    const std::string path = tempPath("k_group");
    writeText(path, good + "\n", 0640);
    CHECK(!security::readKeyFile(path).isOk());
  }
  SECTION("missing") {
    auto k = security::readKeyFile(tempPath("nope"));
    REQUIRE(!k.isOk());
    CHECK(k.status().code() == ErrorCode::kNotFound);
    CHECK(k.status().message().find("does not exist") != std::string::npos);
  }
  SECTION("all zeros: a placeholder, not a secret") {
    const std::string path = tempPath("k_zero");
    writeText(path, std::string(64, '0') + "\n", 0600);
    auto k = security::readKeyFile(path);
    REQUIRE(!k.isOk());
    CHECK(k.status().message().find("all zeros") != std::string::npos);
  }
  SECTION("malformed: short, non-hex") {
    const std::string shortPath = tempPath("k_short");
    writeText(shortPath, "abcd\n", 0600);
    auto k = security::readKeyFile(shortPath);
    REQUIRE(!k.isOk());
    CHECK(k.status().message().find("malformed: expected 64 hex digits") != std::string::npos);
    const std::string badPath = tempPath("k_bad");
    writeText(badPath, std::string(63, 'a') + "g\n", 0600);
    k = security::readKeyFile(badPath);
    REQUIRE(!k.isOk());
    CHECK(k.status().message().find("not a hex digit") != std::string::npos);
  }
  SECTION("0600 and well-formed (surrounding whitespace allowed)") {
    const std::string path = tempPath("k_ok");
    writeText(path, "  " + good + "\r\n", 0600);
    auto k = security::readKeyFile(path);
    REQUIRE(k.isOk());
    CHECK((*k)[0] == 0xaa);
  }
}

TEST_CASE("key: keygen's writer refuses links, non-regular files and an existing key") {
  const security::Key key = security::randomKey();
  const std::string target = tempPath("k_target");
  writeText(target, "precious\n", 0644);
  SECTION("an existing file stays as it was unless replace") {
    const auto st = security::writeKeyFile(target, key);
    REQUIRE(!st.isOk());
    CHECK(st.message().find("exists") != std::string::npos);
    CHECK(st.message().find("--force") != std::string::npos);
    std::ifstream in(target);
    std::string text;
    std::getline(in, text);
    CHECK(text == "precious");
  }
  SECTION("a symbolic link is not followed, even with replace") {
    const std::string link = tempPath("k_link");
    std::filesystem::remove(link);
    std::filesystem::create_symlink(target, link);
    const auto st = security::writeKeyFile(link, key, /*replace=*/true);
    REQUIRE(!st.isOk());
    CHECK(st.message().find("symbolic link") != std::string::npos);
    struct stat s {};
    REQUIRE(::stat(target.c_str(), &s) == 0);
    CHECK((s.st_mode & 0777) == 0644);  // the link's target untouched, mode included
  }
  SECTION("a FIFO or a device is not written into, even with replace") {
    const std::string fifo = tempPath("k_fifo");
    std::filesystem::remove(fifo);
    REQUIRE(::mkfifo(fifo.c_str(), 0644) == 0);
    const auto st = security::writeKeyFile(fifo, key, /*replace=*/true);
    REQUIRE(!st.isOk());
    CHECK(st.message().find("not a regular file") != std::string::npos);
    CHECK(!security::writeKeyFile("/dev/null", key, /*replace=*/true).isOk());
  }
  SECTION("a new file appears whole, and no temporary is left") {
    const std::string fresh = tempPath("k_new");
    std::filesystem::remove(fresh);
    REQUIRE(security::writeKeyFile(fresh, key).isOk());
    auto back = security::readKeyFile(fresh);
    REQUIRE(back.isOk());
    CHECK(*back == key);
    for (const auto& e :
         std::filesystem::directory_iterator(std::filesystem::path(fresh).parent_path())) {
      CHECK(e.path().filename().string().find(".tmp.") == std::string::npos);
    }
  }
}
