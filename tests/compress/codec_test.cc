// The wire codec: frames round-trip through ModelCodec; every kind of corruption is rejected with
// the right typed error and leaves the accumulator untouched.
#include "compress/codec.h"

#include <catch2/catch.hpp>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "compress/bytes.h"
#include "compress/wire.h"
#include "tests/compress/test_util.h"

using namespace grapevine;
using namespace grapevine::compress;
using namespace grapevine::compress::testing;

namespace {

std::vector<TensorLayout> smallModel() {
  // A matrix, a bias (small: goes dense), a large vector that needs several chunks.
  return {{"w1", {64, 48}, 0, 64 * 48},
          {"b1", {48}, 64 * 48, 48},
          {"w2", {10000}, 64 * 48 + 48, 10000}};
}
size_t modelSize() { return 64 * 48 + 48 + 10000; }

using Frame = std::vector<uint8_t>;

std::vector<Frame> encodeAll(ModelCodec& codec, const std::vector<float>& x, EncodeContext ctx,
                             EncodeSummary* summary = nullptr) {
  std::vector<Frame> frames;
  auto r = codec.encode(x, ctx, [&](std::span<const uint8_t> f) {
    frames.emplace_back(f.begin(), f.end());
    return Status::ok();
  });
  INFO(r.status().toString());
  REQUIRE(r.isOk());
  if (summary) *summary = *r;
  return frames;
}

ModelCodec makeCodec(const Options& o, uint32_t sender = 3, std::vector<TensorOverride> ov = {}) {
  auto c = ModelCodec::create(smallModel(), o, sender, std::move(ov));
  INFO(c.status().toString());
  REQUIRE(c.isOk());
  return std::move(c).value();
}

// Recomputes the CRC after a deliberate edit, so the check under test is the one after the CRC.
void reseal(Frame& f) {
  const uint32_t crc = kernels::cpuOps().crc32c(kernels::cpuOps().crc32c(0, f.data(), kCrcOffset),
                                                f.data() + kHeaderBytes, f.size() - kHeaderBytes);
  storeLe<uint32_t>(f.data() + kCrcOffset, crc);
}

// Decodes a frame that must fail; checks code, reason and that acc did not change. Frames live in
// std::vector (heap, 16-byte aligned) so payloads are aligned like a transport buffer.
void expectReject(ModelCodec& codec, const Frame& f, ErrorCode code, std::string_view reason,
                  const DecodeLimits& limits = {}) {
  std::vector<float> acc(codec.elementCount(), 1.0f);
  auto r = codec.decodeAccumulate(f, 1.0f, acc, limits);
  REQUIRE_FALSE(r.isOk());
  INFO(r.status().toString());
  CHECK(r.status().code() == code);
  if (!reason.empty()) CHECK(errorReason(r.status()) == reason);
  for (float v : acc) REQUIRE(v == 1.0f);
  // checkFrame (check all frames of a message, then apply) rejects it with the same error.
  auto c = codec.checkFrame(f, acc, limits);
  REQUIRE_FALSE(c.isOk());
  CHECK(c.status().toString() == r.status().toString());
  for (float v : acc) REQUIRE(v == 1.0f);
}

}  // namespace

TEST_CASE("frame key derivation separates every coordinate", "[codec]") {
  const uint64_t k = frameKey(1, 2, 3, 4, 5);
  CHECK(k != frameKey(2, 2, 3, 4, 5));
  CHECK(k != frameKey(1, 3, 3, 4, 5));
  CHECK(k != frameKey(1, 2, 4, 4, 5));
  CHECK(k != frameKey(1, 2, 3, 5, 5));
  CHECK(k != frameKey(1, 2, 3, 4, 6));
  CHECK(k == frameKey(1, 2, 3, 4, 5));
}

TEST_CASE("layout and options are validated", "[codec]") {
  Options o;
  CHECK_FALSE(ModelCodec::create({{"a", {2, 3}, 0, 5}}, o, 0).isOk());  // count != product
  CHECK_FALSE(ModelCodec::create({{"a", {4}, 0, 4}, {"b", {4}, 2, 4}}, o, 0).isOk());  // overlap
  CHECK_FALSE(ModelCodec::create(smallModel(), o, 0, {{"nope", o}}).isOk());
  o.chunkElements = 1 << 20;
  o.maxFrameBytes = 8192;
  auto r = ModelCodec::create(smallModel(), o, 0);
  REQUIRE_FALSE(r.isOk());
  CHECK(r.status().message().find("max_frame_bytes") != std::string::npos);
}

