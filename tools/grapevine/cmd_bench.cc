// `grapevine bench <what>`: micro-benchmarks. `bench` is a parent app created once (benchApp());
// each benchmark is a child registered from its own file. This file adds `bench compress`.
//
// bench compress: for each method, encode and decode throughput (GB/s of fp32 input), wire bits
// per element, relative error ||C(x) - x|| / ||x||, and, measured interleaved with that method's
// repetitions on the same buffers, memcpy and STREAM-copy throughput and, for top-k, an exact
// std::nth_element top-k (copy + nth_element by magnitude): a load that comes and goes slows the
// method and its references alike. Buffers are allocated and touched once before timing; each
// number is the best of --reps runs.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <functional>
#include <iomanip>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "compress/compressor.h"
#include "compress/lossless.h"
#include "compress/options.h"
#include "kernels/ops.h"
#include "runtime/common/elapsed.h"
#include "tools/grapevine/command.h"

namespace grapevine::cli {

CLI::App* benchApp(CLI::App& root) {
  auto existing = root.get_subcommands([](CLI::App* a) { return a->get_name() == "bench"; });
  if (!existing.empty()) return existing.front();
  CLI::App* bench = root.add_subcommand("bench", "Micro-benchmarks (compress, transport, ...)");
  bench->require_subcommand(1);
  return bench;
}

namespace {

using compress::Method;
using Clock = std::chrono::steady_clock;

struct BenchFlags {
  size_t elements = size_t{1} << 24;
  bool json = false;
  int threads = 1;
  int reps = 5;
  std::string methods;  // comma-separated filter, empty = all
  uint64_t seed = 1;
};

struct Variant {
  std::string name;
  Method method;
  compress::Options options;
};

// Each variant sets the values it is measured with (docs/benchmarks.md): qsgd with s = 7, low-rank
// with r = 4, the lossless stages at zstd level 1, top-k at 1% with the named selector; the rest
// takes compress::Options' defaults (the config's).
std::vector<Variant> variants() {
  std::vector<Variant> v;
  compress::Options o;
  v.push_back({"none", Method::kNone, o});
  v.push_back({"fp16", Method::kFp16, o});
  v.push_back({"bf16", Method::kBf16, o});
  v.push_back({"int8", Method::kInt8, o});
  v.push_back({"int4", Method::kInt4, o});
  v.push_back({"sign", Method::kSign, o});
  o.ratio = 0.01;
  o.selector = kernels::Selector::kExact;
  v.push_back({"top-k-exact", Method::kTopK, o});
  o.selector = kernels::Selector::kApprox;
  v.push_back({"top-k-approx", Method::kTopK, o});
  v.push_back({"rand-k", Method::kRandK, o});
  o = {};
  o.levels = 7;
  v.push_back({"qsgd", Method::kQsgd, o});
  o.rank = 4;
  v.push_back({"low-rank", Method::kLowRank, o});
  o = {};
  o.lossless = compress::Lossless::kZstd;
  o.zstdLevel = 1;
  v.push_back({"none+zstd", Method::kNone, o});
  o.lossless = compress::Lossless::kExponent;
  v.push_back({"none+exponent", Method::kNone, o});
  o.ratio = 0.01;
  o.selector = kernels::Selector::kExact;
  v.push_back({"top-k-exact+exponent", Method::kTopK, o});
  return v;
}

// Runs fn(t) on T threads (inline when T == 1) and returns the wall time in seconds.
double timed(int threads, const std::function<void(int)>& fn) {
  const auto t0 = Clock::now();
  if (threads == 1) {
    fn(0);
  } else {
    std::vector<std::thread> pool;
    for (int t = 0; t < threads; ++t) pool.emplace_back(fn, t);
    for (auto& th : pool) th.join();
  }
  return secondsSince(t0);
}

// Rows for the low-rank matrix view: the largest divisor of n not above sqrt(n).
size_t matrixRows(size_t n) {
  size_t r = static_cast<size_t>(std::sqrt(static_cast<double>(n)));
  while (r > 1 && n % r != 0) --r;
  return std::max<size_t>(r, 1);
}

struct Slice {
  size_t offset, count;
};

// The input of every measurement: x (seeded normal values) cut into one slice per thread, and the
// buffers the kernels write, allocated and touched once (first touch costs more than the work being
// measured).
struct BenchInput {
  size_t n = 0;
  int threads = 1;
  std::vector<Slice> slices;
  std::vector<float> x, acc, copy;
  double norm2 = 0;  // ||x||^2
  double gb = 0;     // GB of fp32 input
};

BenchInput makeInput(const BenchFlags& f) {
  BenchInput in;
  const size_t n = f.elements;
  const int T = f.threads;
  in.n = n;
  in.threads = T;
  for (int t = 0; t < T; ++t) {
    const size_t a = n * static_cast<size_t>(t) / static_cast<size_t>(T);
    const size_t b = n * static_cast<size_t>(t + 1) / static_cast<size_t>(T);
    in.slices.push_back({a, b - a});
  }
  in.x.resize(n);
  in.acc.assign(n, 0.0f);
  in.copy.assign(n, 0.0f);
  {
    std::mt19937_64 rng(f.seed);
    std::normal_distribution<float> d(0.0f, 1.0f);
    for (auto& v : in.x) v = d(rng);
  }
  for (float v : in.x) in.norm2 += static_cast<double>(v) * v;
  in.gb = static_cast<double>(n) * 4 / 1e9;
  return in;
}

// Throughput of the references, GB/s of input, measured beside one variant.
struct Baselines {
  double memcpyGbps = 0;
  double streamGbps = 0;  // STREAM's Copy kernel, c[i] = a[i], counting bytes read and written
  double nthGbps = 0;     // exact top-k: copy + std::nth_element by magnitude
};

// One repetition of each reference on the benchmark's buffers: wall seconds.
double memcpyOnce(BenchInput& in) {
  return timed(in.threads, [&](int t) {
    const Slice s = in.slices[t];
    std::memcpy(in.copy.data() + s.offset, in.x.data() + s.offset, s.count * 4);
  });
}

double streamCopyOnce(BenchInput& in) {
  return timed(in.threads, [&](int t) {
    const Slice s = in.slices[t];
    const float* a = in.x.data() + s.offset;
    float* c = in.copy.data() + s.offset;
    for (size_t i = 0; i < s.count; ++i) c[i] = a[i];
  });
}

// Exact top-k: copy + std::nth_element by magnitude (per slice, k = 1% of it).
double nthElementOnce(BenchInput& in) {
  return timed(in.threads, [&](int t) {
    const Slice s = in.slices[t];
    std::memcpy(in.copy.data() + s.offset, in.x.data() + s.offset, s.count * 4);
    const size_t k = std::max<size_t>(1, static_cast<size_t>(std::llround(0.01 * s.count)));
    float* b = in.copy.data() + s.offset;
    std::nth_element(b, b + (k - 1), b + s.count,
                     [](float p, float q) { return std::fabs(p) > std::fabs(q); });
  });
}

// One compressor per thread slice, with its wire buffer and, when the variant has a lossless stage,
// its coder and buffers. encodeAll/decodeAll run every slice on its own thread and return the wall
// seconds; a failure sets failed.
class VariantRun {
 public:
  VariantRun(const Variant& v, BenchInput& in)
      : v_(v),
        in_(in),
        bytes_(in.threads, 0),
        coders_(in.threads),
        packed_(in.threads),
        unpacked_(in.threads),
        packedBytes_(in.threads, 0) {}

