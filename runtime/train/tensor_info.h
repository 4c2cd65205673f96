// How a workload's tensors sit in the engine's ONE flat parameter vector.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace grapevine::train {

// Tensor `name` (e.g. "dense1.weight") of `shape` occupies x[offset, offset + count), row-major;
// count == prod(shape). Tensors are listed in offset order and tile the vector with no gaps.
struct TensorInfo {
  std::string name;
  std::vector<std::int64_t> shape;
  std::size_t offset = 0;
  std::size_t count = 0;
};

// [offset, offset + count) of the flat parameter vector.
struct ValueRange {
  std::size_t offset = 0;
  std::size_t count = 0;
};

}  // namespace grapevine::train