TEST_CASE("codec round trip: chunks, per-tensor methods, sequence numbers", "[codec]") {
  Options o;
  o.method = Method::kInt8;
  o.chunkElements = 4096;
  o.denseBelow = 100;
  Options topk = o;
  topk.method = Method::kTopK;
  topk.ratio = 0.1;
  topk.selector = Selector::kExact;  // exactly k per chunk: the count checked below
  auto codec = makeCodec(o, 3, {{"w2", topk}});
  CHECK(codec.methodOf(0) == Method::kInt8);
  CHECK(codec.methodOf(1) == Method::kNone);  // 48 < dense_below
  CHECK(codec.methodOf(2) == Method::kTopK);
  CHECK(codec.chunkCount() == 1 + 1 + 3);  // w2: 10000 / 4096 -> 3 chunks
  auto x = gaussian(modelSize(), 1);
  EncodeSummary sum;
  auto frames = encodeAll(codec, x, {7, 99, 2, 1000}, &sum);
  REQUIRE(frames.size() == 5);
  CHECK(sum.nextSequence == 1005);
  size_t wire = 0;
  for (size_t i = 0; i < frames.size(); ++i) {
    auto h = parseFrame(frames[i]);
    REQUIRE(h.isOk());
    CHECK(h->sequence == 1000 + i);
    CHECK(h->round == 7);
    CHECK(h->edgeEpoch == 2);
    CHECK(h->sender == 3);
    CHECK(frames[i].size() <= codec.maxFrameBytes());
    wire += frames[i].size();
  }
  CHECK(wire == sum.wireBytes);
  auto h4 = parseFrame(frames[4]);
  CHECK(h4->chunkIndex == 2);
  CHECK(h4->chunkCount == 3);
  CHECK(h4->elementOffset == 8192);
  CHECK(h4->elementCount == 10000 - 8192);
  CHECK((h4->flags & kFlagLastChunk) != 0);

  // Receiver (a different codec, another peer) and sender decode bit-identically.
  auto receiver = makeCodec(Options{}, 9);
  std::vector<float> accSender(modelSize(), 0.0f), accReceiver(modelSize(), 0.0f);
  for (const auto& f : frames) {
    REQUIRE(codec.decodeAccumulate(f, 1.0f, accSender).isOk());
    auto info = receiver.decodeAccumulate(f, 1.0f, accReceiver);
    REQUIRE(info.isOk());
  }
  CHECK(std::memcmp(accSender.data(), accReceiver.data(), accSender.size() * 4) == 0);
  // The dense bias is exact, int8 within a step, top-k keeps 10% of w2 exactly.
  for (size_t i = 64 * 48; i < 64 * 48 + 48; ++i) REQUIRE(accSender[i] == x[i]);
  size_t kept = 0;
  for (size_t i = 64 * 48 + 48; i < modelSize(); ++i) {
    if (accSender[i] != 0.0f) {
      ++kept;
      REQUIRE(accSender[i] == x[i]);
    }
  }
  CHECK(kept == 410 + 410 + 181);  // round(0.1 * 4096) twice + round(0.1 * 1808)
}

TEST_CASE("every method and lossless stage through the codec", "[codec]") {
  auto x = gaussian(modelSize(), 2);
  for (const auto& m : methodNames()) {
    for (Lossless l : {Lossless::kNone, Lossless::kZstd, Lossless::kExponent}) {
      Options o;
      o.method = m.value;
      o.lossless = l;
      o.chunkElements = 3000;
      o.errorFeedback = m.value == Method::kSign;
      o.levels = 7;  // qsgd: the omega the bound below is set for
      auto codec = makeCodec(o);
      EncodeSummary sum;
      auto frames = encodeAll(codec, x, {1, 5, 0, 0}, &sum);
      std::vector<float> a(modelSize(), 0.0f), b(modelSize(), 0.0f);
      auto receiver = makeCodec(Options{}, 1);
      for (const auto& f : frames) {
        auto r = receiver.decodeAccumulate(f, 1.0f, a);
        INFO(m.name << " " << losslessName(l) << ": " << r.status().toString());
        REQUIRE(r.isOk());
      }
      if (l != Lossless::kNone) {
        // Same method without the stage decodes to the same bits.
        Options o2 = o;
        o2.lossless = Lossless::kNone;
        auto plain = makeCodec(o2);
        for (const auto& f : encodeAll(plain, x, {1, 5, 0, 0}))
          REQUIRE(receiver.decodeAccumulate(f, 1.0f, b).isOk());
        CHECK(std::memcmp(a.data(), b.data(), a.size() * 4) == 0);
      }
      if (m.value == Method::kNone && l == Lossless::kExponent) {
        CHECK(sum.wireBytes < sum.rawBytes);  // Gaussian fp32 exponents compress
        bool flagged = false;
        for (const auto& f : frames) flagged |= (parseFrame(f)->flags & kFlagExponent) != 0;
        CHECK(flagged);
      }
      // Biased methods contract; qsgd is unbiased with variance omega ||x||^2 (omega ~ 7.8 here).
      const double rel = std::sqrt(sqDiff(a, x) / sq(x));
      INFO(m.name << " rel error " << rel);
      CHECK(rel < (m.value == Method::kQsgd ? 3.0 : 1.0 + 1e-6));
    }
  }
}

