// libFuzzer target: the readers of the files a run leaves and reads back (issue 41: hostile files):
// a checkpoint (engine::parseCheckpoint: what --resume and `grapevine evaluate` load), a model file
// (engine::parseModel: what `summarize` and `launch` build summary.json from) and a rendezvous rank
// file (engine::parseRankFile: what a peer dials). The readers' regular-file and size bounds come
// before these (readRegularFile, bounded_input_test); this is what they check in the bytes.
//
// Input: u8 mode (mod 3: 0 checkpoint, 1 model file, 2 rank file) then the file's bytes. The
// checkpoint identity is the seeds' run (rank 0 of 2, consensus, dsgd, 8 parameters, run.seed 5);
// a model file is read for 8 values.
// Properties beyond "no crash, no sanitizer report": every refusal names the file; an accepted
// checkpoint has a model of exactly 8 finite values and parses to the same state twice; an accepted
// model file has 8 values, the magic of a format and, in format 2, the CRC32C of its bytes; an
// accepted rank file gives host:port with a decimal port 1-65535 and no byte outside the address
// characters, and a refusal quotes the file's bytes printable (no control byte reaches a log).
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <span>
#include <string>
#include <string_view>

#include "kernels/ops.h"
#include "runtime/common/byte_order.h"
#include "runtime/engine/checkpoint.h"
#include "runtime/engine/rendezvous.h"
#include "runtime/engine/summary.h"

using namespace grapevine;

namespace {

constexpr std::size_t kParameters = 8;
const std::string kPath = "fuzz-input";

void require(bool ok) {
  if (!ok) std::abort();
}

bool namesFile(const Status& st) { return st.message().find(kPath) != std::string::npos; }

void checkpoint(std::span<const std::uint8_t> bytes) {
  engine::CheckpointIdentity id;
  id.rank = 0;
  id.peers = 2;
  id.workload = "consensus";
  id.algorithm = "dsgd";
  id.parameters = kParameters;
  id.config = {{"run.seed", "5"}};
  const auto r = engine::parseCheckpoint(bytes, kPath, id);
  if (!r.isOk()) {
    require(namesFile(r.status()));
    return;
  }
  require(r->state.model.size() == kParameters);
  for (float v : r->state.model) require(std::isfinite(v));
  const auto again = engine::parseCheckpoint(bytes, kPath, id);
  require(again.isOk() && again->state.model == r->state.model &&
          again->state.round == r->state.round && again->state.algorithm == r->state.algorithm &&
          again->incarnation == r->incarnation);
}

void model(std::span<const std::uint8_t> bytes) {
  const auto r = engine::parseModel(bytes, kPath, kParameters);
  if (!r.isOk()) {
    require(namesFile(r.status()));
    return;
  }
  require(r->size() == kParameters);
  require(bytes.size() >= 16 && std::memcmp(bytes.data(), "GVMODEL", 7) == 0);
  require(std::memcmp(bytes.data() + 16, r->data(), kParameters * sizeof(float)) == 0);
  if (bytes[7] == '2') {
    const std::size_t body = bytes.size() - 8;
    require(loadLe<std::uint64_t>(bytes.data() + body) ==
            kernels::cpuOps().crc32c(0, bytes.data(), body));
  } else {
    require(bytes[7] == '1' && bytes.size() == 16 + kParameters * sizeof(float));
  }
}

void rankFile(std::span<const std::uint8_t> bytes) {
  const std::string_view text(reinterpret_cast<const char*>(bytes.data()), bytes.size());
  const auto r = engine::parseRankFile(text, kPath);
  if (!r.isOk()) {
    require(namesFile(r.status()));
    const std::string message = r.status().message();
    for (char c : message) {
      require(static_cast<unsigned char>(c) >= 0x20 && static_cast<unsigned char>(c) < 0x7f);
    }
    return;
  }
  const std::string& a = *r;
  const auto colon = a.rfind(':');
  require(colon != std::string::npos && colon > 0 && colon + 1 < a.size());
  const long port = std::strtol(a.c_str() + colon + 1, nullptr, 10);
  require(port >= 1 && port <= 65535);
  require(a.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789.-_:"
                              "[]%") == std::string::npos);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const std::span<const std::uint8_t> bytes(data + 1, size - 1);
  switch (data[0] % 3) {
    case 0:
      checkpoint(bytes);
      break;
    case 1:
      model(bytes);
      break;
    default:
      rankFile(bytes);
  }
  return 0;
}
