// Datasets: IDX files (gzip or plain, read through zlib), Fashion-MNIST, and the read-only
// SharedData that every in-process peer of one process shares.
//
// Memory: images stay as the file's bytes (uint8, 47 MB for Fashion-MNIST train); a workload turns
// the bytes of one minibatch into standardised floats through a 256-entry table when it draws them,
// so 256 simulated peers share one copy and each holds only its shard's index list.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "runtime/common/status.h"
#include "runtime/train/options.h"

namespace grapevine::train {

// One IDX array: its dimension sizes and its unsigned-byte payload (type 0x08 only).
struct IdxArray {
  std::vector<std::int64_t> dims;
  std::vector<std::uint8_t> data;
};

// Reads an IDX file, gzip-compressed or not (zlib reads both). Checks the magic (0x00 0x00 0x08
// ndims), that 1 <= ndims <= 4, that the payload has exactly prod(dims) bytes (no more, no less).
// Errors: kNotFound (missing/unreadable file), kDataLoss (bad magic, truncated, trailing bytes,
// gzip corruption). Messages name the file.
Result<IdxArray> readIdx(const std::string& path);

// Images with labels. pixels is count * rows * cols bytes, row-major per image.
struct ImageSet {
  std::int64_t count = 0;
  std::int64_t rows = 0;
  std::int64_t cols = 0;
  std::vector<std::uint8_t> pixels;
  std::vector<std::uint8_t> labels;

  std::int64_t features() const { return rows * cols; }
  const std::uint8_t* image(std::int64_t i) const { return pixels.data() + i * features(); }
};

// Reads an images file (3 dims) and a labels file (1 dim), checks that the counts agree and every
// label is < classes.
Result<ImageSet> loadImageSet(const std::string& imagesPath, const std::string& labelsPath,
                              int classes);

struct FashionMnist {
  ImageSet train;  // 60000 x 28 x 28
  ImageSet test;   // 10000 x 28 x 28
};

// Loads the four Fashion-MNIST files from `dir` ("train-images-idx3-ubyte[.gz]", ...). Checks the
// canonical sizes. A missing directory or file is kNotFound naming the Debian package
// `dataset-fashion-mnist` (tools/install-deps).
Result<FashionMnist> loadFashionMnist(const std::string& dir);

// The quadratic problem's data: f_i(x) = 1/2 |a_i x - b_i|^2 for peer i.
struct QuadraticData {
  std::vector<double> a;               // n scalars
  std::vector<std::vector<double>> b;  // n vectors of length dim
  std::int64_t dim = 0;
};

// Parses {"a": [n numbers], "b": [n lists of d numbers]}: n >= 1, d >= 1, every b_i of length d,
// all numbers finite, sum a_i^2 > 0. Errors are kInvalidArgument (kNotFound for a missing file) and
// name the offending entry ("quadratic data /tmp/q.json: b[3] has 4 numbers, b[0] has 5").
Result<QuadraticData> parseQuadraticData(const std::string& jsonText, const std::string& source);
Result<QuadraticData> loadQuadraticData(const std::string& path);

// Read-only data loaded once per process and shared by all in-process peers (thread-safe to read).
struct SharedData {
  WorkloadKind kind = WorkloadKind::kConsensus;
  // Fashion-MNIST kinds.
  FashionMnist fashion;
  // Pixel byte -> standardised float: (p/255 - mean) / std with mean/std over the training set.
  std::array<float, 256> pixelTable{};
  int classes = 10;
  // Quadratic kind.
  QuadraticData quadratic;
};

// Loads what `options.kind` needs (nothing for consensus). Validates options first.
Result<std::shared_ptr<const SharedData>> loadSharedData(const WorkloadOptions& options);

}  // namespace grapevine::train