TEST_CASE("no per-round allocation growth: frames reuse one buffer", "[codec]") {
  Options o;
  o.method = Method::kTopK;
  auto codec = makeCodec(o);
  auto x = gaussian(modelSize(), 3);
  const uint8_t* first = nullptr;
  for (int round = 0; round < 3; ++round) {
    auto r =
        codec.encode(x, {static_cast<uint64_t>(round), 1, 0, 0}, [&](std::span<const uint8_t> f) {
          if (!first) first = f.data();
          CHECK((f.data() == first || f.size() > 0));
          return Status::ok();
        });
    REQUIRE(r.isOk());
  }
  // A sink error stops encoding and is returned.
  int calls = 0;
  auto r = codec.encode(x, {}, [&](std::span<const uint8_t>) {
    ++calls;
    return unavailable("link down");
  });
  CHECK(calls == 1);
  CHECK(r.status().code() == ErrorCode::kUnavailable);
}

TEST_CASE("every flipped byte is rejected with the right error", "[codec][corrupt]") {
  Options o;
  o.method = Method::kInt8;
  o.chunkElements = 2048;
  auto codec = makeCodec(o);
  auto frames = encodeAll(codec, gaussian(modelSize(), 4), {});
  const Frame& f = frames[0];
  std::map<std::string, int> reasons;
  for (size_t i = 0; i < f.size(); ++i) {
    for (uint8_t mask : {uint8_t{0x01}, uint8_t{0x80}}) {
      Frame g = f;
      g[i] ^= mask;
      std::vector<float> acc(codec.elementCount(), 1.0f);
      auto r = codec.decodeAccumulate(g, 1.0f, acc);
      REQUIRE_FALSE(r.isOk());
      for (float v : acc) REQUIRE(v == 1.0f);
      const auto code = r.status().code();
      const std::string reason(errorReason(r.status()));
      ++reasons[reason];
      INFO("byte " << i << ": " << r.status().toString());
      if (i < 4) {
        CHECK(reason == "bad_magic");
        CHECK(code == ErrorCode::kDataLoss);
      } else if (i < 6) {
        CHECK(reason == "version");
        CHECK(code == ErrorCode::kFailedPrecondition);
      } else if (i >= 56 && i < 60) {  // payload length: the frame no longer matches it
        CHECK((reason == "truncated" || reason == "trailing"));
        CHECK(code == ErrorCode::kDataLoss);
      } else {
        CHECK(reason == "crc");
        CHECK(code == ErrorCode::kDataLoss);
      }
    }
  }
  CHECK(reasons["crc"] > 0);
}

TEST_CASE("truncated, extended and oversized frames", "[codec][corrupt]") {
  Options o;
  o.method = Method::kTopK;
  auto codec = makeCodec(o);
  auto frames = encodeAll(codec, gaussian(modelSize(), 5), {});
  const Frame& f = frames.back();
  for (size_t len = 0; len < f.size(); len += (len < 100 ? 1 : 37)) {
    Frame g(f.begin(), f.begin() + static_cast<long>(len));
    expectReject(codec, g, ErrorCode::kDataLoss, "truncated");
  }
  Frame longer = f;
  longer.push_back(0);
  expectReject(codec, longer, ErrorCode::kDataLoss, "trailing");
  DecodeLimits tight;
  tight.maxFrameBytes = f.size() - 1;
  expectReject(codec, f, ErrorCode::kResourceExhausted, "too_large", tight);
  // A header claiming a huge payload with a valid CRC: rejected before any allocation.
  Frame huge = f;
  storeLe<uint32_t>(huge.data() + 60, 0xFFFFFFF0u);  // raw length
  huge[7] |= kFlagZstd;
  reseal(huge);
  expectReject(codec, huge, ErrorCode::kResourceExhausted, "too_large");
  Frame many = f;
  storeLe<uint32_t>(many.data() + 44, 0x7FFFFFFFu);  // element count
  reseal(many);
  expectReject(codec, many, ErrorCode::kResourceExhausted, "too_large");
  Frame version = f;
  storeLe<uint16_t>(version.data() + 4, 2);
  reseal(version);
  expectReject(codec, version, ErrorCode::kFailedPrecondition, "version");
}

