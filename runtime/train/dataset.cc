#include "runtime/train/dataset.h"

#include <zlib.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <sstream>

namespace grapevine::train {
namespace {

constexpr const char* kPackageHint =
    "install the Debian package 'dataset-fashion-mnist' (tools/install-deps) or set "
    "workload.data_dir";

// Owns a gzFile; gzclose on scope exit.
struct GzCloser {
  void operator()(gzFile_s* f) const {
    if (f) gzclose(f);
  }
};
using GzPtr = std::unique_ptr<gzFile_s, GzCloser>;

// Reads exactly n bytes; returns the count read, or -1 with *error set on a zlib error.
std::int64_t gzReadFully(gzFile f, std::uint8_t* out, std::int64_t n, std::string* error) {
  std::int64_t done = 0;
  while (done < n) {
    const auto chunk = static_cast<unsigned>(std::min<std::int64_t>(n - done, 1 << 30));
    const int got = gzread(f, out + done, chunk);
    if (got < 0) {
      int errnum = 0;
      const char* msg = gzerror(f, &errnum);
      *error = msg ? msg : "zlib error";
      return -1;
    }
    if (got == 0) break;
    done += got;
  }
  return done;
}

std::string fileInDir(const std::string& dir, const std::string& stem) {
  namespace fs = std::filesystem;
  const fs::path gz = fs::path(dir) / (stem + ".gz");
  if (fs::exists(gz)) return gz.string();
  return (fs::path(dir) / stem).string();
}

}  // namespace

Result<IdxArray> readIdx(const std::string& path) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) {
    return notFound("IDX file " + path + " does not exist or is not a regular file");
  }
  GzPtr file(gzopen(path.c_str(), "rb"));
  if (!file) return notFound("IDX file " + path + " cannot be opened");
  gzbuffer(file.get(), 1 << 17);

  std::string zerr;
  std::uint8_t magic[4];
  if (gzReadFully(file.get(), magic, 4, &zerr) != 4) {
    return dataLoss("IDX file " + path + ": too short for the 4-byte magic" +
                    (zerr.empty() ? "" : " (" + zerr + ")"));
  }
  if (magic[0] != 0 || magic[1] != 0) {
    return dataLoss("IDX file " + path + ": bad magic (first two bytes must be zero)");
  }
  if (magic[2] != 0x08) {
    std::ostringstream os;
    os << "IDX file " << path << ": element type 0x" << std::hex << int(magic[2])
       << " is not supported (only unsigned byte, 0x08)";
    return dataLoss(os.str());
  }
  const int ndims = magic[3];
  if (ndims < 1 || ndims > 4) {
    return dataLoss("IDX file " + path + ": " + std::to_string(ndims) +
                    " dimensions (expected 1 to 4)");
  }
  IdxArray out;
  std::int64_t total = 1;
  for (int d = 0; d < ndims; ++d) {
    std::uint8_t be[4];
    if (gzReadFully(file.get(), be, 4, &zerr) != 4) {
      return dataLoss("IDX file " + path + ": truncated header" +
                      (zerr.empty() ? "" : " (" + zerr + ")"));
    }
    const std::int64_t size = (std::int64_t{be[0]} << 24) | (std::int64_t{be[1]} << 16) |
                              (std::int64_t{be[2]} << 8) | std::int64_t{be[3]};
    if (size < 1 || size > (std::int64_t{1} << 30)) {
      return dataLoss("IDX file " + path + ": dimension " + std::to_string(d) + " has size " +
                      std::to_string(size));
    }
    out.dims.push_back(size);
    total *= size;
    if (total > (std::int64_t{1} << 34)) {
      return dataLoss("IDX file " + path + ": implausibly large payload");
    }
  }
  out.data.resize(static_cast<size_t>(total));
  const std::int64_t got = gzReadFully(file.get(), out.data.data(), total, &zerr);
  if (got < 0) return dataLoss("IDX file " + path + ": corrupt compressed data (" + zerr + ")");
  if (got != total) {
    return dataLoss("IDX file " + path + ": truncated payload, " + std::to_string(got) + " of " +
                    std::to_string(total) + " bytes");
  }
  std::uint8_t extra;
  const std::int64_t more = gzReadFully(file.get(), &extra, 1, &zerr);
  if (more < 0) return dataLoss("IDX file " + path + ": corrupt compressed data (" + zerr + ")");
  if (more != 0) return dataLoss("IDX file " + path + ": trailing bytes after the payload");
  return out;
}