  // Builds the compressors; false after a message on stderr.
  bool init() {
    for (int t = 0; t < in_.threads; ++t) {
      const size_t cnt = in_.slices[t].count;
      const size_t rows = matrixRows(cnt);
      auto c = compress::makeCompressor(v_.method, v_.options, rows, cnt / rows);
      if (!c.isOk()) {
        std::cerr << "bench compress: " << v_.name << ": " << c.status().toString() << "\n";
        return false;
      }
      cs_.push_back(std::move(c).value());
      bufs_.emplace_back(cs_.back()->maxEncodedBytes(cnt) / 8 + 1, 0);
      if (v_.options.lossless != compress::Lossless::kNone) {
        packed_[t].assign(compress::LosslessCoder::maxCompressedBytes(bufs_[t].size() * 8) / 8 + 1,
                          0);
        unpacked_[t].assign(bufs_[t].size(), 0);
      }
    }
    return true;
  }

  double encodeAll(uint64_t key) {
    return timed(in_.threads, [&](int t) { encodeSlice(t, key); });
  }

  double decodeAll(float w) {
    return timed(in_.threads, [&](int t) { decodeSlice(t, w); });
  }

  bool failed() const { return failed_; }

  // Bytes on the wire (after the lossless stage where it ran) over all slices.
  size_t wireBytes() const {
    size_t wire = 0;
    for (int t = 0; t < in_.threads; ++t) wire += packedBytes_[t] > 0 ? packedBytes_[t] : bytes_[t];
    return wire;
  }

  double countError() const {
    double countErr = 0;
    for (int t = 0; t < in_.threads; ++t)
      countErr = std::max(countErr, std::fabs(cs_[t]->lastStats().countError));
    return countErr;
  }

 private:
  std::span<uint8_t> buf(int t) {
    return std::span<uint8_t>(reinterpret_cast<uint8_t*>(bufs_[t].data()), bufs_[t].size() * 8);
  }