TEST_CASE("header fields inconsistent with the layout are rejected", "[codec][corrupt]") {
  Options o;
  o.method = Method::kInt8;
  auto codec = makeCodec(o);
  auto frames = encodeAll(codec, gaussian(modelSize(), 6), {});
  auto edit = [&](size_t frame, auto fn) {
    Frame g = frames[frame];
    fn(g);
    reseal(g);
    return g;
  };
  expectReject(codec, edit(0, [](Frame& g) { storeLe<uint32_t>(g.data() + 32, 3); }),
               ErrorCode::kDataLoss, "tensor_id");
  expectReject(codec, edit(0, [](Frame& g) { storeLe<uint64_t>(g.data() + 48, 1); }),
               ErrorCode::kDataLoss, "range");
  expectReject(codec, edit(0, [](Frame& g) { g[6] = 200; }), ErrorCode::kDataLoss, "method");
  expectReject(codec, edit(0, [](Frame& g) { g[7] |= 0x40; }), ErrorCode::kDataLoss, "flags");
  expectReject(codec, edit(0, [](Frame& g) { g[64] = 1; }), ErrorCode::kDataLoss, "flags");
  expectReject(codec, edit(0, [](Frame& g) { storeLe<uint32_t>(g.data() + 36, 5); }),
               ErrorCode::kDataLoss, "range");
  // Method id changed to one whose payload layout does not fit.
  expectReject(codec, edit(0, [](Frame& g) { g[6] = static_cast<uint8_t>(Method::kSign); }),
               ErrorCode::kDataLoss, "params");
  expectReject(codec, edit(0, [](Frame& g) { g[6] = static_cast<uint8_t>(Method::kNone); }),
               ErrorCode::kDataLoss, "payload_size");
}