Result<ImageSet> loadImageSet(const std::string& imagesPath, const std::string& labelsPath,
                              int classes) {
  GV_ASSIGN_OR_RETURN(IdxArray images, readIdx(imagesPath));
  GV_ASSIGN_OR_RETURN(IdxArray labels, readIdx(labelsPath));
  if (images.dims.size() != 3) {
    return dataLoss("IDX file " + imagesPath + ": images need 3 dimensions (count, rows, cols), " +
                    "found " + std::to_string(images.dims.size()));
  }
  if (labels.dims.size() != 1) {
    return dataLoss("IDX file " + labelsPath + ": labels need 1 dimension, found " +
                    std::to_string(labels.dims.size()));
  }
  if (labels.dims[0] != images.dims[0]) {
    return dataLoss("IDX files " + imagesPath + " and " + labelsPath +
                    " disagree: " + std::to_string(images.dims[0]) + " images but " +
                    std::to_string(labels.dims[0]) + " labels");
  }
  for (size_t i = 0; i < labels.data.size(); ++i) {
    if (labels.data[i] >= classes) {
      return dataLoss("IDX file " + labelsPath + ": label " + std::to_string(labels.data[i]) +
                      " at index " + std::to_string(i) + " is not below " +
                      std::to_string(classes));
    }
  }
  ImageSet set;
  set.count = images.dims[0];
  set.rows = images.dims[1];
  set.cols = images.dims[2];
  set.pixels = std::move(images.data);
  set.labels = std::move(labels.data);
  return set;
}

Result<FashionMnist> loadFashionMnist(const std::string& dir) {
  std::error_code ec;
  if (!std::filesystem::is_directory(dir, ec)) {
    return notFound("Fashion-MNIST directory " + dir + " does not exist: " + kPackageHint);
  }
  FashionMnist out;
  struct Part {
    const char* images;
    const char* labels;
    std::int64_t count;
    ImageSet* into;
  };
  const Part parts[] = {
      {"train-images-idx3-ubyte", "train-labels-idx1-ubyte", 60000, &out.train},
      {"t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte", 10000, &out.test},
  };
  for (const Part& part : parts) {
    const std::string images = fileInDir(dir, part.images);
    const std::string labels = fileInDir(dir, part.labels);
    for (const auto& p : {images, labels}) {
      if (!std::filesystem::exists(p, ec)) {
        return notFound("Fashion-MNIST file " + p + "[.gz] is missing: " + kPackageHint);
      }
    }
    GV_ASSIGN_OR_RETURN(*part.into, loadImageSet(images, labels, 10));
    if (part.into->count != part.count || part.into->rows != 28 || part.into->cols != 28) {
      return dataLoss("Fashion-MNIST file " + images + ": expected " + std::to_string(part.count) +
                      " x 28 x 28, found " + std::to_string(part.into->count) + " x " +
                      std::to_string(part.into->rows) + " x " + std::to_string(part.into->cols));
    }
  }
  return out;
}