  void encodeSlice(int t, uint64_t key) {
    const Slice s = in_.slices[t];
    auto r = cs_[t]->encode({in_.x.data() + s.offset, s.count}, key + t, buf(t));
    if (!r.isOk()) {
      failed_ = true;
      return;
    }
    bytes_[t] = *r;
    packedBytes_[t] = 0;
    if (v_.options.lossless != compress::Lossless::kNone) {
      auto raw = buf(t).first(bytes_[t]);
      auto p = coders_[t].compress(
          v_.options.lossless, v_.options.zstdLevel, raw, cs_[t]->floatRegion(raw),
          {reinterpret_cast<uint8_t*>(packed_[t].data()), packed_[t].size() * 8});
      packedBytes_[t] = p.isOk() ? *p : 0;
    }
  }

  void decodeSlice(int t, float w) {
    const Slice s = in_.slices[t];
    std::span<const uint8_t> payload = buf(t).first(bytes_[t]);
    if (packedBytes_[t] > 0) {  // undo the lossless stage first: part of decoding
      std::span<uint8_t> raw(reinterpret_cast<uint8_t*>(unpacked_[t].data()), bytes_[t]);
      if (!coders_[t]
               .decompress(v_.options.lossless,
                           {reinterpret_cast<const uint8_t*>(packed_[t].data()), packedBytes_[t]},
                           raw)
               .isOk()) {
        failed_ = true;
        return;
      }
      payload = raw;
    }
    if (!cs_[t]->decodeAccumulate(payload, w, {in_.acc.data() + s.offset, s.count}).isOk())
      failed_ = true;
  }