TEST_CASE("method-level invariants are checked behind a valid CRC", "[codec][corrupt]") {
  auto x = gaussian(modelSize(), 7);
  auto frameOf = [&](Method m, double ratio = 0.01, size_t tensor = 2) {
    Options o;
    o.method = m;
    o.ratio = ratio;
    o.denseBelow = 0;
    o.levels = 7;  // qsgd: 4-bit fields, which s = 100 below contradicts
    auto codec = makeCodec(o);
    auto frames = encodeAll(codec, x, {});
    for (auto& f : frames) {
      if (parseFrame(f)->tensorId == tensor)
        return std::pair<ModelCodec, Frame>(std::move(codec), f);
    }
    FAIL("no frame");
    return std::pair<ModelCodec, Frame>(std::move(codec), frames[0]);
  };
  const size_t p = kHeaderBytes;
  {  // int8: a non-finite scale, a bad block size, a bad bit width
    auto [codec, f] = frameOf(Method::kInt8);
    Frame g = f;
    storeLe<float>(g.data() + p + 4, std::numeric_limits<float>::infinity());
    reseal(g);
    expectReject(codec, g, ErrorCode::kDataLoss, "non_finite");
    g = f;
    storeLe<uint16_t>(g.data() + p, 100);
    reseal(g);
    expectReject(codec, g, ErrorCode::kDataLoss, "params");
    g = f;
    g[p + 2] = 4;
    reseal(g);
    expectReject(codec, g, ErrorCode::kDataLoss, "params");
    g = f;
    storeLe<float>(g.data() + p + 4, -1.0f);
    reseal(g);
    expectReject(codec, g, ErrorCode::kDataLoss, "params");
  }
  {  // top-k (varint): count above n, an index past n, a NaN value, a malformed varint
    auto [codec, f] = frameOf(Method::kTopK);
    REQUIRE(f[p] == 0);
    const uint32_t count = loadLe<uint32_t>(f.data() + p + 4);
    const uint32_t ib = loadLe<uint32_t>(f.data() + p + 8);
    Frame g = f;
    storeLe<uint32_t>(g.data() + p + 4, 20000);
    reseal(g);
    expectReject(codec, g, ErrorCode::kDataLoss, "count");
    g = f;
    // Make the last gap huge: rewrite the last varint byte(s) is fiddly; instead set the first gap
    // to 5 bytes of 0xFF... (malformed) and, separately, the first gap to a value >= n.
    g[p + 12] = 0xFF;
    g[p + 13] = 0xFF;
    g[p + 14] = 0xFF;
    g[p + 15] = 0xFF;
    g[p + 16] = 0x7F;  // > 2^32
    reseal(g);
    expectReject(codec, g, ErrorCode::kDataLoss, "");
    g = f;
    // first gap := 20000 (3 bytes) replacing 3 single-byte gaps keeps the length.
    if (g[p + 12] < 0x80 && g[p + 13] < 0x80 && g[p + 14] < 0x80) {
      g[p + 12] = 0x80 | (20000 & 0x7F);
      g[p + 13] = 0x80 | ((20000 >> 7) & 0x7F);
      g[p + 14] = (20000 >> 14) & 0x7F;
      // count stays: two fewer indices decoded before the end -> also the remaining count differs;
      // whichever check fires first, the frame must be rejected as data loss.
      reseal(g);
      expectReject(codec, g, ErrorCode::kDataLoss, "");
    }
    g = f;
    const size_t valuesAt = p + 12 + detail::alignUp4(ib);
    storeLe<float>(g.data() + valuesAt + 4 * (count - 1), std::nanf(""));
    reseal(g);
    expectReject(codec, g, ErrorCode::kDataLoss, "non_finite");
  }
  {  // top-k (bitmap, 50%): a bit past n / population != count
    auto [codec, f] = frameOf(Method::kTopK, 0.5, 1);  // the bias: 48 elements
    REQUIRE(f[p] == 1);
    Frame g = f;
    g[p + 12] ^= 0x01;
    reseal(g);
    expectReject(codec, g, ErrorCode::kDataLoss, "count");
  }
  {  // rand-k: k > n, NaN value
    auto [codec, f] = frameOf(Method::kRandK);
    Frame g = f;
    storeLe<uint32_t>(g.data() + p + 4, 1u << 30);
    reseal(g);
    expectReject(codec, g, ErrorCode::kDataLoss, "count");
    g = f;
    storeLe<float>(g.data() + p + 16, std::numeric_limits<float>::infinity());
    reseal(g);
    expectReject(codec, g, ErrorCode::kDataLoss, "non_finite");
  }
  {  // qsgd: s/bits mismatch, NaN norm, a level above s
    auto [codec, f] = frameOf(Method::kQsgd);
    Frame g = f;
    storeLe<uint32_t>(g.data() + p, 100);
    reseal(g);
    expectReject(codec, g, ErrorCode::kDataLoss, "params");
    g = f;
    storeLe<float>(g.data() + p + 8, std::nanf(""));
    reseal(g);
    expectReject(codec, g, ErrorCode::kDataLoss, "non_finite");
  }
  {  // sign: scale NaN
    auto [codec, f] = frameOf(Method::kSign);
    Frame g = f;
    storeLe<float>(g.data() + p + 4, std::nanf(""));
    reseal(g);
    expectReject(codec, g, ErrorCode::kDataLoss, "non_finite");
  }
  {  // none: a NaN value
    auto [codec, f] = frameOf(Method::kNone);
    Frame g = f;
    storeLe<float>(g.data() + p + 40, std::nanf(""));
    reseal(g);
    expectReject(codec, g, ErrorCode::kDataLoss, "non_finite");
  }
  {  // low-rank: wrong shape, rank 0
    Options o;
    o.method = Method::kLowRank;
    auto codec = makeCodec(o);
    auto frames = encodeAll(codec, x, {});
    Frame f = frames[0];
    REQUIRE(parseFrame(f)->method == Method::kLowRank);
    Frame g = f;
    storeLe<uint32_t>(g.data() + p, 65);
    reseal(g);
    expectReject(codec, g, ErrorCode::kDataLoss, "params");
    g = f;
    storeLe<uint32_t>(g.data() + p + 8, 0);
    reseal(g);
    expectReject(codec, g, ErrorCode::kDataLoss, "params");
  }
}