Result<QuadraticData> parseQuadraticData(const std::string& jsonText, const std::string& source) {
  const std::string where = "quadratic data " + source + ": ";
  nlohmann::json doc;
  try {
    doc = nlohmann::json::parse(jsonText);
  } catch (const nlohmann::json::exception& e) {
    return invalidArgument(where + "not valid JSON (" + e.what() + ")");
  }
  if (!doc.is_object()) return invalidArgument(where + "the top level must be an object");
  if (!doc.contains("a") || !doc["a"].is_array()) {
    return invalidArgument(where + "\"a\" must be an array of n numbers");
  }
  if (!doc.contains("b") || !doc["b"].is_array()) {
    return invalidArgument(where + "\"b\" must be an array of n arrays of d numbers");
  }
  const auto& a = doc["a"];
  const auto& b = doc["b"];
  if (a.empty()) return invalidArgument(where + "\"a\" is empty (need one entry per peer)");
  if (a.size() != b.size()) {
    return invalidArgument(where + "\"a\" has " + std::to_string(a.size()) +
                           " entries but \"b\" has " + std::to_string(b.size()));
  }
  QuadraticData out;
  double sumA2 = 0.0;
  for (size_t i = 0; i < a.size(); ++i) {
    if (!a[i].is_number() || !std::isfinite(a[i].get<double>())) {
      return invalidArgument(where + "a[" + std::to_string(i) + "] is not a finite number");
    }
    out.a.push_back(a[i].get<double>());
    sumA2 += out.a.back() * out.a.back();
  }
  for (size_t i = 0; i < b.size(); ++i) {
    if (!b[i].is_array() || b[i].empty()) {
      return invalidArgument(where + "b[" + std::to_string(i) +
                             "] must be a non-empty array of numbers");
    }
    if (i > 0 && b[i].size() != b[0].size()) {
      return invalidArgument(where + "b[" + std::to_string(i) + "] has " +
                             std::to_string(b[i].size()) + " numbers, b[0] has " +
                             std::to_string(b[0].size()) + " (all b_i need the same length d)");
    }
    std::vector<double> row;
    row.reserve(b[i].size());
    for (size_t j = 0; j < b[i].size(); ++j) {
      if (!b[i][j].is_number() || !std::isfinite(b[i][j].get<double>())) {
        return invalidArgument(where + "b[" + std::to_string(i) + "][" + std::to_string(j) +
                               "] is not a finite number");
      }
      row.push_back(b[i][j].get<double>());
    }
    out.b.push_back(std::move(row));
  }
  if (!(sumA2 > 0.0)) {
    return invalidArgument(where +
                           "all a_i are zero, so the optimum sum(a_i b_i)/sum(a_i^2) is undefined");
  }
  out.dim = static_cast<std::int64_t>(out.b[0].size());
  return out;
}

Result<QuadraticData> loadQuadraticData(const std::string& path) {
  std::ifstream in(path);
  if (!in) return notFound("quadratic data file " + path + " cannot be opened");
  std::stringstream buffer;
  buffer << in.rdbuf();
  return parseQuadraticData(buffer.str(), path);
}

Result<std::shared_ptr<const SharedData>> loadSharedData(const WorkloadOptions& options) {
  GV_RETURN_IF_ERROR(options.validate());
  auto shared = std::make_shared<SharedData>();
  shared->kind = options.kind;
  if (options.isFashionMnist()) {
    GV_ASSIGN_OR_RETURN(shared->fashion, loadFashionMnist(options.dataDir));
    // Standardise with the training set's pixel mean and deviation (a histogram is exact and
    // cheap).
    std::array<std::int64_t, 256> histogram{};
    for (std::uint8_t p : shared->fashion.train.pixels) ++histogram[p];
    double n = 0.0, sum = 0.0, sumSq = 0.0;
    for (int v = 0; v < 256; ++v) {
      const double x = v / 255.0;
      n += static_cast<double>(histogram[v]);
      sum += static_cast<double>(histogram[v]) * x;
      sumSq += static_cast<double>(histogram[v]) * x * x;
    }
    const double mean = sum / n;
    const double stddev = std::sqrt(std::max(sumSq / n - mean * mean, 1e-12));
    for (int v = 0; v < 256; ++v) {
      shared->pixelTable[v] = static_cast<float>((v / 255.0 - mean) / stddev);
    }
  } else if (options.kind == WorkloadKind::kQuadratic) {
    GV_ASSIGN_OR_RETURN(shared->quadratic, loadQuadraticData(options.data));
  }
  return std::shared_ptr<const SharedData>(std::move(shared));
}

}  // namespace grapevine::train
