// libFuzzer target: the address blob of the tagged backends (runtime/transport/tagged/
// address_blob.h): parseAddress on what a neighbour's hello carries as its data address, as the
// ucx and libfabric backends' connect() run it, then sameHost() (whether its pid may be watched).
//
// Input: u8 selector | blob. Selector bit 0: the format (the ucx backend's magic and version, or
// the libfabric backend's, as their .cc files define them); bits 1-7: the rank the blob must name.
// Properties beyond "no crash, no sanitizer report": an accepted blob is longer than the header,
// its header is its first 24 bytes with the format's magic and version and the expected rank, and
// its backend address is the rest, aligned; it is refused for any other rank and by the other
// format; a refused one says why, naming the backend; encodeAddress of the backend address parses
// back to it with this process's pid and host key.
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <span>
#include <string>

#include "runtime/transport/tagged/address_blob.h"

using namespace grapevine;
namespace tagged = grapevine::transport::tagged;

namespace {

// As runtime/transport/ucx/ucx.cc and ofi/ofi.cc define them (those files build only with their
// libraries; the parser under test is the shared one).
constexpr tagged::AddressFormat kFormats[2] = {
    {0x58555647 /* "GVUX" */, 2, "ucx", "UCX"},
    {0x464f5647 /* "GVOF" */, 1, "libfabric", "libfabric"},
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const tagged::AddressFormat& format = kFormats[data[0] & 1];
  const tagged::AddressFormat& other = kFormats[(data[0] & 1) ^ 1];
  const int peer = data[0] >> 1;
  const std::span<const std::uint8_t> blob(data + 1, size - 1);

  auto parsed = tagged::parseAddress(format, peer, blob);
  if (!parsed.isOk()) {
    const std::string m = parsed.status().message();
    if (m.rfind(std::string(format.backend) + ": ", 0) != 0) std::abort();
    return 0;
  }
  const tagged::PeerAddress& a = *parsed;
  if (blob.size() <= tagged::kAddressHeaderBytes) std::abort();
  if (std::memcmp(&a.header, blob.data(), tagged::kAddressHeaderBytes) != 0) std::abort();
  if (a.header.magic != format.magic || a.header.version != format.version ||
      a.header.rank != static_cast<std::uint32_t>(peer)) {
    std::abort();
  }
  if (a.backendAddress.size() != blob.size() - tagged::kAddressHeaderBytes ||
      std::memcmp(a.backendAddress.data(), blob.data() + tagged::kAddressHeaderBytes,
                  a.backendAddress.size()) != 0) {
    std::abort();
  }
  (void)a.sameHost();
  if (tagged::parseAddress(format, peer + 1, blob).isOk()) std::abort();
  if (tagged::parseAddress(other, peer, blob).isOk()) std::abort();

  static const std::uint64_t ourHostKey = tagged::hostKey();
  const auto ours = tagged::encodeAddress(format, peer, a.backendAddress);
  auto back = tagged::parseAddress(format, peer, ours);
  if (!back.isOk() || back->backendAddress != a.backendAddress ||
      back->header.pid != static_cast<std::uint32_t>(::getpid()) ||
      back->header.hostKey != ourHostKey || (ourHostKey != 0 && !back->sameHost())) {
    std::abort();
  }
  return 0;
}
