// `grapevine bench <what>`: micro-benchmarks. `bench` is a parent app created once (benchApp());
// each benchmark is a child registered from its own file. This file adds `bench compress`.
//
// bench compress: for each method, encode and decode throughput (GB/s of fp32 input), wire bits
// per element, relative error ||C(x) - x|| / ||x||, and, measured in the same run on the same
// buffer, memcpy throughput and an exact std::nth_element top-k (copy + nth_element by magnitude).
// Buffers are allocated and touched once before timing; each number is the best of --reps runs.
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
  v.push_back({"qsgd", Method::kQsgd, o});
  o.rank = 4;
  v.push_back({"low-rank", Method::kLowRank, o});
  o = {};
  o.lossless = compress::Lossless::kZstd;
  v.push_back({"none+zstd", Method::kNone, o});
  o.lossless = compress::Lossless::kExponent;
  v.push_back({"none+exponent", Method::kNone, o});
  o.ratio = 0.01;
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
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

double best(int reps, const std::function<double()>& run) {
  double b = 1e300;
  for (int r = 0; r < reps; ++r) b = std::min(b, run());
  return b;
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

int runBenchCompress(const BenchFlags& f) {
  if (f.elements == 0 || f.threads < 1 || f.reps < 1) {
    std::cerr << "bench compress: --elements, --threads and --reps must be positive\n";
    return kExitBadInput;
  }
  const size_t n = f.elements;
  const int T = f.threads;
  std::vector<Slice> slices;
  for (int t = 0; t < T; ++t) {
    const size_t a = n * static_cast<size_t>(t) / static_cast<size_t>(T);
    const size_t b = n * static_cast<size_t>(t + 1) / static_cast<size_t>(T);
    slices.push_back({a, b - a});
  }
  // Buffers, allocated and touched once (first touch costs more than the work being measured).
  std::vector<float> x(n), acc(n, 0.0f), copy(n, 0.0f);
  {
    std::mt19937_64 rng(f.seed);
    std::normal_distribution<float> d(0.0f, 1.0f);
    for (auto& v : x) v = d(rng);
  }
  double norm2 = 0;
  for (float v : x) norm2 += static_cast<double>(v) * v;
  const double gb = static_cast<double>(n) * 4 / 1e9;

  const double memcpySec = best(f.reps, [&] {
    return timed(T, [&](int t) {
      std::memcpy(copy.data() + slices[t].offset, x.data() + slices[t].offset, slices[t].count * 4);
    });
  });
  const double memcpyGbps = gb / memcpySec;
  // Exact top-k baseline: copy + std::nth_element by magnitude (per slice, k = 1% of it).
  const double nthSec = best(f.reps, [&] {
    return timed(T, [&](int t) {
      const Slice s = slices[t];
      std::memcpy(copy.data() + s.offset, x.data() + s.offset, s.count * 4);
      const size_t k = std::max<size_t>(1, static_cast<size_t>(std::llround(0.01 * s.count)));
      float* b = copy.data() + s.offset;
      std::nth_element(b, b + (k - 1), b + s.count,
                       [](float p, float q) { return std::fabs(p) > std::fabs(q); });
    });
  });
  const double nthGbps = gb / nthSec;

  nlohmann::json out = nlohmann::json::array();
  std::ostringstream table;
  table << std::left << std::setw(22) << "method" << std::right << std::setw(10) << "enc GB/s"
        << std::setw(10) << "dec GB/s" << std::setw(10) << "bits/el" << std::setw(12) << "rel err"
        << std::setw(11) << "enc/mcpy" << std::setw(11) << "dec/mcpy"
        << "  notes\n";
  for (const Variant& v : variants()) {
    if (!f.methods.empty() && ("," + f.methods + ",").find("," + v.name + ",") == std::string::npos)
      continue;
    std::vector<std::unique_ptr<compress::Compressor>> cs;
    std::vector<std::vector<uint64_t>> bufs;
    std::vector<size_t> bytes(T, 0);
    std::vector<compress::LosslessCoder> coders(T);
    std::vector<std::vector<uint64_t>> packed(T), unpacked(T);
    std::vector<size_t> packedBytes(T, 0);
    for (int t = 0; t < T; ++t) {
      const size_t cnt = slices[t].count;
      const size_t rows = matrixRows(cnt);
      auto c = compress::makeCompressor(v.method, v.options, rows, cnt / rows);
      if (!c.isOk()) {
        std::cerr << "bench compress: " << v.name << ": " << c.status().toString() << "\n";
        return kExitFailure;
      }
      cs.push_back(std::move(c).value());
      bufs.emplace_back(cs.back()->maxEncodedBytes(cnt) / 8 + 1, 0);
      if (v.options.lossless != compress::Lossless::kNone) {
        packed[t].assign(compress::LosslessCoder::maxCompressedBytes(bufs[t].size() * 8) / 8 + 1,
                         0);
        unpacked[t].assign(bufs[t].size(), 0);
      }
    }
    auto buf = [&](int t) {
      return std::span<uint8_t>(reinterpret_cast<uint8_t*>(bufs[t].data()), bufs[t].size() * 8);
    };
    bool failed = false;
    auto encodeAll = [&](uint64_t key) {
      return timed(T, [&](int t) {
        const Slice s = slices[t];
        auto r = cs[t]->encode({x.data() + s.offset, s.count}, key + t, buf(t));
        if (!r.isOk()) {
          failed = true;
          return;
        }
        bytes[t] = *r;
        packedBytes[t] = 0;
        if (v.options.lossless != compress::Lossless::kNone) {
          auto raw = buf(t).first(bytes[t]);
          auto p = coders[t].compress(
              v.options.lossless, v.options.zstd_level, raw, cs[t]->floatRegion(raw),
              {reinterpret_cast<uint8_t*>(packed[t].data()), packed[t].size() * 8});
          packedBytes[t] = p.isOk() ? *p : 0;
        }
      });
    };
    auto decodeAll = [&](float w) {
      return timed(T, [&](int t) {
        const Slice s = slices[t];
        std::span<const uint8_t> payload = buf(t).first(bytes[t]);
        if (packedBytes[t] > 0) {  // undo the lossless stage first: part of decoding
          std::span<uint8_t> raw(reinterpret_cast<uint8_t*>(unpacked[t].data()), bytes[t]);
          if (!coders[t]
                   .decompress(v.options.lossless,
                               {reinterpret_cast<const uint8_t*>(packed[t].data()), packedBytes[t]},
                               raw)
                   .isOk()) {
            failed = true;
            return;
          }
          payload = raw;
        }
        if (!cs[t]->decodeAccumulate(payload, w, {acc.data() + s.offset, s.count}).isOk())
          failed = true;
      });
    };
    encodeAll(f.seed);  // warm-up: sizes scratch (top-k workspace, PowerSGD state)
    uint64_t key = f.seed;
    const double encSec = best(f.reps, [&] { return encodeAll(++key); });
    std::fill(acc.begin(), acc.end(), 0.0f);
    decodeAll(1.0f);
    double err2 = 0;
    for (size_t i = 0; i < n; ++i) {
      const double d = static_cast<double>(acc[i]) - x[i];
      err2 += d * d;
    }
    const double decSec = best(f.reps, [&] { return decodeAll(0.5f); });
    if (failed) {
      std::cerr << "bench compress: " << v.name << " failed to encode or decode\n";
      return kExitFailure;
    }
    size_t wire = 0;
    double countErr = 0;
    for (int t = 0; t < T; ++t) {
      wire += packedBytes[t] > 0 ? packedBytes[t] : bytes[t];
      countErr = std::max(countErr, std::fabs(cs[t]->lastStats().countError));
    }
    nlohmann::json j = {
        {"method", v.name},
        {"encode_gbps", gb / encSec},
        {"decode_gbps", gb / decSec},
        {"memcpy_gbps", memcpyGbps},
        {"bits_per_element", 8.0 * static_cast<double>(wire) / static_cast<double>(n)},
        {"rel_error", std::sqrt(err2 / norm2)},
        {"elements", n},
        {"threads", T}};
    std::string notes;
    if (v.method == Method::kTopK) {
      j["nth_element_gbps"] = nthGbps;
      j["speedup_vs_nth_element"] = (gb / encSec) / nthGbps;
      j["count_error"] = countErr;
      std::ostringstream ns;
      ns << std::fixed << std::setprecision(1) << (gb / encSec) / nthGbps << "x nth_element ("
         << std::setprecision(2) << nthGbps << " GB/s), count err " << std::setprecision(4)
         << countErr;
      notes = ns.str();
    }
    out.push_back(j);
    table << std::left << std::setw(22) << v.name << std::right << std::fixed
          << std::setprecision(2) << std::setw(10) << gb / encSec << std::setw(10) << gb / decSec
          << std::setw(10) << 8.0 * static_cast<double>(wire) / static_cast<double>(n)
          << std::setw(12) << std::setprecision(6) << std::sqrt(err2 / norm2)
          << std::setprecision(2) << std::setw(11) << (gb / encSec) / memcpyGbps << std::setw(11)
          << (gb / decSec) / memcpyGbps << "  " << notes << "\n";
  }
  if (f.json) {
    std::cout << out.dump(2) << "\n";
  } else {
    std::cout << "elements " << n << ", threads " << T << ", best of " << f.reps << ", kernels "
              << kernels::cpuOps().name << " (" << kernels::cpuFeatures() << ")\n"
              << "memcpy " << std::fixed << std::setprecision(2) << memcpyGbps << " GB/s\n"
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
