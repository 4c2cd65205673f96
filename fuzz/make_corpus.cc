// Writes the seed corpora under fuzz/corpus/<target>/ from real encoder output (run by tools/fuzz
// --regen-corpus; the results are checked in). Deterministic: fixed seeds.
#include <filesystem>
#include <fstream>
#include <iostream>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "compress/codec.h"
#include "compress/compressor.h"
#include "compress/lossless.h"
#include "fuzz/fuzz_common.h"
#include "fuzz/fuzz_engine.h"
#include "runtime/common/byte_order.h"
#include "runtime/engine/envelope.h"
#include "runtime/security/auth.h"
#include "runtime/transport/handshake.h"
#include "runtime/transport/tagged/address_blob.h"
#include "runtime/transport/tagged/goodbye.h"
#include "runtime/transport/tcp/framing.h"

using namespace grapevine;
namespace fs = std::filesystem;

namespace {

void write(const fs::path& dir, const std::string& name, const std::vector<uint8_t>& bytes) {
  fs::create_directories(dir);
  std::ofstream(dir / name, std::ios::binary)
      .write(reinterpret_cast<const char*>(bytes.data()),
             static_cast<std::streamsize>(bytes.size()));
}

std::vector<float> gaussian(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, 1.0f);
  std::vector<float> x(n);
  for (auto& v : x) v = d(rng);
  return x;
}

std::vector<uint8_t> withMode(uint8_t mode, std::span<const uint8_t> bytes) {
  std::vector<uint8_t> input = {mode};
  input.insert(input.end(), bytes.begin(), bytes.end());
  return input;
}

// The sender's algorithm (rank fuzz::kSender) of a fuzz_gt / fuzz_push_sum peer's neighbour, with
// the codec variant of `mode`.
std::unique_ptr<algorithms::Algorithm> senderAlgorithm(algorithms::AlgorithmKind kind,
                                                       unsigned variant, int overlap) {
  algorithms::AlgorithmOptions o;
  o.kind = kind;
  o.consensusStep = 0.4;
  o.compressed = variant != 0;
  o.overlapRounds = overlap;
  auto a = algorithms::makeAlgorithm(
      o, fuzz::kEngineModel, {fuzz::kReceiver, 2},
      fuzz::messageCodec(fuzz::codecConfig(kind, variant), fuzz::kSender));
  if (!a.isOk()) std::abort();
  return std::move(a).value();
}

// One round's message of a gt or push-sum sender.
std::vector<uint8_t> algorithmMessage(algorithms::AlgorithmKind kind, unsigned variant, int overlap,
                                      uint64_t round) {
  auto a = senderAlgorithm(kind, variant, overlap);
  const int to[] = {fuzz::kReceiver};
  a->setRecipients(to);
  auto x = gaussian(fuzz::kEngineModel, 11 + variant);
  if (a->tracksDirection()) {
    auto u = gaussian(fuzz::kEngineModel, 21 + variant);
    a->direction(x, u, round);
  }
  std::vector<uint8_t> out(a->maxMessageBytes());
  auto n = a->prepare(x, round, out);
  if (!n.isOk()) std::abort();
  out.resize(*n);
  return out;
}

// fuzz_control_link's test control key (the same bytes as its testKey()).
security::Key controlLinkKey() {
  security::Key k{};
  for (std::size_t i = 0; i < k.size(); ++i) k[i] = static_cast<std::uint8_t>(0x5A ^ (i * 11));
  return k;
}

void append(std::vector<uint8_t>& to, std::span<const uint8_t> bytes) {
  to.insert(to.end(), bytes.begin(), bytes.end());
}

