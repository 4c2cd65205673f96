#include "runtime/train/dataset.h"

#include <catch2/catch.hpp>
#include <cmath>

#include "tests/train/test_util.h"

using namespace grapevine;
using namespace grapevine::train;
using grapevine::train::testing::idxBytes;
using grapevine::train::testing::TempDir;
using grapevine::train::testing::writeBytes;
using grapevine::train::testing::writeGzip;

TEST_CASE("readIdx reads plain and gzip IDX files", "[train][idx]") {
  TempDir dir;
  const std::vector<std::uint8_t> payload = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12};
  const auto bytes = idxBytes({3, 2, 2}, payload);
  writeBytes(dir.file("plain.idx"), bytes);
  writeGzip(dir.file("packed.idx.gz"), bytes);
  for (const auto& name : {"plain.idx", "packed.idx.gz"}) {
    auto r = readIdx(dir.file(name));
    REQUIRE(r.isOk());
    CHECK(r->dims == std::vector<std::int64_t>{3, 2, 2});
    CHECK(r->data == payload);
  }
}

TEST_CASE("readIdx rejects missing and corrupt files with named errors", "[train][idx]") {
  TempDir dir;
  const std::vector<std::uint8_t> payload(24, 7);

  SECTION("missing file") {
    auto r = readIdx(dir.file("nope.idx"));
    REQUIRE_FALSE(r.isOk());
    CHECK(r.status().code() == ErrorCode::kNotFound);
    CHECK_THAT(r.status().message(), Catch::Contains("nope.idx"));
  }
  SECTION("bad magic") {
    auto bytes = idxBytes({24}, payload);
    bytes[0] = 0x1f;
    writeBytes(dir.file("bad.idx"), bytes);
    auto r = readIdx(dir.file("bad.idx"));
    REQUIRE_FALSE(r.isOk());
    CHECK(r.status().code() == ErrorCode::kDataLoss);
    CHECK_THAT(r.status().message(), Catch::Contains("magic"));
  }
  SECTION("unsupported element type") {
    auto bytes = idxBytes({24}, payload);
    bytes[2] = 0x0D;  // float
    writeBytes(dir.file("float.idx"), bytes);
    auto r = readIdx(dir.file("float.idx"));
    REQUIRE_FALSE(r.isOk());
    CHECK_THAT(r.status().message(), Catch::Contains("not supported"));
  }
  SECTION("zero dimensions") {
    writeBytes(dir.file("nodims.idx"), {0, 0, 8, 0});
    auto r = readIdx(dir.file("nodims.idx"));
    REQUIRE_FALSE(r.isOk());
    CHECK_THAT(r.status().message(), Catch::Contains("dimensions"));
  }
  SECTION("truncated header") {
    writeBytes(dir.file("short.idx"), {0, 0, 8, 2, 0, 0});
    auto r = readIdx(dir.file("short.idx"));
    REQUIRE_FALSE(r.isOk());
    CHECK_THAT(r.status().message(), Catch::Contains("truncated header"));
  }
  SECTION("truncated payload, plain and gzip") {
    auto bytes = idxBytes({4, 6}, payload);
    bytes.erase(bytes.end() - 5, bytes.end());  // (resize trips a GCC 12 false -Wstringop-overflow)
    writeBytes(dir.file("cut.idx"), bytes);
    writeGzip(dir.file("cut.idx.gz"), bytes);
    for (const auto& name : {"cut.idx", "cut.idx.gz"}) {
      auto r = readIdx(dir.file(name));
      REQUIRE_FALSE(r.isOk());
      CHECK(r.status().code() == ErrorCode::kDataLoss);
      CHECK_THAT(r.status().message(), Catch::Contains("19 of 24 bytes"));
    }
  }
  SECTION("trailing bytes") {
    auto bytes = idxBytes({4, 6}, payload);
    bytes.push_back(0);
    writeBytes(dir.file("long.idx"), bytes);
    auto r = readIdx(dir.file("long.idx"));
    REQUIRE_FALSE(r.isOk());
    CHECK_THAT(r.status().message(), Catch::Contains("trailing"));
  }
  SECTION("corrupt gzip stream") {
    std::vector<std::uint8_t> big(4096);
    for (size_t i = 0; i < big.size(); ++i) big[i] = static_cast<std::uint8_t>(i * 37 % 251);
    writeGzip(dir.file("ok.gz"), idxBytes({4096}, big));
    std::ifstream in(dir.file("ok.gz"), std::ios::binary);
    std::vector<std::uint8_t> gz((std::istreambuf_iterator<char>(in)),
                                 std::istreambuf_iterator<char>());
    REQUIRE(gz.size() > 40);
    for (size_t i = 20; i < 30; ++i) gz[i] ^= 0xA5;  // damage the deflate stream
    writeBytes(dir.file("broken.gz"), gz);
    auto r = readIdx(dir.file("broken.gz"));
    REQUIRE_FALSE(r.isOk());
    CHECK(r.status().code() == ErrorCode::kDataLoss);
  }
}

