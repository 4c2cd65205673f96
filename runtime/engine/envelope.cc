#include "runtime/engine/envelope.h"

#include <bit>
#include <cstdlib>
#include <cstring>
#include <string>

#include "kernels/ops.h"
#include "runtime/common/byte_order.h"

namespace grapevine::engine {
namespace {
// "<reason>: <detail>", the convention of compress/wire.h.
Status failed(Status (*make)(std::string), const char* reason, const std::string& detail) {
  return make(std::string(reason) + ": " + detail);
}
}  // namespace

std::uint16_t envelopeVersion() {
  static const std::uint16_t v = [] {
    const char* e = std::getenv("GRAPEVINE_TEST_ENVELOPE_VERSION");
    if (e == nullptr || *e == '\0') return kEnvelopeVersion;
    return static_cast<std::uint16_t>(std::strtoul(e, nullptr, 10));
  }();
  return v;
}

// Layout (little-endian on every host, runtime/common/byte_order.h): 0 magic u32, 4 version u16, 6
// flags u16, 8 sender u32, 12 incarnation u32, 16 sequence u64, 24 round u64, 32 liveDegree u32, 36
// messageBytes u32, 40 publicHash u64, 48 snapshotBytes u32, 52 payloadCrc u32 (CRC32C of
// everything after the header), 56 proposedStep f32 (its bits as u32; 0 when the step is fixed),
// 60 crc32c u32 of bytes [0, 60).
void writeEnvelope(const Envelope& e, std::span<std::uint8_t> out) {
  std::uint8_t* p = out.data();
  std::memset(p, 0, kEnvelopeBytes);
  storeLe(p + 0, kEnvelopeMagic);
  storeLe(p + 4, envelopeVersion());
  storeLe(p + 6, e.flags);
  storeLe(p + 8, e.sender);
  storeLe(p + 12, e.incarnation);
  storeLe(p + 16, e.sequence);
  storeLe(p + 24, e.round);
  storeLe(p + 32, e.liveDegree);
  storeLe(p + 36, e.messageBytes);
  storeLe(p + 40, e.publicHash);
  storeLe(p + 48, e.snapshotBytes);
  storeLe(p + 52, e.payloadCrc);
  storeLe(p + 56, std::bit_cast<std::uint32_t>(e.proposedStep));
  storeLe(p + 60, kernels::cpuOps().crc32c(0, p, 60));
}

Result<Envelope> readEnvelope(std::span<const std::uint8_t> bytes) {
  if (bytes.size() < kEnvelopeBytes) {
    return failed(
        dataLoss, "truncated",
        "message of " + std::to_string(bytes.size()) + " bytes is shorter than its envelope");
  }
  const std::uint8_t* p = bytes.data();
  if (loadLe<std::uint32_t>(p) != kEnvelopeMagic) {
    return failed(dataLoss, "bad_magic", "not a Grapevine message");
  }
  if (loadLe<std::uint16_t>(p + 4) != envelopeVersion()) {
    return failed(failedPrecondition, "version",
                  "message format version " + std::to_string(loadLe<std::uint16_t>(p + 4)) +
                      ", this build speaks " + std::to_string(envelopeVersion()));
  }
  if (loadLe<std::uint32_t>(p + 60) != kernels::cpuOps().crc32c(0, p, 60)) {
    return failed(dataLoss, "crc", "envelope checksum mismatch");
  }
  Envelope e;
  e.flags = loadLe<std::uint16_t>(p + 6);
  e.sender = loadLe<std::uint32_t>(p + 8);
  e.incarnation = loadLe<std::uint32_t>(p + 12);
  e.sequence = loadLe<std::uint64_t>(p + 16);
  e.round = loadLe<std::uint64_t>(p + 24);
  e.liveDegree = loadLe<std::uint32_t>(p + 32);
  e.messageBytes = loadLe<std::uint32_t>(p + 36);
  e.publicHash = loadLe<std::uint64_t>(p + 40);
  e.snapshotBytes = loadLe<std::uint32_t>(p + 48);
  e.payloadCrc = loadLe<std::uint32_t>(p + 52);
  e.proposedStep = std::bit_cast<float>(loadLe<std::uint32_t>(p + 56));
  if (static_cast<std::uint64_t>(e.messageBytes) + e.snapshotBytes + kEnvelopeBytes !=
      bytes.size()) {
    return failed(dataLoss, "truncated",
                  "envelope sizes (" + std::to_string(e.messageBytes) + " + " +
                      std::to_string(e.snapshotBytes) + ") do not match the message of " +
                      std::to_string(bytes.size()) + " bytes");
  }
  const auto payload = bytes.subspan(kEnvelopeBytes);
  if (kernels::cpuOps().crc32c(0, payload.data(), payload.size()) != e.payloadCrc) {
    return failed(dataLoss, "crc", "message checksum mismatch");
  }
  if (!(e.proposedStep >= 0.0f && e.proposedStep <= 1.0f)) {  // NaN fails too
    return failed(dataLoss, "bad_step", "proposed consensus step outside [0, 1]");
  }
  return e;
}

std::string_view envelopeErrorReason(const Status& status) {
  if (status.isOk()) return {};
  std::string_view m = status.message();
  return m.substr(0, m.find(':'));
}

std::uint32_t payloadChecksum(std::span<const std::uint8_t> payload, std::uint32_t running) {
  return kernels::cpuOps().crc32c(running, payload.data(), payload.size());
}

}  // namespace grapevine::engine
