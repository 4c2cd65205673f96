#include "runtime/transport/handshake.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <map>
#include <optional>

#include "runtime/common/byte_order.h"

namespace grapevine::transport::handshake {
namespace {

std::string hex(std::uint64_t v) {
  char b[19];
  std::snprintf(b, sizeof b, "%#018llx", static_cast<unsigned long long>(v));
  return b;
}

void append(std::vector<std::uint8_t>& out, const void* data, std::size_t n) {
  const auto* b = static_cast<const std::uint8_t*>(data);
  out.insert(out.end(), b, b + n);
}
template <typename T>
void appendLe(std::vector<std::uint8_t>& out, T v) {
  std::uint8_t tmp[sizeof(T)];
  storeLe(tmp, v);
  append(out, tmp, sizeof tmp);
}

Status tooLong(const char* field, std::size_t n, std::size_t limit) {
  return invalidArgument("hello: " + std::string(field) + " of " + std::to_string(n) +
                         " exceeds its limit of " + std::to_string(limit));
}

// Reads fields front to back; every read first checks that the field fits.
class Reader {
 public:
  Reader(std::span<const std::uint8_t> p, std::size_t at, int sender)
      : p_(p), at_(at), sender_(sender) {}

  Status need(std::size_t n, const char* field) const {
    if (at_ + n <= p_.size()) return Status::ok();
    return dataLoss("truncated hello from peer " + std::to_string(sender_) + ": " + field +
                    " needs " + std::to_string(n) + " bytes at offset " + std::to_string(at_) +
                    ", the hello has " + std::to_string(p_.size()));
  }
  template <typename T>
  Result<T> le(const char* field) {
    GV_RETURN_IF_ERROR(need(sizeof(T), field));
    const T v = loadLe<T>(p_.data() + at_);
    at_ += sizeof(T);
    return v;
  }
  Result<std::span<const std::uint8_t>> bytes(std::size_t n, const char* field) {
    GV_RETURN_IF_ERROR(need(n, field));
    const auto s = p_.subspan(at_, n);
    at_ += n;
    return s;
  }
  std::size_t at() const { return at_; }
  std::size_t remaining() const { return p_.size() - at_; }

