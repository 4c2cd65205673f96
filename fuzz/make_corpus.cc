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
#include "runtime/common/byte_order.h"
#include "runtime/engine/envelope.h"
#include "runtime/security/auth.h"
#include "runtime/transport/handshake.h"
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
      compress::Options o;
      o.method = m.value;
      o.lossless = l;
      o.dense_below = 16;
      o.chunk_elements = 1024;
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
      compress::Options o;
      o.ratio = 0.1;
      o.block_size = 64;
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
  std::cout << "corpus written to " << root << "\n";
  return 0;
}
