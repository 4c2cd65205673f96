// Quadratic workload data files for tests: f_i(x) = 1/2 |a_i x - b_i|^2 with a_i in [0.5, 2) and
// b_i entries in [-2, 2), from a fixed portable generator (the file is the same on every machine).
#pragma once

#include <cstdint>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

namespace grapevine::test_util {

inline void writeQuadraticData(const std::string& path, int peers, int dim) {
  std::uint64_t s = 0x9E3779B97F4A7C15ull;
  auto next = [&] {  // xorshift64, 53 bits to [0, 1)
    s ^= s << 13;
    s ^= s >> 7;
    s ^= s << 17;
    return static_cast<double>(s >> 11) / 9007199254740992.0;
  };
  nlohmann::json a = nlohmann::json::array(), b = nlohmann::json::array();
  for (int i = 0; i < peers; ++i) {
    a.push_back(0.5 + 1.5 * next());
    nlohmann::json row = nlohmann::json::array();
    for (int k = 0; k < dim; ++k) row.push_back(4.0 * next() - 2.0);
    b.push_back(row);
  }
  std::ofstream(path) << nlohmann::json{{"a", a}, {"b", b}}.dump();
}

}  // namespace grapevine::test_util