TEST_CASE("loadImageSet checks counts and labels", "[train][idx]") {
  TempDir dir;
  writeBytes(dir.file("img.idx"), idxBytes({3, 2, 2}, std::vector<std::uint8_t>(12, 1)));
  writeBytes(dir.file("lab3.idx"), idxBytes({3}, {0, 9, 4}));
  writeBytes(dir.file("lab2.idx"), idxBytes({2}, {0, 1}));
  writeBytes(dir.file("lab_bad.idx"), idxBytes({3}, {0, 10, 1}));

  auto ok = loadImageSet(dir.file("img.idx"), dir.file("lab3.idx"), 10);
  REQUIRE(ok.isOk());
  CHECK(ok->count == 3);
  CHECK(ok->features() == 4);
  CHECK(ok->labels == std::vector<std::uint8_t>{0, 9, 4});

  auto mismatch = loadImageSet(dir.file("img.idx"), dir.file("lab2.idx"), 10);
  REQUIRE_FALSE(mismatch.isOk());
  CHECK_THAT(mismatch.status().message(), Catch::Contains("3 images but 2 labels"));

  auto badLabel = loadImageSet(dir.file("img.idx"), dir.file("lab_bad.idx"), 10);
  REQUIRE_FALSE(badLabel.isOk());
  CHECK_THAT(badLabel.status().message(), Catch::Contains("label 10"));
}

TEST_CASE("loadFashionMnist names the package when the data is missing", "[train][idx]") {
  TempDir dir;
  auto noDir = loadFashionMnist(dir.file("absent"));
  REQUIRE_FALSE(noDir.isOk());
  CHECK(noDir.status().code() == ErrorCode::kNotFound);
  CHECK_THAT(noDir.status().message(), Catch::Contains("dataset-fashion-mnist"));

  auto noFiles = loadFashionMnist(dir.path());
  REQUIRE_FALSE(noFiles.isOk());
  CHECK(noFiles.status().code() == ErrorCode::kNotFound);
  CHECK_THAT(noFiles.status().message(), Catch::Contains("train-images-idx3-ubyte"));
  CHECK_THAT(noFiles.status().message(), Catch::Contains("dataset-fashion-mnist"));

  // Right names, wrong sizes: a size check, not a crash.
  writeGzip(dir.file("train-images-idx3-ubyte.gz"),
            idxBytes({2, 28, 28}, std::vector<std::uint8_t>(2 * 784)));
  writeGzip(dir.file("train-labels-idx1-ubyte.gz"), idxBytes({2}, {1, 2}));
  writeGzip(dir.file("t10k-images-idx3-ubyte.gz"),
            idxBytes({1, 28, 28}, std::vector<std::uint8_t>(784)));
  writeGzip(dir.file("t10k-labels-idx1-ubyte.gz"), idxBytes({1}, {3}));
  auto small = loadFashionMnist(dir.path());
  REQUIRE_FALSE(small.isOk());
  CHECK(small.status().code() == ErrorCode::kDataLoss);
  CHECK_THAT(small.status().message(), Catch::Contains("expected 60000 x 28 x 28"));
}

TEST_CASE("Fashion-MNIST loads with canonical sizes and standardised pixels", "[train][idx]") {
  auto shared = grapevine::train::testing::fashionData();
  REQUIRE(shared);  // needs the Debian package dataset-fashion-mnist (tools/install-deps)
  const auto& f = shared->fashion;
  CHECK(f.train.count == 60000);
  CHECK(f.test.count == 10000);
  CHECK(f.train.rows == 28);
  CHECK(f.train.cols == 28);
  std::vector<int> perClass(10, 0);
  for (auto l : f.test.labels) ++perClass[l];
  for (int c = 0; c < 10; ++c) CHECK(perClass[c] == 1000);  // the test set is balanced
  // Standardisation: the mean over the training pixels is ~0 and the deviation ~1.
  double sum = 0.0, sumSq = 0.0;
  for (std::size_t i = 0; i < f.train.pixels.size(); ++i) {
    const double v = shared->pixelTable[f.train.pixels[i]];
    sum += v;
    sumSq += v * v;
  }
  const double n = static_cast<double>(f.train.pixels.size());
  CHECK(std::abs(sum / n) < 1e-3);
  CHECK(std::abs(std::sqrt(sumSq / n) - 1.0) < 1e-3);
}

