// libFuzzer target: the lossless decoders (zstd and the exponent coder) on arbitrary input.
// Input: u8 stage (even zstd, odd exponent), u16 raw length (the output size), then the payload.
#include <cstdlib>
#include <vector>

#include "compress/lossless.h"
#include "fuzz/fuzz_common.h"

using namespace grapevine;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 3) return 0;
  static compress::LosslessCoder coder;
  const auto stage = (data[0] & 1) ? compress::Lossless::kExponent : compress::Lossless::kZstd;
  const size_t raw = size_t{data[1]} | (size_t{data[2]} << 8);
  std::vector<uint8_t> out(raw, 0xEE);
  Status s = coder.decompress(stage, {data + 3, size - 3}, out);
  if (!s.isOk() && compress::errorReason(s) != "lossless") std::abort();
  return 0;
}