// The compression options the checked-in seeds were made with (compress::Options' defaults before
// they became the config's, issue 37), so regenerating them gives the same files.
compress::Options corpusOptions() {
  compress::Options o;
  o.levels = 7;
  o.rank = 4;
  o.fallback = compress::Method::kNone;
  o.selector = compress::Selector::kExact;
  o.zstdLevel = 1;
  return o;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::cerr << "usage: make_corpus <fuzz/corpus dir>\n";
    return 2;
  }
  const fs::path root = argv[1];
  auto x = gaussian(fuzz::kFuzzModel, 1);
  // Frames: every method, with and without lossless stages and error feedback.
  int fi = 0;
  for (const auto& m : compress::methodNames()) {
    for (auto l :
         {compress::Lossless::kNone, compress::Lossless::kZstd, compress::Lossless::kExponent}) {
      compress::Options o = corpusOptions();
      o.method = m.value;
      o.lossless = l;
      o.denseBelow = 16;
      o.chunkElements = 1024;
      o.ratio = 0.05;
      auto codec = compress::ModelCodec::create(fuzz::fuzzLayout(), o, 1);
      if (!codec.isOk()) return 1;
      auto r = codec->encode(x, {1, 2, 0, 0}, [&](std::span<const uint8_t> f) {
        if (f.size() < 6000)
          write(root / "frame", "f" + std::to_string(fi++), {f.begin(), f.end()});
        return Status::ok();
      });
      if (!r.isOk()) return 1;
    }
  }
  // Payloads: each method's own corpus, a few sizes.
  for (const auto& m : compress::methodNames()) {
    int pi = 0;
    for (size_t n : {1, 64, 100, 600}) {
      compress::Options o = corpusOptions();
      o.ratio = 0.1;
      o.blockSize = 64;
      size_t rows = 1;
      while ((rows + 1) * (rows + 1) <= n) ++rows;
      while (n % rows) --rows;
      if (m.value == compress::Method::kLowRank && (rows < 2 || n / rows < 2)) continue;
      auto c = compress::makeCompressor(m.value, o, rows, n / rows);
      if (!c.isOk()) return 1;
      std::vector<uint64_t> buf((*c)->maxEncodedBytes(n) / 8 + 1);
      std::span<uint8_t> out(reinterpret_cast<uint8_t*>(buf.data()), buf.size() * 8);
      auto xs = gaussian(n, static_cast<uint32_t>(n));
      auto bytes = (*c)->encode(xs, 9, out);
      if (!bytes.isOk()) return 1;
      std::vector<uint8_t> input = {static_cast<uint8_t>(n), static_cast<uint8_t>(n >> 8), 0};
      input.insert(input.end(), out.begin(), out.begin() + static_cast<long>(*bytes));
      write(root / ("payload_" + std::string(m.name)), "p" + std::to_string(pi++), input);
    }
  }
  // Lossless: zstd and exponent-coded outputs with their raw lengths.
  compress::LosslessCoder coder;
  std::span<const uint8_t> raw(reinterpret_cast<const uint8_t*>(x.data()), 2000 * 4);
  std::vector<uint8_t> out(compress::LosslessCoder::maxCompressedBytes(raw.size()));
  for (int stage = 0; stage < 2; ++stage) {
    auto r = coder.compress(stage ? compress::Lossless::kExponent : compress::Lossless::kZstd, 3,
                            raw.first(stage ? raw.size() : 1000),
                            {compress::FloatRegion::Kind::kF32, 0, stage ? 2000u : 250u}, out);
    if (!r.isOk()) return 1;
    const size_t rawLen = stage ? raw.size() : 1000;
    std::vector<uint8_t> input = {static_cast<uint8_t>(stage), static_cast<uint8_t>(rawLen),
                                  static_cast<uint8_t>(rawLen >> 8)};
    input.insert(input.end(), out.begin(), out.begin() + static_cast<long>(*r));
    write(root / "lossless", "l" + std::to_string(stage), input);
  }
  // Hellos (fuzz_handshake: u8 mode | payload): keyless and keyed, as dialer and acceptor; a
  // keyed one with a proof-sized tail.
  namespace hs = transport::handshake;
  int hi = 0;
  for (int mode = 0; mode < 4; ++mode) {
    hs::Hello h;
    h.sender = mode & 2 ? 0 : 3;
    h.receiver = 1;
    h.incarnation = 42 + static_cast<std::uint64_t>(mode);
    h.backend = mode == 3 ? "ucx" : "tcp";
    const std::string a = "127.0.0.1:7001";
    h.address.assign(a.begin(), a.end());
    h.parts = {{"algorithm", 1}, {"model", 2}, {"transport", mode == 2 ? 4u : 3u}};
    if (mode & 1) {
      h.nonce.emplace();
      for (std::size_t i = 0; i < h.nonce->size(); ++i) (*h.nonce)[i] = static_cast<uint8_t>(i * 3);
    }
    // Mode 3 as a key holder sends it: sealed under fuzz_handshake's fixed test key.
    security::Key key{};
    for (std::size_t i = 0; i < key.size(); ++i) key[i] = static_cast<std::uint8_t>(0xA5 ^ i);
    h.buildId = "0.0.0+gfuzz";
    auto bytes = hs::encodeHello(h, mode == 3 ? std::optional(key) : std::nullopt);
    if (!bytes.isOk()) return 1;
    std::vector<uint8_t> input = {static_cast<uint8_t>(mode)};
    input.insert(input.end(), bytes->begin(), bytes->end());
    if (mode == 3) input.insert(input.end(), security::kProofBytes, 0x5a);
    write(root / "handshake", "h" + std::to_string(hi++), input);
  }
  // Envelopes (fuzz_envelope: u8 mode | message): plain, and fix-up mode with each key mode.
  int ei = 0;
  for (int mode : {0, 4, 5, 6, 13}) {
    engine::Envelope e;
    e.sender = 2;
    e.incarnation = 1;
    e.sequence = 5;
    e.round = 9;
    e.liveDegree = 2;
    e.flags = mode == 0 ? engine::kFlagHasHash : 0;
    e.publicHash = 0x1234;
    e.proposedStep = 0.5f;
    const std::vector<uint8_t> payload(40, 0x11);
    e.messageBytes = 32;
    e.snapshotBytes = 8;
    e.payloadCrc = engine::payloadChecksum(payload);
    std::vector<uint8_t> msg(engine::kEnvelopeBytes);
    engine::writeEnvelope(e, msg);
    msg.insert(msg.end(), payload.begin(), payload.end());
    if (mode & 3) msg.insert(msg.end(), security::kSealTagBytes, 0);  // room for the harness's seal
    std::vector<uint8_t> input = {static_cast<uint8_t>(mode)};
    input.insert(input.end(), msg.begin(), msg.end());
    write(root / "envelope", "e" + std::to_string(ei++), input);
  }
  // TCP streams (fuzz_tcp_framing: u8 limit selector | stream): a hello and a few frames.
  for (int s = 0; s < 3; ++s) {
    std::vector<uint8_t> input = {static_cast<uint8_t>(s == 0 ? 6 : 4)};
    uint8_t buf[transport::tcp::kHeaderBytes];
    transport::tcp::encodeHello(buf, 3);
    input.insert(input.end(), buf, buf + transport::tcp::kHelloBytes);
    for (int f = 0; f <= s; ++f) {
      const std::size_t n = f == 2 ? 5000 : static_cast<std::size_t>(8 * (f + 1));
      transport::tcp::encodeFrameHeader(buf, 100 + f, n);
      input.insert(input.end(), buf, buf + transport::tcp::kHeaderBytes);
      input.insert(input.end(), s == 2 && f == 2 ? n / 2 : n, static_cast<uint8_t>(f));
    }
    write(root / "tcp_framing", "t" + std::to_string(s), input);
  }
  // Codec adapter messages (fuzz_message_codec: u8 mode | message): each variant unbounded, and
  // bounded with one message within the 0.5 limit and one far above it; one with a frame left out.
  for (unsigned variant = 0; variant < 4; ++variant) {
    auto codec = fuzz::messageCodec(fuzz::codecConfig(algorithms::AlgorithmKind::kChoco, variant),
                                    fuzz::kSender);
    for (float scale : {0.1f, 10.0f}) {
      auto v = gaussian(fuzz::kEngineModel, 31 + variant);
      for (auto& f : v) f *= scale;
      std::vector<uint8_t> out(codec->maxMessageBytes());
      std::vector<float> self(fuzz::kEngineModel);
      auto n = codec->encode(v, fuzz::kRound, out, self);
      if (!n.isOk()) return 1;
      out.resize(*n);
      const std::string name = "m" + std::to_string(variant);
      if (scale < 1) {
        write(root / "message_codec", name + "p", withMode(static_cast<uint8_t>(variant), out));
        write(root / "message_codec", name + "w", withMode(static_cast<uint8_t>(variant | 4), out));
      } else {
        write(root / "message_codec", name + "b", withMode(static_cast<uint8_t>(variant | 4), out));
      }
      if (variant == 1 && scale < 1) {
        // Without its first frame: the count check (and a fix-up mode seed).
        const uint32_t first = loadLe<uint32_t>(out.data());
        write(root / "message_codec", "m1short",
              withMode(8 | 1, std::span<const uint8_t>(out).subspan(4 + first)));
      }
    }
  }
  // Gradient tracking (fuzz_gt: u8 mode | message): uncompressed and each compressed variant.
  for (unsigned variant = 0; variant < 4; ++variant) {
    const auto m = algorithmMessage(algorithms::AlgorithmKind::kGt, variant, 0, fuzz::kRound);
    write(root / "gt", "g" + std::to_string(variant), withMode(static_cast<uint8_t>(variant), m));
  }
  // Push-sum (fuzz_push_sum: u8 mode | message): each variant, on time; overlapped and late.
  for (unsigned variant = 0; variant < 4; ++variant) {
    const auto m = algorithmMessage(algorithms::AlgorithmKind::kPushSum, variant, 0, fuzz::kRound);
    write(root / "push_sum", "s" + std::to_string(variant),
          withMode(static_cast<uint8_t>(variant), m));
  }
  write(root / "push_sum", "s4",
        withMode(4 | 8,
                 algorithmMessage(algorithms::AlgorithmKind::kPushSum, 0, 2, fuzz::kRound - 1)));
  // Checkpoint rounds (fuzz_checkpoint_knowledge: u8 peers | u8 maxBytes | messages of u8
  // length + bytes): entries of (u32 rank, i64 round) as CheckpointKnowledge::takeUpdates writes
  // them; a round older than one known; a malformed length; a rank out of range, alone and after
  // a good entry.
  {
    auto entry = [](uint32_t rank, int64_t round) {
      std::vector<uint8_t> e(12);
      storeLe(e.data(), rank);
      storeLe(e.data() + 4, static_cast<uint64_t>(round));
      return e;
    };
    auto message = [](std::vector<uint8_t>& in, const std::vector<uint8_t>& m) {
      in.push_back(static_cast<uint8_t>(m.size()));
      append(in, m);
    };
    std::vector<uint8_t> a = {3, 4};  // 4 peers, updates of at most 24 bytes
    std::vector<uint8_t> m1 = entry(0, 50), m2 = entry(2, 100);
    append(m1, entry(1, 50));
    append(m2, entry(3, 50));
    message(a, m1);
    message(a, m2);
    message(a, entry(2, 40));
    write(root / "checkpoint_knowledge", "k0", a);
    std::vector<uint8_t> b = {7, 7};  // 8 peers, one message per update
    message(b, entry(5, -1));
    std::vector<uint8_t> bad = entry(1, 7);
    bad.push_back(0);
    message(b, bad);
    message(b, entry(9, 7));
    std::vector<uint8_t> partly = entry(2, 30);  // good, then out of range: nothing is applied
    append(partly, entry(8, 30));
    message(b, partly);
    write(root / "checkpoint_knowledge", "k1", b);
  }
  // Control link streams (fuzz_control_link: u8 mode | stream): a heartbeat, a checkpoint-rounds
  // user message and a reject; plain, and sealed with the counts 0, 1, 2 under its test key.
  {
    namespace hs = transport::handshake;
    std::vector<uint8_t> rounds(12);
    storeLe(rounds.data(), uint32_t{1});
    storeLe(rounds.data() + 4, uint64_t{50});
    const auto user = hs::encodeUserMessage(1, rounds);
    const std::string why = "config part 'model' differs";
    const std::span<const uint8_t> reject(reinterpret_cast<const uint8_t*>(why.data()), why.size());
    std::vector<uint8_t> plain = {7};
    append(plain, hs::encodeFrame(hs::kHeartbeat, {}));
    append(plain, hs::encodeFrame(hs::kUser, user));
    append(plain, hs::encodeFrame(hs::kReject, reject));
    write(root / "control_link", "c0", plain);
    const auto key = controlLinkKey();
    std::vector<uint8_t> sealed = {7 | 8};
    append(sealed, hs::encodeSealedFrame(key, 3, 0, hs::kHeartbeat, {}));
    append(sealed, hs::encodeSealedFrame(key, 3, 1, hs::kUser, user));
    append(sealed, hs::encodeSealedFrame(key, 3, 2, hs::kReject, reject));
    write(root / "control_link", "c1", sealed);
    sealed[0] = 7 | 8 | 16;  // the same, resealed by the harness
    write(root / "control_link", "c2", sealed);
    std::vector<uint8_t> small = {1};  // a 2-byte limit: the user message is refused
    append(small, hs::encodeFrame(hs::kHeartbeat, {}));
    append(small, hs::encodeFrame(hs::kUser, user));
    write(root / "control_link", "c3", small);
  }
  // Tagged control messages (fuzz_goodbye: messages of u8 length + bytes): a goodbye before any
  // announcement, announcements, a stale goodbye, the one that ends the connection.
  {
    namespace tg = transport::tagged;
    std::vector<uint8_t> in;
    auto add = [&](tg::ControlKind kind, uint64_t id) {
      uint8_t m[tg::kControlBytes];
      tg::encodeControl({kind, id}, m);
      in.push_back(tg::kControlBytes);
      in.insert(in.end(), m, m + tg::kControlBytes);
    };
    add(tg::ControlKind::kGoodbye, 5);
    add(tg::ControlKind::kAnnounce, 5);
    add(tg::ControlKind::kAnnounce, 9);
    add(tg::ControlKind::kGoodbye, 5);
    add(tg::ControlKind::kGoodbye, 9);
    write(root / "goodbye", "b0", in);
  }
  // Address blobs (fuzz_address_blob: u8 format | rank << 1, then the blob), as the ucx and
  // libfabric backends encode them (their magic and version, as fuzz_address_blob has them).
  {
    namespace tg = transport::tagged;
    const tg::AddressFormat ucx{0x58555647, 2, "ucx", "UCX"};
    const tg::AddressFormat ofi{0x464f5647, 1, "libfabric", "libfabric"};
    const std::vector<uint8_t> worker(40, 0xAB);
    write(root / "address_blob", "a0", withMode(3 << 1, tg::encodeAddress(ucx, 3, worker)));
    write(root / "address_blob", "a1", withMode(1 | (5 << 1), tg::encodeAddress(ofi, 5, worker)));
    write(root / "address_blob", "a2", withMode(4 << 1, tg::encodeAddress(ucx, 3, worker)));
  }
  // The C API (fuzz_c_api: u8 rank | config text [NUL overrides] [NUL tensors]): the API's
  // two-peer example with overrides and tensors (one name twice, one count 0), a compressed
  // choco one, and configs the API refuses (a built-in workload; a rank out of range).
  {
    const std::string ring2 =
        "run:         { name: fuzz, seed: 1, rounds: 40 }\n"
        "peers:       { count: 2, host: 127.0.0.1, base_port: 29600 }\n"
        "topology:    { kind: edges, edges: [[0, 1, 0.25]], weights: explicit }\n"
        "transport:   { backend: tcp }\n"
        "algorithm:   { name: dsgd }\n"
        "compression: { method: none }\n"
        "optimizer:   { lr: 0.1, momentum: 0.0, schedule: constant }\n"
        "workload:    { name: external }\n"
        "output:      { dir: runs/fuzz, log_every: 10 }\n";
    auto text = [](uint8_t rank, const std::string& t) {
      std::vector<uint8_t> in = {rank};
      in.insert(in.end(), t.begin(), t.end());
      return in;
    };
    write(root / "c_api", "api0",
          text(1, ring2 + std::string(1, '\0') + "optimizer.lr=0.05\nrun.rounds=3" +
                      std::string(1, '\0') + "w 48\nb 6\nw 3\nempty 0"));
    write(root / "c_api", "api1",
          text(2,
               "peers: { count: 4 }\ntopology: { kind: ring }\nalgorithm: { name: choco }\n"
               "compression: { method: top-k, ratio: 0.1 }\nworkload: { name: external }\n"));
    write(root / "c_api", "api2", text(0, "peers: { count: 2 }\n"));
    write(root / "c_api", "api3", text(5, ring2));
  }
  std::cout << "corpus written to " << root << "\n";
  return 0;
}