TEST_CASE("quadratic JSON is validated with named errors", "[train][quadratic]") {
  auto parse = [](const std::string& text) { return parseQuadraticData(text, "q.json"); };
  auto ok = parse(R"({"a": [1, 2], "b": [[1, 2, 3], [4, 5, 6]]})");
  REQUIRE(ok.isOk());
  CHECK(ok->dim == 3);
  CHECK(ok->a == std::vector<double>{1, 2});

  struct Case {
    const char* json;
    const char* expect;
  };
  const Case cases[] = {
      {R"({"a": [1, 2], "b": [[1, 2, 3], [4, 5]]})", "b[1] has 2 numbers, b[0] has 3"},
      {R"({"a": [1, 2, 3], "b": [[1], [2]]})", "\"a\" has 3 entries but \"b\" has 2"},
      {R"({"a": [0, 0], "b": [[1], [2]]})", "all a_i are zero"},
      {R"({"a": [1, "x"], "b": [[1], [2]]})", "a[1] is not a finite number"},
      {R"({"a": [1, 2], "b": [[1], [null]]})", "b[1][0] is not a finite number"},
      {R"({"a": [1], "b": [[]]})", "b[0] must be a non-empty array"},
      {R"({"a": [], "b": []})", "\"a\" is empty"},
      {R"({"b": [[1]]})", "\"a\" must be an array"},
      {R"([1, 2])", "top level must be an object"},
      {R"({"a": [1], )", "not valid JSON"},
  };
  for (const auto& c : cases) {
    INFO(c.json);
    auto r = parse(c.json);
    REQUIRE_FALSE(r.isOk());
    CHECK(r.status().code() == ErrorCode::kInvalidArgument);
    CHECK_THAT(r.status().message(), Catch::Contains(c.expect) && Catch::Contains("q.json"));
  }
  auto missing = loadQuadraticData("/nonexistent/q.json");
  REQUIRE_FALSE(missing.isOk());
  CHECK(missing.status().code() == ErrorCode::kNotFound);
}

TEST_CASE("WorkloadOptions::validate names the offending key", "[train][options]") {
  WorkloadOptions o;
  CHECK(o.validate().isOk());
  auto expectError = [](WorkloadOptions opt, const char* text) {
    const Status st = opt.validate();
    INFO(text);
    REQUIRE_FALSE(st.isOk());
    CHECK_THAT(st.message(), Catch::Contains(text));
  };
  WorkloadOptions b = o;
  b.batchSize = 0;
  expectError(b, "workload.batch_size");
  b = o;
  b.hidden = {64, 0};
  expectError(b, "workload.hidden[1]");
  b = o;
  b.kind = WorkloadKind::kFashionMnistCnn;
  b.cnnChannels = {8};
  expectError(b, "workload.cnn_channels");
  b = o;
  b.partition = PartitionKind::kDirichlet;
  b.alpha = 0.0;
  expectError(b, "workload.alpha");
  b = o;
  b.kind = WorkloadKind::kQuadratic;
  expectError(b, "workload.data");
  b.data = "x.json";
  b.noise = -1;
  expectError(b, "workload.noise");
  b = o;
  b.kind = WorkloadKind::kConsensus;
  b.dim = 0;
  expectError(b, "workload.dim");
  b = o;
  b.threads = 0;
  expectError(b, "workload.threads");
  b = o;
  b.evalTestSamples = -1;
  expectError(b, "workload.eval_test_samples");

  CHECK(parseWorkloadKind("fashion-mnist-cnn") == WorkloadKind::kFashionMnistCnn);
  CHECK_FALSE(parseWorkloadKind("mnist").has_value());
  for (auto name : workloadKindNames()) CHECK(workloadKindName(*parseWorkloadKind(name)) == name);
  CHECK(parsePartitionKind("dirichlet") == PartitionKind::kDirichlet);
}