TEST_CASE("misaligned frames decode the same (copied to aligned scratch)", "[codec]") {
  Options o;
  o.method = Method::kInt4;
  auto codec = makeCodec(o);
  auto x = gaussian(modelSize(), 8);
  auto frames = encodeAll(codec, x, {});
  std::vector<float> a(modelSize(), 0.0f), b(modelSize(), 0.0f);
  std::vector<uint8_t> shifted;
  for (const auto& f : frames) {
    REQUIRE(codec.decodeAccumulate(f, 0.5f, a).isOk());
    shifted.assign(f.size() + 1, 0);
    std::memcpy(shifted.data() + 1, f.data(), f.size());
    REQUIRE(codec.decodeAccumulate({shifted.data() + 1, f.size()}, 0.5f, b).isOk());
  }
  CHECK(std::memcmp(a.data(), b.data(), a.size() * 4) == 0);
}

TEST_CASE("same seed and round reproduce the same frames; another round differs", "[codec]") {
  Options o;
  o.method = Method::kRandK;
  auto x = gaussian(modelSize(), 9);
  auto c1 = makeCodec(o), c2 = makeCodec(o);
  auto f1 = encodeAll(c1, x, {4, 77, 0, 0}), f2 = encodeAll(c2, x, {4, 77, 0, 0});
  CHECK(f1 == f2);
  auto f3 = encodeAll(c1, x, {5, 77, 0, 0});
  CHECK(f1[0] != f3[0]);
}

TEST_CASE("checkFrame agrees with decodeAccumulate on every method and never touches acc",
          "[codec][corrupt]") {
  const auto x = gaussian(modelSize(), 11);
  const Method methods[] = {Method::kNone, Method::kFp16,   Method::kBf16, Method::kInt8,
                            Method::kInt4, Method::kSign,   Method::kTopK, Method::kRandK,
                            Method::kQsgd, Method::kLowRank};
  std::uint64_t rng = 12345;
  auto next = [&] {
    rng = rng * 6364136223846793005ull + 1442695040888963407ull;
    return static_cast<size_t>(rng >> 33);
  };
  size_t rejected = 0, accepted = 0;
  for (Method m : methods) {
    Options o;
    o.method = m;
    o.ratio = 0.05;
    o.denseBelow = 0;
    auto codec = makeCodec(o);
    for (const Frame& f : encodeAll(codec, x, {})) {
      std::vector<float> acc(codec.elementCount(), 0.5f);
      auto good = codec.checkFrame(f, acc, {});
      INFO(good.status().toString());
      REQUIRE(good.isOk());
      for (float v : acc) REQUIRE(v == 0.5f);
      // Payload bytes changed behind a valid CRC: whatever decodeAccumulate says, checkFrame says.
      for (int trial = 0; trial < 40 && f.size() > kHeaderBytes; ++trial) {
        Frame g = f;
        const size_t at = kHeaderBytes + next() % (g.size() - kHeaderBytes);
        g[at] = static_cast<uint8_t>(g[at] ^ (1u + next() % 255));
        reseal(g);
        std::vector<float> a(codec.elementCount(), 0.5f);
        auto check = codec.checkFrame(g, a, {});
        for (float v : a) REQUIRE(v == 0.5f);
        auto dec = codec.decodeAccumulate(g, 1.0f, a, {});
        INFO(methodName(m) << " byte " << at);
        CHECK(check.isOk() == dec.isOk());
        if (!dec.isOk()) {
          CHECK(check.status().toString() == dec.status().toString());
          ++rejected;
        } else {
          ++accepted;
        }
      }
    }
  }
  CHECK(rejected > 50);  // the mutations exercise the error paths, not only benign value changes
  CHECK(accepted > 50);
}

