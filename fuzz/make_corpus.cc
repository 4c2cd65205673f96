// Writes the seed corpora under fuzz/corpus/<target>/ from real encoder output (run by tools/fuzz
// --regen-corpus; the results are checked in). Deterministic: fixed seeds.
#include <filesystem>
#include <fstream>
#include <iostream>
#include <random>
#include <string>
#include <vector>

#include "compress/codec.h"
#include "compress/compressor.h"
#include "compress/lossless.h"
#include "fuzz/fuzz_common.h"

using namespace grapevine;
namespace fs = std::filesystem;

namespace {

void write(const fs::path& dir, const std::string& name, const std::vector<uint8_t>& bytes) {
  fs::create_directories(dir);
  std::ofstream(dir / name, std::ios::binary)
      .write(reinterpret_cast<const char*>(bytes.data()),
             static_cast<std::streamsize>(bytes.size()));
}

std::vector<float> gaussian(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, 1.0f);
  std::vector<float> x(n);
  for (auto& v : x) v = d(rng);
  return x;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::cerr << "usage: make_corpus <fuzz/corpus dir>\n";
    return 2;
  }
  const fs::path root = argv[1];
  auto x = gaussian(fuzz::kFuzzModel, 1);
  // Frames: every method, with and without lossless stages and error feedback.
  int fi = 0;
  for (const auto& m : compress::methodNames()) {
    for (auto l :
         {compress::Lossless::kNone, compress::Lossless::kZstd, compress::Lossless::kExponent}) {
      compress::Options o;
      o.method = m.value;
      o.lossless = l;
      o.dense_below = 16;
      o.chunk_elements = 1024;
      o.ratio = 0.05;
      auto codec = compress::ModelCodec::create(fuzz::fuzzLayout(), o, 1);
      if (!codec.isOk()) return 1;
      auto r = codec->encode(x, {1, 2, 0, 0}, [&](std::span<const uint8_t> f) {
        if (f.size() < 6000)
          write(root / "frame", "f" + std::to_string(fi++), {f.begin(), f.end()});
        return Status::ok();
      });
      if (!r.isOk()) return 1;
    }
  }
  // Payloads: each method's own corpus, a few sizes.
  for (const auto& m : compress::methodNames()) {
    int pi = 0;
    for (size_t n : {1, 64, 100, 600}) {
      compress::Options o;
      o.ratio = 0.1;
      o.block_size = 64;
      size_t rows = 1;
      while ((rows + 1) * (rows + 1) <= n) ++rows;
      while (n % rows) --rows;
      if (m.value == compress::Method::kLowRank && (rows < 2 || n / rows < 2)) continue;
      auto c = compress::makeCompressor(m.value, o, rows, n / rows);
      if (!c.isOk()) return 1;
      std::vector<uint64_t> buf((*c)->maxEncodedBytes(n) / 8 + 1);
      std::span<uint8_t> out(reinterpret_cast<uint8_t*>(buf.data()), buf.size() * 8);
      auto xs = gaussian(n, static_cast<uint32_t>(n));
      auto bytes = (*c)->encode(xs, 9, out);
      if (!bytes.isOk()) return 1;
      std::vector<uint8_t> input = {static_cast<uint8_t>(n), static_cast<uint8_t>(n >> 8), 0};
      input.insert(input.end(), out.begin(), out.begin() + static_cast<long>(*bytes));
      write(root / ("payload_" + std::string(m.name)), "p" + std::to_string(pi++), input);
    }
  }
  // Lossless: zstd and exponent-coded outputs with their raw lengths.
  compress::LosslessCoder coder;
  std::span<const uint8_t> raw(reinterpret_cast<const uint8_t*>(x.data()), 2000 * 4);
  std::vector<uint8_t> out(compress::LosslessCoder::maxCompressedBytes(raw.size()));
  for (int stage = 0; stage < 2; ++stage) {
    auto r = coder.compress(stage ? compress::Lossless::kExponent : compress::Lossless::kZstd, 3,
                            raw.first(stage ? raw.size() : 1000),
                            {compress::FloatRegion::Kind::kF32, 0, stage ? 2000u : 250u}, out);
    if (!r.isOk()) return 1;
    const size_t rawLen = stage ? raw.size() : 1000;
    std::vector<uint8_t> input = {static_cast<uint8_t>(stage), static_cast<uint8_t>(rawLen),
                                  static_cast<uint8_t>(rawLen >> 8)};
    input.insert(input.end(), out.begin(), out.begin() + static_cast<long>(*r));
    write(root / "lossless", "l" + std::to_string(stage), input);
  }
  std::cout << "corpus written to " << root << "\n";
  return 0;
}
