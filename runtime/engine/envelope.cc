#include "runtime/engine/envelope.h"

#include <cstring>

#include "kernels/ops.h"

namespace grapevine::engine {
namespace {
template <typename T>
void put(std::uint8_t* p, T v) {
  std::memcpy(p, &v, sizeof v);  // little-endian hosts only (checked in CMake by the codec)
}
template <typename T>
T get(const std::uint8_t* p) {
  T v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
}  // namespace

// Layout (little-endian): 0 magic u32, 4 version u16, 6 flags u16, 8 sender u32, 12 incarnation
// u32, 16 sequence u64, 24 round u64, 32 liveDegree u32, 36 messageBytes u32, 40 publicHash u64, 48
// snapshotBytes u32, 52 payloadCrc u32 (CRC32C of everything after the header), 56 reserved u32
// (zero), 60 crc32c u32 of bytes [0, 60).
void writeEnvelope(const Envelope& e, std::span<std::uint8_t> out) {
  std::uint8_t* p = out.data();
  std::memset(p, 0, kEnvelopeBytes);
  put(p + 0, kEnvelopeMagic);
  put(p + 4, kEnvelopeVersion);
  put(p + 6, e.flags);
  put(p + 8, e.sender);
  put(p + 12, e.incarnation);
  put(p + 16, e.sequence);
  put(p + 24, e.round);
  put(p + 32, e.liveDegree);
  put(p + 36, e.messageBytes);
  put(p + 40, e.publicHash);
  put(p + 48, e.snapshotBytes);
  put(p + 52, e.payloadCrc);
  put(p + 60, kernels::cpuOps().crc32c(0, p, 60));
}

Result<Envelope> readEnvelope(std::span<const std::uint8_t> bytes, const char** reason) {
  if (bytes.size() < kEnvelopeBytes) {
    *reason = "truncated";
    return dataLoss("message of " + std::to_string(bytes.size()) +
                    " bytes is shorter than its envelope");
  }
  const std::uint8_t* p = bytes.data();
  if (get<std::uint32_t>(p) != kEnvelopeMagic) {
    *reason = "bad_magic";
    return invalidArgument("not a Grapevine message (bad magic)");
  }
  if (get<std::uint16_t>(p + 4) != kEnvelopeVersion) {
    *reason = "version";
    return invalidArgument("message format version " + std::to_string(get<std::uint16_t>(p + 4)) +
                           ", this build speaks " + std::to_string(kEnvelopeVersion));
  }
  if (get<std::uint32_t>(p + 60) != kernels::cpuOps().crc32c(0, p, 60)) {
    *reason = "crc";
    return dataLoss("envelope checksum mismatch");
  }
  Envelope e;
  e.flags = get<std::uint16_t>(p + 6);
  e.sender = get<std::uint32_t>(p + 8);
  e.incarnation = get<std::uint32_t>(p + 12);
  e.sequence = get<std::uint64_t>(p + 16);
  e.round = get<std::uint64_t>(p + 24);
  e.liveDegree = get<std::uint32_t>(p + 32);
  e.messageBytes = get<std::uint32_t>(p + 36);
  e.publicHash = get<std::uint64_t>(p + 40);
  e.snapshotBytes = get<std::uint32_t>(p + 48);
  e.payloadCrc = get<std::uint32_t>(p + 52);
  if (static_cast<std::uint64_t>(e.messageBytes) + e.snapshotBytes + kEnvelopeBytes !=
      bytes.size()) {
    *reason = "truncated";
    return dataLoss("envelope sizes (" + std::to_string(e.messageBytes) + " + " +
                    std::to_string(e.snapshotBytes) + ") do not match the message of " +
                    std::to_string(bytes.size()) + " bytes");
  }
  const auto payload = bytes.subspan(kEnvelopeBytes);
  if (kernels::cpuOps().crc32c(0, payload.data(), payload.size()) != e.payloadCrc) {
    *reason = "crc";
    return dataLoss("message checksum mismatch");
  }
  return e;
}

std::uint32_t payloadChecksum(std::span<const std::uint8_t> payload) {
  return kernels::cpuOps().crc32c(0, payload.data(), payload.size());
}

}  // namespace grapevine::engine