TEST_CASE("receive once: checkFrame then applyChecked adds the bits decodeAccumulate adds",
          "[codec]") {
  // Every method, plain and contractive, with and without a lossless stage, a whole message's
  // frames checked first (each in its own slot) and applied after: the same float bits as
  // decoding frame by frame, and a lossless frame is decompressed once (its slot keeps it).
  const auto x = gaussian(modelSize(), 21);
  const Method methods[] = {Method::kNone, Method::kFp16,   Method::kBf16, Method::kInt8,
                            Method::kInt4, Method::kSign,   Method::kTopK, Method::kRandK,
                            Method::kQsgd, Method::kLowRank};
  for (Lossless lossless : {Lossless::kNone, Lossless::kZstd}) {
    for (bool contractive : {false, true}) {
      for (Method m : methods) {
        Options o;
        o.method = m;
        o.ratio = 0.05;
        o.denseBelow = 0;
        o.chunkElements = 4096;  // several frames per tensor
        o.lossless = lossless;
        o.contractive = contractive;
        auto codec = makeCodec(o);
        const auto frames = encodeAll(codec, x, {});
        REQUIRE(frames.size() > 2);
        std::vector<float> a(codec.elementCount(), 0.25f), b = a;
        for (const Frame& f : frames) REQUIRE(codec.decodeAccumulate(f, 0.3f, a).isOk());
        std::vector<CheckedFrame> checked;
        for (size_t i = 0; i < frames.size(); ++i) {
          auto c = codec.checkFrame(frames[i], b, {}, i);
          REQUIRE(c.isOk());
          checked.push_back(*c);
        }
        for (const auto& c : checked) REQUIRE(codec.applyChecked(c, 0.3f, b).isOk());
        INFO(methodName(m) << " lossless " << static_cast<int>(lossless) << " contractive "
                           << contractive);
        CHECK(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
      }
    }
  }
}

TEST_CASE("DecodeLimits::integrity_verified skips only the frame CRC", "[codec][corrupt]") {
  Options o;
  o.method = Method::kInt8;
  auto codec = makeCodec(o);
  const auto x = gaussian(modelSize(), 22);
  Frame f = encodeAll(codec, x, {})[0];
  f[kCrcOffset] ^= 0x01;  // a wrong CRC over intact bytes
  std::vector<float> acc(codec.elementCount(), 0.0f);
  DecodeLimits verified;
  verified.integrityVerified = true;
  CHECK_FALSE(codec.checkFrame(f, acc, {}).isOk());
  CHECK(codec.checkFrame(f, acc, verified).isOk());
  // Every other check still runs: a bad magic is refused either way.
  Frame g = f;
  g[0] ^= 0xff;
  auto bad = codec.checkFrame(g, acc, verified);
  REQUIRE_FALSE(bad.isOk());
  CHECK(bad.status().toString().find("bad_magic") != std::string::npos);
}

TEST_CASE("omega of the unbiased methods for the real chunk sizes", "[codec][contractive]") {
  // QSGD on a bucket of b entries with s levels: omega = min(b / s^2, sqrt(b) / s).
  Options q;
  q.levels = 16;
  auto qsgd = makeCompressor(Method::kQsgd, q, 0, 0);
  REQUIRE(qsgd.isOk());
  CHECK((*qsgd)->properties(100352).omega == Approx(std::sqrt(100352.0) / 16));  // 784 x 128
  CHECK((*qsgd)->properties(1280).omega == Approx(std::sqrt(1280.0) / 16));      // 128 x 10
  CHECK((*qsgd)->properties(100).omega == Approx(100.0 / 256));                  // b < s^2
  CHECK((*qsgd)->properties(256).omega == Approx(1.0));                          // both equal
  // rand-k scaled by the stratum size (n/k when k divides n): omega = ceil(n/k) - 1.
  Options r;
  r.ratio = 0.05;
  r.unbiased = true;
  auto randk = makeCompressor(Method::kRandK, r, 0, 0);
  REQUIRE(randk.isOk());
  CHECK((*randk)->properties(1000).omega == Approx(19.0));  // k = 50
  CHECK((*randk)->properties(1001).omega == Approx(20.0));  // k = 50, strata of 20 and 21
  CHECK((*randk)->properties(100352).omega == Approx(19.0));
  // Stochastic int4, blocks of 256: omega = B / (4 L^2) with L = 7.
  Options i4;
  i4.rounding = Rounding::kStochastic;
  auto int4 = makeCompressor(Method::kInt4, i4, 0, 0);
  REQUIRE(int4.isOk());
  CHECK((*int4)->properties(100352).omega == Approx(256.0 / 196));
}

TEST_CASE("a contractive codec decodes unbiased methods as C / (1 + omega) of each chunk",
          "[codec][contractive]") {
  // w2 (10000 elements) in chunks of 4096, 4096 and 1808: each chunk has its own omega.
  auto x = gaussian(modelSize(), 17);
  struct Case {
    const char* name;
    Method method;
    bool unbiased;
  };
  for (const Case& cs : {Case{"qsgd", Method::kQsgd, false}, Case{"rand-k", Method::kRandK, true},
                         Case{"top-k", Method::kTopK, false}}) {
    INFO(cs.name);
    Options o;
    o.method = cs.method;
    o.levels = 16;
    o.ratio = 0.1;
    o.unbiased = cs.unbiased;
    o.chunkElements = 4096;
    Options oc = o;
    oc.contractive = true;
    ModelCodec plain = makeCodec(o), scaled = makeCodec(oc), receiver = makeCodec(oc, 5);
    EncodeContext ctx;
    ctx.seed = 9;
    ctx.round = 4;
    const auto frames = encodeAll(plain, x, ctx);
    // The wire does not change: the contractive sender makes the same bytes.
    CHECK(encodeAll(scaled, x, ctx) == frames);
    std::vector<float> a(modelSize(), 0.0f), b(modelSize(), 0.0f), c(modelSize(), 0.0f);
    for (const auto& f : frames) {
      REQUIRE(plain.decodeAccumulate(f, 1.0f, a).isOk());
      REQUIRE(scaled.decodeAccumulate(f, 1.0f, b).isOk());
      REQUIRE(receiver.decodeAccumulate(f, 1.0f, c).isOk());  // another peer: the same bits
    }
    CHECK(b == c);
    const auto layout = smallModel();
    for (const auto& f : frames) {
      const FrameHeader h = *parseFrame(f, {}, kernels::cpuOps());
      const TensorLayout& t = layout[h.tensorId];
      const size_t n = h.elementCount, at = t.offset + h.elementOffset;
      double omega = 0.0;
      if (h.method == Method::kQsgd) {
        omega = std::min(n / 256.0, std::sqrt(double(n)) / 16);
      } else if (h.method == Method::kRandK) {
        const size_t k = static_cast<size_t>(std::llround(0.1 * n));
        omega = double((n + k - 1) / k) - 1.0;
      }
      const float scale = static_cast<float>(1.0 / (1.0 + omega));
      INFO("tensor " << t.name << " chunk " << h.chunkIndex << " n " << n << " omega " << omega);
      for (size_t i = at; i < at + n; ++i) REQUIRE(b[i] == scale * a[i]);
    }
  }
}

TEST_CASE("qsgd / (1 + omega) is a contraction where plain qsgd is not", "[codec][contractive]") {
  // E||x - C(x)||^2 <= (1 - delta) ||x||^2 with delta = 1/(1 + omega): what CHOCO's public copies
  // need. Unscaled qsgd (omega ~ 4 here) multiplies the error instead.
  const std::vector<TensorLayout> layout = {{"w", {4096}, 0, 4096}};
  Options o;
  o.method = Method::kQsgd;
  o.levels = 16;
  Options oc = o;
  oc.contractive = true;
  auto plain = ModelCodec::create(layout, o, 0);
  auto scaled = ModelCodec::create(layout, oc, 0);
  REQUIRE(plain.isOk());
  REQUIRE(scaled.isOk());
  const auto x = gaussian(4096, 3);
  const double omega = std::sqrt(4096.0) / 16, delta = 1.0 / (1.0 + omega);
  double errPlain = 0, errScaled = 0;
  const int draws = 64;
  for (int d = 0; d < draws; ++d) {
    EncodeContext ctx;
    ctx.round = static_cast<uint64_t>(d);
    std::vector<float> a(4096, 0.0f), b(4096, 0.0f);
    std::vector<Frame> frames = encodeAll(*plain, x, ctx);
    for (const auto& f : frames) {
      REQUIRE(plain->decodeAccumulate(f, 1.0f, a).isOk());
      REQUIRE(scaled->decodeAccumulate(f, 1.0f, b).isOk());
    }
    errPlain += sqDiff(a, x) / draws;
    errScaled += sqDiff(b, x) / draws;
  }
  INFO("plain " << errPlain / sq(x) << ", scaled " << errScaled / sq(x) << ", 1 - delta "
                << 1 - delta);
  CHECK(errPlain > sq(x));
  CHECK(errScaled <= (1.0 - delta) * sq(x));
}

TEST_CASE("a contractive codec rejects a frame that is not one of its chunks",
          "[codec][contractive][corrupt]") {
  Options o;
  o.method = Method::kQsgd;
  o.chunkElements = 4096;
  Options other = o;
  other.chunkElements = 8192;  // another chunking: (w2, chunk 0) has 8192 elements there
  other.contractive = true;
  ModelCodec sender = makeCodec(o);
  ModelCodec receiver = makeCodec(other);
  const auto x = gaussian(modelSize(), 2);
  const auto frames = encodeAll(sender, x, EncodeContext{});
  std::vector<float> acc(modelSize(), 0.0f);
  bool rejected = false;
  for (const auto& f : frames) {
    auto r = receiver.decodeAccumulate(f, 1.0f, acc);
    if (!r.isOk()) {
      CHECK(r.status().code() == ErrorCode::kDataLoss);
      CHECK(r.status().message().find("chunk") != std::string::npos);
      rejected = true;
    }
  }
  CHECK(rejected);
}
