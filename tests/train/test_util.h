// Helpers shared by the train tests: temp files and the process-wide Fashion-MNIST load.
#pragma once

#include <unistd.h>
#include <zlib.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "runtime/train/dataset.h"

namespace grapevine::train::testing {

// A fresh directory under the system temp dir, removed with everything in it on destruction.
class TempDir {
 public:
  TempDir() {
    static int counter = 0;
    path_ =
        std::filesystem::temp_directory_path() /
        ("grapevine_train_test_" + std::to_string(::getpid()) + "_" + std::to_string(counter++));
    std::filesystem::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  std::string file(const std::string& name) const { return (path_ / name).string(); }
  std::string path() const { return path_.string(); }

 private:
  std::filesystem::path path_;
};

inline void writeBytes(const std::string& path, const std::vector<std::uint8_t>& bytes) {
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(bytes.data()),
            static_cast<std::streamsize>(bytes.size()));
}

inline void writeGzip(const std::string& path, const std::vector<std::uint8_t>& bytes) {
  gzFile f = gzopen(path.c_str(), "wb");
  gzwrite(f, bytes.data(), static_cast<unsigned>(bytes.size()));
  gzclose(f);
}

// IDX bytes: magic 00 00 08 ndims, big-endian dims, then the payload.
inline std::vector<std::uint8_t> idxBytes(const std::vector<std::uint32_t>& dims,
                                          const std::vector<std::uint8_t>& payload) {
  std::vector<std::uint8_t> out = {0, 0, 0x08, static_cast<std::uint8_t>(dims.size())};
  for (std::uint32_t d : dims) {
    out.push_back(static_cast<std::uint8_t>(d >> 24));
    out.push_back(static_cast<std::uint8_t>(d >> 16));
    out.push_back(static_cast<std::uint8_t>(d >> 8));
    out.push_back(static_cast<std::uint8_t>(d));
  }
  out.insert(out.end(), payload.begin(), payload.end());
  return out;
}

// Fashion-MNIST loaded once for the whole test binary (about a second to inflate); null when the
// dataset is missing (the caller's REQUIRE then fails with a message).
inline std::shared_ptr<const SharedData> fashionData() {
  static std::shared_ptr<const SharedData> loaded = [] {
    WorkloadOptions options;
    options.kind = WorkloadKind::kFashionMnistSoftmax;
    auto result = loadSharedData(options);
    return result.isOk() ? *result : std::shared_ptr<const SharedData>();
  }();
  return loaded;
}

}  // namespace grapevine::train::testing