  const Variant& v_;
  BenchInput& in_;
  std::vector<std::unique_ptr<compress::Compressor>> cs_;
  std::vector<std::vector<uint64_t>> bufs_;
  std::vector<size_t> bytes_;
  std::vector<compress::LosslessCoder> coders_;
  std::vector<std::vector<uint64_t>> packed_, unpacked_;
  std::vector<size_t> packedBytes_;
  bool failed_ = false;
};

// What one variant measured, and its references measured between its repetitions.
struct VariantResult {
  double encSec = 1e300, decSec = 1e300;
  double err2 = 0;  // ||C(x) - x||^2
  size_t wire = 0;
  double countErr = 0;
  Baselines base;
};

// Encode and decode times (best of reps) and the error of one decode; kExitOk, or kExitFailure
// after a message on stderr. The references run interleaved with the variant (a repetition of
// each between its repetitions, on the same warm buffers), so load cannot fake a ratio.
int measureVariant(const BenchFlags& f, const Variant& v, BenchInput& in, VariantResult& out) {
  VariantRun run(v, in);
  if (!run.init()) return kExitFailure;
  run.encodeAll(f.seed);  // warm-up: sizes scratch (top-k workspace, PowerSGD state)
  uint64_t key = f.seed;
  double memcpySec = 1e300, streamSec = 1e300, nthSec = 1e300;
  for (int r = 0; r < f.reps; ++r) {
    memcpySec = std::min(memcpySec, memcpyOnce(in));
    out.encSec = std::min(out.encSec, run.encodeAll(++key));
    streamSec = std::min(streamSec, streamCopyOnce(in));
    if (v.method == Method::kTopK) nthSec = std::min(nthSec, nthElementOnce(in));
  }
  std::fill(in.acc.begin(), in.acc.end(), 0.0f);
  run.decodeAll(1.0f);
  for (size_t i = 0; i < in.n; ++i) {
    const double d = static_cast<double>(in.acc[i]) - in.x[i];
    out.err2 += d * d;
  }
  for (int r = 0; r < f.reps; ++r) {
    memcpySec = std::min(memcpySec, memcpyOnce(in));
    out.decSec = std::min(out.decSec, run.decodeAll(0.5f));
  }
  out.base = {in.gb / memcpySec, 2 * in.gb / streamSec, in.gb / nthSec};
  if (run.failed()) {
    std::cerr << "bench compress: " << v.name << " failed to encode or decode\n";
    return kExitFailure;
  }
  out.wire = run.wireBytes();
  out.countErr = run.countError();
  return kExitOk;
}

void writeTableHeader(std::ostream& table) {
  table << std::left << std::setw(22) << "method" << std::right << std::setw(10) << "enc GB/s"
        << std::setw(10) << "dec GB/s" << std::setw(10) << "bits/el" << std::setw(12) << "rel err"
        << std::setw(11) << "enc/mcpy" << std::setw(11) << "dec/mcpy"
        << "  notes\n";
}

// The JSON entry and the table row of one variant.
void report(const Variant& v, const BenchInput& in, const VariantResult& r, nlohmann::json& out,
            std::ostream& table) {
  const Baselines& base = r.base;
  const double gb = in.gb;
  const size_t n = in.n;
  nlohmann::json j = {
      {"method", v.name},
      {"encode_gbps", gb / r.encSec},
      {"decode_gbps", gb / r.decSec},
      {"memcpy_gbps", base.memcpyGbps},
      {"stream_copy_gbps", base.streamGbps},
      {"bits_per_element", 8.0 * static_cast<double>(r.wire) / static_cast<double>(n)},
      {"rel_error", std::sqrt(r.err2 / in.norm2)},
      {"elements", n},
      {"threads", in.threads}};
  std::string notes;
  if (v.method == Method::kTopK) {
    j["nth_element_gbps"] = base.nthGbps;
    j["speedup_vs_nth_element"] = (gb / r.encSec) / base.nthGbps;
    j["count_error"] = r.countErr;
    std::ostringstream ns;
    ns << std::fixed << std::setprecision(1) << (gb / r.encSec) / base.nthGbps << "x nth_element ("
       << std::setprecision(2) << base.nthGbps << " GB/s), count err " << std::setprecision(4)
       << r.countErr;
    notes = ns.str();
  }
  out.push_back(j);
  table << std::left << std::setw(22) << v.name << std::right << std::fixed << std::setprecision(2)
        << std::setw(10) << gb / r.encSec << std::setw(10) << gb / r.decSec << std::setw(10)
        << 8.0 * static_cast<double>(r.wire) / static_cast<double>(n) << std::setw(12)
        << std::setprecision(6) << std::sqrt(r.err2 / in.norm2) << std::setprecision(2)
        << std::setw(11) << (gb / r.encSec) / base.memcpyGbps << std::setw(11)
        << (gb / r.decSec) / base.memcpyGbps << "  " << notes << "\n";
}

bool selected(const BenchFlags& f, const Variant& v) {
  return f.methods.empty() || ("," + f.methods + ",").find("," + v.name + ",") != std::string::npos;
}

int runBenchCompress(const BenchFlags& f) {
  if (f.elements == 0 || f.threads < 1 || f.reps < 1) {
    std::cerr << "bench compress: --elements, --threads and --reps must be positive\n";
    return kExitBadInput;
  }
  BenchInput in = makeInput(f);
  nlohmann::json out = nlohmann::json::array();
  std::ostringstream table;
  writeTableHeader(table);
  double memcpyLow = 1e300, memcpyHigh = 0, streamLow = 1e300, streamHigh = 0;
  for (const Variant& v : variants()) {
    if (!selected(f, v)) continue;
    VariantResult r;
    if (const int rc = measureVariant(f, v, in, r); rc != kExitOk) return rc;
    report(v, in, r, out, table);
    memcpyLow = std::min(memcpyLow, r.base.memcpyGbps);
    memcpyHigh = std::max(memcpyHigh, r.base.memcpyGbps);
    streamLow = std::min(streamLow, r.base.streamGbps);
    streamHigh = std::max(streamHigh, r.base.streamGbps);
  }
  if (f.json) {
    std::cout << out.dump(2) << "\n";
  } else {
    std::cout << "elements " << in.n << ", threads " << in.threads << ", best of " << f.reps
              << ", kernels " << kernels::cpuOps().name << " (" << kernels::cpuFeatures() << ")\n"
              << std::fixed << std::setprecision(2) << "memcpy " << memcpyLow << "-" << memcpyHigh
              << " GB/s, STREAM copy " << streamLow << "-" << streamHigh
              << " GB/s (bytes read + written), each measured between the repetitions of every "
                 "method; its ratios use its own\n"
              << table.str();
  }
  return kExitOk;
}

}  // namespace

Command registerBench(CLI::App& root) {
  auto flags = std::make_shared<BenchFlags>();
  CLI::App* app = benchApp(root)->add_subcommand(
      "compress", "Compression throughput, wire size and error per method, against memcpy");
  app->add_option("--elements", flags->elements, "fp32 elements in the test buffer (N(0,1))")
      ->check(CLI::Range(size_t{1}, size_t{1} << 30));
  app->add_flag("--json", flags->json, "print a JSON list instead of a table");
  app->add_option("--threads", flags->threads, "threads (the buffer is split between them)")
      ->check(CLI::Range(1, 256));
  app->add_option("--reps", flags->reps, "repetitions; the best is reported")
      ->check(CLI::Range(1, 1000));
  app->add_option("--methods", flags->methods, "comma-separated subset, e.g. int8,top-k-approx");
  app->add_option("--seed", flags->seed, "input and key seed");
  return {app, [flags] { return runBenchCompress(*flags); }};
}

}  // namespace grapevine::cli