 private:
  std::span<const std::uint8_t> p_;
  std::size_t at_;
  int sender_;
};

std::string text(std::span<const std::uint8_t> b) {
  return std::string(reinterpret_cast<const char*>(b.data()), b.size());
}

}  // namespace

FrameHeader decodeFrameHeader(const std::uint8_t* header) {
  return FrameHeader{loadLe32(header), loadLe16(header + 4)};
}

std::vector<std::uint8_t> encodeFrame(std::uint16_t type, std::span<const std::uint8_t> payload) {
  std::vector<std::uint8_t> f(kFrameHeaderBytes + payload.size());
  storeLe32(f.data(), static_cast<std::uint32_t>(payload.size()));
  storeLe16(f.data() + 4, type);
  if (!payload.empty()) std::memcpy(f.data() + kFrameHeaderBytes, payload.data(), payload.size());
  return f;
}

std::vector<std::uint8_t> encodeSealedFrame(const security::Key& controlKey, std::uint32_t sender,
                                            std::uint64_t sequence, std::uint16_t type,
                                            std::span<const std::uint8_t> payload) {
  std::vector<std::uint8_t> f(kFrameHeaderBytes + payload.size() + security::kSealTagBytes);
  storeLe32(f.data(), static_cast<std::uint32_t>(payload.size() + security::kSealTagBytes));
  storeLe16(f.data() + 4, type);
  if (!payload.empty()) std::memcpy(f.data() + kFrameHeaderBytes, payload.data(), payload.size());
  security::seal(controlKey, /*encrypt=*/false, sender, sequence,
                 f.size() - security::kSealTagBytes, f);
  return f;
}

std::optional<std::span<const std::uint8_t>> openSealedFrame(const security::Key& controlKey,
                                                             std::uint32_t sender,
                                                             std::uint64_t sequence,
                                                             const std::uint8_t* header,
                                                             std::span<const std::uint8_t> body) {
  if (body.size() < security::kSealTagBytes) return std::nullopt;
  std::vector<std::uint8_t> m(header, header + kFrameHeaderBytes);
  m.insert(m.end(), body.begin(), body.end());
  if (!security::verify(controlKey, sender, sequence, m)) return std::nullopt;
  return body.first(body.size() - security::kSealTagBytes);
}

namespace {

// The private fields as a key holder seals them: u32 length + address, u16 length + build id,
// u8 1 + u64 running round (or u8 0).
std::vector<std::uint8_t> privateFields(const Hello& h) {
  std::vector<std::uint8_t> p;
  appendLe(p, static_cast<std::uint32_t>(h.address.size()));
  append(p, h.address.data(), h.address.size());
  const std::size_t n = std::min<std::size_t>(h.buildId.size(), kMaxBuildIdBytes);
  appendLe(p, static_cast<std::uint16_t>(n));
  append(p, h.buildId.data(), n);
  appendLe(p, static_cast<std::uint8_t>(h.runningRound >= 0 ? 1 : 0));
  if (h.runningRound >= 0) appendLe(p, static_cast<std::uint64_t>(h.runningRound));
  appendLe(p, h.capabilities);
  return p;
}

Status checkRunningRound(std::uint64_t round, int sender) {
  if (round <= static_cast<std::uint64_t>(INT64_MAX / 2)) return Status::ok();
  return dataLoss("malformed hello from peer " + std::to_string(sender) + ": running round " +
                  std::to_string(round) + " out of range");
}

}  // namespace

Result<std::vector<std::uint8_t>> encodeHello(const Hello& h,
                                              const std::optional<security::Key>& sealWith) {
  if (sealWith && !h.nonce) {
    return invalidArgument("hello: sealing its private fields needs the key's nonce");
  }
  if (h.backend.size() > kMaxBackendNameBytes) {
    return tooLong("backend name", h.backend.size(), kMaxBackendNameBytes);
  }
  if (h.address.size() > kMaxAddressBytes) {
    return tooLong("address", h.address.size(), kMaxAddressBytes);
  }
  if (h.parts.size() > kMaxConfigParts) {
    return tooLong("number of config parts", h.parts.size(), kMaxConfigParts);
  }
  for (const ConfigPart& part : h.parts) {
    if (part.name.size() > kMaxPartNameBytes) {
      return tooLong(("config part name '" + part.name.substr(0, 16) + "...'").c_str(),
                     part.name.size(), kMaxPartNameBytes);
    }
  }
  std::vector<std::uint8_t> p(kHelloFixedBytes);
  storeLe32(p.data(), kControlMagic);
  storeLe16(p.data() + 4, h.version);
  storeLe16(p.data() + 6, 0);  // reserved
  storeLe32(p.data() + 8, static_cast<std::uint32_t>(h.sender));
  storeLe32(p.data() + 12, static_cast<std::uint32_t>(h.receiver));
  storeLe64(p.data() + 16, h.incarnation);
  appendLe(p, static_cast<std::uint16_t>(h.backend.size()));
  append(p, h.backend.data(), h.backend.size());
  // With a key the address goes in the box below: the field is empty.
  const std::size_t clearAddress = sealWith ? 0 : h.address.size();
  appendLe(p, static_cast<std::uint32_t>(clearAddress));
  append(p, h.address.data(), clearAddress);
  appendLe(p, static_cast<std::uint16_t>(h.parts.size()));
  for (const ConfigPart& part : h.parts) {
    appendLe(p, static_cast<std::uint8_t>(part.name.size()));
    append(p, part.name.data(), part.name.size());
    appendLe(p, part.hash);
  }
  if (h.nonce) {
    appendLe(p, std::uint8_t{1});
    append(p, h.nonce->data(), h.nonce->size());
  }
  if (sealWith) {
    const std::vector<std::uint8_t> box =
        security::sealBox(security::helloKey(*sealWith), p, privateFields(h));
    if (box.size() > kMaxAddressBytes)
      return tooLong("sealed fields", box.size(), kMaxAddressBytes);
    appendLe(p, std::uint8_t{4});
    appendLe(p, static_cast<std::uint32_t>(box.size()));
    append(p, box.data(), box.size());
    return p;
  }
  if (!h.buildId.empty()) {
    const std::size_t n = std::min<std::size_t>(h.buildId.size(), kMaxBuildIdBytes);
    appendLe(p, std::uint8_t{2});
    appendLe(p, static_cast<std::uint16_t>(n));
    append(p, h.buildId.data(), n);
  }
  if (h.runningRound >= 0) {
    appendLe(p, std::uint8_t{3});
    appendLe(p, static_cast<std::uint64_t>(h.runningRound));
  }
  return p;
}

Result<HelloPrefix> decodeHelloPrefix(std::span<const std::uint8_t> p) {
  if (p.size() < kHelloFixedBytes) {
    return dataLoss("not a grapevine control connection (short hello: " + std::to_string(p.size()) +
                    " bytes, the fixed part alone is " + std::to_string(kHelloFixedBytes) + ")");
  }
  if (loadLe32(p.data()) != kControlMagic) {
    return dataLoss("not a grapevine control connection (bad magic)");
  }
  HelloPrefix h;
  h.version = loadLe16(p.data() + 4);
  h.sender = static_cast<int>(loadLe32(p.data() + 8));
  h.receiver = static_cast<int>(loadLe32(p.data() + 12));
  h.incarnation = loadLe64(p.data() + 16);
  return h;
}

Result<Hello> decodeHello(std::span<const std::uint8_t> p) {
  GV_ASSIGN_OR_RETURN(const HelloPrefix prefix, decodeHelloPrefix(p));
  if (prefix.version != kControlProtocolVersion) {
    return failedPrecondition(
        "control protocol version mismatch with peer " + std::to_string(prefix.sender) + ": ours " +
        std::to_string(kControlProtocolVersion) + ", theirs " + std::to_string(prefix.version));
  }
  Hello h;
  static_cast<HelloPrefix&>(h) = prefix;
  Reader r(p, kHelloFixedBytes, h.sender);
  GV_ASSIGN_OR_RETURN(const std::uint16_t backendBytes, r.le<std::uint16_t>("backend length"));
  GV_ASSIGN_OR_RETURN(const auto backend, r.bytes(backendBytes, "backend name"));
  h.backend = text(backend);
  GV_ASSIGN_OR_RETURN(const std::uint32_t addressBytes, r.le<std::uint32_t>("address length"));
  GV_ASSIGN_OR_RETURN(const auto address, r.bytes(addressBytes, "address"));
  h.address.assign(address.begin(), address.end());
  GV_ASSIGN_OR_RETURN(const std::uint16_t parts, r.le<std::uint16_t>("config part count"));
  for (std::size_t i = 0; i < parts; ++i) {
    GV_ASSIGN_OR_RETURN(const std::uint8_t nameBytes,
                        r.le<std::uint8_t>("config part name length"));
    GV_ASSIGN_OR_RETURN(const auto name, r.bytes(nameBytes, "config part name"));
    GV_ASSIGN_OR_RETURN(const std::uint64_t hash, r.le<std::uint64_t>("config part hash"));
    std::string partName = text(name);
    // One hash per part: with two, which one counts would depend on the comparison's order.
    for (const ConfigPart& seen : h.parts) {
      if (seen.name == partName) {
        return dataLoss("malformed hello from peer " + std::to_string(h.sender) +
                        ": config part '" + partName + "' appears twice");
      }
    }
    h.parts.push_back(ConfigPart{std::move(partName), hash});
  }
  // Optional trailer items: u8 kind, then 1: the key's nonce (32 bytes), 2: u16 length + build id,
  // 3: u64 running round, 4: u32 length + the sealed private fields (with a key). An unknown kind
  // ends the trailer (room for additions within a version: ignored).
  while (r.need(1, "trailer").isOk()) {
    GV_ASSIGN_OR_RETURN(const std::uint8_t kind, r.le<std::uint8_t>("trailer kind"));
    if (kind == 1) {
      GV_ASSIGN_OR_RETURN(const auto nonce, r.bytes(security::kNonceBytes, "nonce"));
      h.nonce.emplace();
      std::memcpy(h.nonce->data(), nonce.data(), security::kNonceBytes);
    } else if (kind == 2) {
      GV_ASSIGN_OR_RETURN(const std::uint16_t n, r.le<std::uint16_t>("build id length"));
      GV_ASSIGN_OR_RETURN(const auto id, r.bytes(n, "build id"));
      h.buildId = text(id);
    } else if (kind == 3) {
      GV_ASSIGN_OR_RETURN(const std::uint64_t round, r.le<std::uint64_t>("running round"));
      GV_RETURN_IF_ERROR(checkRunningRound(round, h.sender));
      h.runningRound = static_cast<std::int64_t>(round);
    } else if (kind == 4) {
      const std::size_t at = r.at() - 1;
      GV_ASSIGN_OR_RETURN(const std::uint32_t n, r.le<std::uint32_t>("sealed fields length"));
      GV_ASSIGN_OR_RETURN(const auto box, r.bytes(n, "sealed fields"));
      if (!h.sealed.empty()) {
        return dataLoss("malformed hello from peer " + std::to_string(h.sender) +
                        ": sealed fields appear twice");
      }
      h.sealed.assign(box.begin(), box.end());
      h.sealedAt = at;
    } else {
      break;
    }
  }
  return h;
}

Status openSealedFields(Hello& h, std::span<const std::uint8_t> helloBytes,
                        const security::Key& psk) {
  const std::string who = "peer " + std::to_string(h.sender);
  if (h.sealed.empty()) {
    return failedPrecondition(
        "authentication failed with " + who +
        ": its hello carries its data address in clear (a key holder seals it; an older build?)");
  }
  const auto plain =
      h.sealedAt <= helloBytes.size()
          ? security::openBox(security::helloKey(psk), helloBytes.first(h.sealedAt), h.sealed)
          : std::nullopt;
  if (!plain) {
    return failedPrecondition("authentication failed with " + who +
                              ": its hello's sealed fields do not open under the key in "
                              "security.key_file");
  }
  Reader r(*plain, 0, h.sender);
  GV_ASSIGN_OR_RETURN(const std::uint32_t addressBytes, r.le<std::uint32_t>("address length"));
  GV_ASSIGN_OR_RETURN(const auto address, r.bytes(addressBytes, "address"));
  GV_ASSIGN_OR_RETURN(const std::uint16_t idBytes, r.le<std::uint16_t>("build id length"));
  GV_ASSIGN_OR_RETURN(const auto id, r.bytes(idBytes, "build id"));
  GV_ASSIGN_OR_RETURN(const std::uint8_t training, r.le<std::uint8_t>("running round flag"));
  std::int64_t runningRound = -1;
  if (training != 0) {
    GV_ASSIGN_OR_RETURN(const std::uint64_t round, r.le<std::uint64_t>("running round"));
    GV_RETURN_IF_ERROR(checkRunningRound(round, h.sender));
    runningRound = static_cast<std::int64_t>(round);
  }
  // The capabilities byte (absent from builds before it: none).
  std::uint8_t capabilities = 0;
  if (r.remaining() > 0) {
    GV_ASSIGN_OR_RETURN(capabilities, r.le<std::uint8_t>("capabilities"));
  }
  h.address.assign(address.begin(), address.end());
  h.buildId = text(id);
  h.runningRound = runningRound;
  h.capabilities = capabilities;
  h.sealed.clear();
  h.sealedAt = 0;
  return Status::ok();
}

security::Cipher negotiatedCipher(const Hello& ours, const Hello& theirs) {
  return (ours.capabilities & theirs.capabilities & kCapabilityAesGcm) != 0
             ? security::Cipher::kAes256Gcm
             : security::Cipher::kChaCha20Poly1305;
}

Status compareHellos(const Hello& ours, const Hello& theirs, bool showValues) {
  const std::string who = "peer " + std::to_string(theirs.sender);
  // Protocol versions first: a peer of another build differs in everything after them.
  std::string versions;
  for (const auto& mine : ours.parts) {
    if (!mine.name.starts_with(kProtocolPartPrefix)) continue;
    std::optional<std::uint64_t> other;
    for (const auto& p : theirs.parts) {
      if (p.name == mine.name) other = p.hash;
    }
    if (other == mine.hash) continue;
    const std::string proto = mine.name.substr(kProtocolPartPrefix.size());
    versions += (versions.empty() ? "" : "; ") + proto + " protocol version mismatch with " + who +
                ": " + (showValues ? "ours " + std::to_string(mine.hash) + ", " : "") + "theirs " +
                (other ? std::to_string(*other) : "unknown (an older build)");
  }
  if (!versions.empty()) {
    const auto build = [](const std::string& id) { return id.empty() ? "unknown" : id; };
    return failedPrecondition(
        versions + " (builds: " + (showValues ? "ours " + build(ours.buildId) + ", " : "") +
        "theirs " + build(theirs.buildId) + ")");
  }
  if (theirs.receiver != ours.sender) {
    return failedPrecondition(who + " expected to reach peer " + std::to_string(theirs.receiver) +
                              " but reached peer " + std::to_string(ours.sender));
  }
  if (ours.nonce.has_value() != theirs.nonce.has_value()) {
    return failedPrecondition(std::string("security mismatch with ") + who + ": " +
                              (ours.nonce ? "security.key_file is set here but not there"
                                          : "it uses security.key_file, this peer does not"));
  }
  if (ours.backend != theirs.backend) {
    return failedPrecondition("transport backend mismatch with " + who + ": ours '" + ours.backend +
                              "', theirs '" + theirs.backend + "'");
  }
  std::map<std::string, std::uint64_t> a, b;
  for (const auto& p : ours.parts) a[p.name] = p.hash;
  for (const auto& p : theirs.parts) b[p.name] = p.hash;
  std::string diffs;
  auto add = [&diffs](const std::string& d) { diffs += (diffs.empty() ? "" : "; ") + d; };
  for (const auto& [name, hash] : a) {
    auto it = b.find(name);
    if (it == b.end()) {
      add("part '" + name + "' missing on " + who);
    } else if (it->second != hash) {
      add("part '" + name + "' differs" +
          (showValues ? " (ours " + hex(hash) + ", theirs " + hex(it->second) + ")" : ""));
    }
  }
  for (const auto& [name, hash] : b) {
    if (!a.count(name)) add("part '" + name + "' only on " + who);
  }
  if (!diffs.empty()) return failedPrecondition("config mismatch with " + who + ": " + diffs);
  return Status::ok();
}

security::Transcript transcriptOf(const Hello& dialer, std::span<const std::uint8_t> dialerBytes,
                                  const Hello& acceptor,
                                  std::span<const std::uint8_t> acceptorBytes) {
  security::Transcript t;
  t.dialer = static_cast<std::uint32_t>(dialer.sender);
  t.acceptor = static_cast<std::uint32_t>(acceptor.sender);
  t.dialerIncarnation = dialer.incarnation;
  t.acceptorIncarnation = acceptor.incarnation;
  if (dialer.nonce) t.dialerNonce = *dialer.nonce;
  if (acceptor.nonce) t.acceptorNonce = *acceptor.nonce;
  std::string parts;
  for (const Hello* h : {&dialer, &acceptor}) {
    for (const ConfigPart& p : h->parts) parts += p.name + "=" + hex(p.hash) + ";";
    parts += "|";
  }
  t.configHash =
      security::digest64({reinterpret_cast<const std::uint8_t*>(parts.data()), parts.size()});
  t.dialerHello = security::digest(dialerBytes);
  t.acceptorHello = security::digest(acceptorBytes);
  return t;
}

std::span<const std::uint8_t> encodeReject(std::string_view reason) {
  return {reinterpret_cast<const std::uint8_t*>(reason.data()), reason.size()};
}

std::string decodeReject(std::span<const std::uint8_t> payload) { return text(payload); }

std::vector<std::uint8_t> encodeUserMessage(std::uint16_t type,
                                            std::span<const std::uint8_t> bytes) {
  std::vector<std::uint8_t> body(2 + bytes.size());
  storeLe16(body.data(), type);
  if (!bytes.empty()) std::memcpy(body.data() + 2, bytes.data(), bytes.size());
  return body;
}

Result<UserMessage> decodeUserMessage(std::span<const std::uint8_t> payload) {
  if (payload.size() < 2) {
    return dataLoss("control message of " + std::to_string(payload.size()) +
                    " bytes is shorter than its 2-byte type");
  }
  return UserMessage{loadLe16(payload.data()), payload.subspan(2)};
}

}  // namespace grapevine::transport::handshake
