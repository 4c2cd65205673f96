// PeerCore's parts on their own (edges.h, health.h): the order of an incoming message's admission
// checks and what each verdict counts as (a drop, or a refusal towards quarantine), framing and
// sealing, the divergence notice's payload codec on hostile bytes, and the divergence thresholds.
// PeerCore's own tests (engine_test, security_test, integrity_test) drive the same code through
// whole rounds.
#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "runtime/common/byte_order.h"
#include "runtime/engine/edges.h"
#include "runtime/engine/envelope.h"
#include "runtime/engine/health.h"
#include "runtime/security/key.h"

using namespace grapevine;
using engine::Admission;
using engine::Edge;
using engine::Envelope;
using engine::kEnvelopeBytes;

namespace {

// A message from `sender` on an edge: envelope + `payload` bytes (+ room for a tag), framed by
// `from` (the sending end of the edge, which seals it when it has a key).
std::vector<std::uint8_t> message(const Edge& from, std::uint32_t sender, std::uint64_t sequence,
                                  std::size_t payload, std::uint32_t incarnation = 0) {
  std::vector<std::uint8_t> buf(kEnvelopeBytes + payload + security::kSealTagBytes, 0x5a);
  Envelope env;
  env.sender = sender;
  env.incarnation = incarnation;
  env.sequence = sequence;
  env.round = 3;
  env.messageBytes = static_cast<std::uint32_t>(payload);
  env.payloadCrc =
      engine::payloadChecksum(std::span<const std::uint8_t>(buf).subspan(kEnvelopeBytes, payload));
  buf.resize(from.frame(env, buf, kEnvelopeBytes + payload));
  return buf;
}

Admission admit(const Edge& e, int j, const std::vector<std::uint8_t>& bytes) {
  std::vector<std::uint8_t> opened;
  std::span<const std::uint8_t> view = bytes;
  return e.admit(j, view, opened);
}

}  // namespace

TEST_CASE("edge admission: each check's verdict, in order") {
  Edge e;
  e.nextSeqIn = 5;
  SECTION("the next message, and one ahead within the window, are taken") {
    const Admission a = admit(e, 2, message(e, 2, 5, 16));
    REQUIRE(a.envelope);
    CHECK(a.envelope->sequence == 5);
    CHECK(a.envelope->round == 3);
    CHECK(admit(e, 2, message(e, 2, 5 + engine::kSequenceWindow, 16)).envelope);
  }
  SECTION("a lower sequence is a duplicate: dropped, not refused") {
    const Admission a = admit(e, 2, message(e, 2, 4, 16));
    CHECK_FALSE(a.envelope);
    CHECK(a.reason == "duplicate");
    CHECK_FALSE(a.refuse);
  }
  SECTION("past the sequence window: refused (a forged number would stall the edge)") {
    const Admission a = admit(e, 2, message(e, 2, 6 + engine::kSequenceWindow, 16));
    CHECK(a.reason == "sequence_window");
    CHECK(a.refuse);
  }
  SECTION("another sender's envelope on this edge: refused") {
    const Admission a = admit(e, 2, message(e, 3, 5, 16));
    CHECK(a.reason == "wrong_sender");
    CHECK(a.refuse);
  }
  SECTION("an envelope that does not parse: refused with the envelope's reason") {
    auto bytes = message(e, 2, 5, 16);
    bytes[kEnvelopeBytes + 1] ^= 0x01;  // the payload no longer matches its CRC
    const Admission a = admit(e, 2, bytes);
    CHECK_FALSE(a.envelope);
    CHECK(a.refuse);
    CHECK(a.reason == "crc");
    const Admission shortOne = admit(e, 2, std::vector<std::uint8_t>(10, 0));
    CHECK_FALSE(shortOne.envelope);
    CHECK(shortOne.refuse);
    CHECK_FALSE(shortOne.reason.empty());
  }
  SECTION("another incarnation than the edge's: dropped as from before a restart") {
    e.incarnation = 7;
    CHECK(admit(e, 2, message(e, 2, 5, 16, 7)).envelope);
    const Admission a = admit(e, 2, message(e, 2, 5, 16, 6));
    CHECK(a.reason == "old_incarnation");
    CHECK_FALSE(a.refuse);
  }
}

TEST_CASE("edge admission with a key: the tag first, and sealed both ways or not at all") {
  REQUIRE(security::initialize().isOk());
  const security::Key key = security::randomKey();
  for (const bool encrypt : {false, true}) {
    CAPTURE(encrypt);
    Edge sender, receiver, unkeyed;
    sender.key = receiver.key = key;
    sender.encrypt = receiver.encrypt = encrypt;
    const auto sealed = message(sender, 2, 0, 32);
    CHECK(sealed.size() == kEnvelopeBytes + 32 + security::kSealTagBytes);
    if (encrypt) {  // the payload on the wire is not the plaintext (0x5a bytes)
      CHECK(std::vector<std::uint8_t>(sealed.begin() + kEnvelopeBytes,
                                      sealed.begin() + kEnvelopeBytes + 32) !=
            std::vector<std::uint8_t>(32, 0x5a));
    }
    std::vector<std::uint8_t> opened;
    std::span<const std::uint8_t> view = sealed;
    const Admission a = receiver.admit(2, view, opened);
    REQUIRE(a.envelope);
    CHECK(view.size() == kEnvelopeBytes + 32);  // the tag is off
    CHECK(view[kEnvelopeBytes] == 0x5a);        // (decrypted)
    // A flipped byte anywhere fails the tag: dropped as `auth`, not refused (a third party's
    // forgery does not count against the neighbour).
    for (std::size_t at :
         {std::size_t{8}, std::size_t{16}, kEnvelopeBytes + 3, sealed.size() - 1}) {
      auto forged = sealed;
      forged[at] ^= 0x01;
      const Admission f = admit(receiver, 2, forged);
      CHECK_FALSE(f.envelope);
      CHECK(f.reason == "auth");
      CHECK_FALSE(f.refuse);
    }
    CHECK(admit(receiver, 2, std::vector<std::uint8_t>(kEnvelopeBytes, 0)).reason == "auth");
    // Sealed where the edge has no key: its own message, refused.
    const Admission b = admit(unkeyed, 2, sealed);
    CHECK_FALSE(b.envelope);
    CHECK(b.refuse);
  }
}

TEST_CASE("edge: held buffers are reused up to a round message's size") {
  Edge e;
  const std::vector<std::uint8_t> small(100, 1), big(5000, 2);
  auto held = e.hold(small);
  CHECK(held == small);
  e.recycle(std::move(held), 1000);
  REQUIRE(e.spare.size() == 1);
  auto again = e.hold(std::vector<std::uint8_t>(50, 3));
  CHECK(e.spare.empty());  // taken from the spares
  CHECK(again.size() == 50);
  e.recycle(e.hold(big), 1000);  // a snapshot's buffer is freed, not kept
  CHECK(e.spare.empty());
}

TEST_CASE("divergence notice payload: round trip, a long reason cut, hostile bytes refused") {
  engine::Divergence d{12, 3, std::numeric_limits<double>::quiet_NaN(), 4.5,
                       "the loss is not finite"};
  std::vector<std::uint8_t> buf(engine::noticeBytes(d));
  engine::writeNotice(d, buf);
  auto back = engine::readNotice(buf);
  REQUIRE(back);
  CHECK(back->round == 12);
  CHECK(back->origin == 3);
  CHECK(std::isnan(back->loss));
  CHECK(back->modelNorm == 4.5);
  CHECK(back->reason == d.reason);

  d.reason.assign(2000, 'x');
  buf.assign(engine::noticeBytes(d), 0);
  CHECK(buf.size() == engine::kNoticeFixedBytes + engine::kNoticeMaxReason);
  engine::writeNotice(d, buf);
  back = engine::readNotice(buf);
  REQUIRE(back);
  CHECK(back->reason.size() == engine::kNoticeMaxReason);

  // Every shorter or longer payload, a reason length past the limit, a round past INT64_MAX.
  for (std::size_t n = 0; n < buf.size(); ++n) {
    CHECK_FALSE(engine::readNotice(std::span<const std::uint8_t>(buf).first(n)));
  }
  auto longer = buf;
  longer.push_back(0);
  CHECK_FALSE(engine::readNotice(longer));
  auto badLength = buf;
  storeLe(badLength.data() + 28, static_cast<std::uint16_t>(engine::kNoticeMaxReason + 1));
  badLength.push_back('x');
  CHECK_FALSE(engine::readNotice(badLength));
  auto badRound = buf;
  storeLe(badRound.data() + 4, std::uint64_t{1} << 63);
  CHECK_FALSE(engine::readNotice(badRound));
}

TEST_CASE("health monitor: each divergence rule, and a NaN loss where the caller may not know it") {
  const std::vector<float> x0(100, 0.5f);  // |x0| = 5
  SECTION("a loss that is not finite") {
    engine::HealthMonitor h(1, false);
    h.start(x0);
    CHECK(h.check(x0, 2.0, false, 0));
    CHECK_FALSE(h.check(x0, std::numeric_limits<double>::infinity(), false, 1));
    REQUIRE(h.divergence());
    CHECK(h.divergence()->origin == 1);
    CHECK(h.divergence()->round == 1);
    CHECK(h.divergence()->reason == "the loss is not finite");
  }
  SECTION("the API: a NaN loss is unknown, only the model is checked") {
    engine::HealthMonitor h(0, true);
    h.start(x0);
    CHECK(h.check(x0, std::nan(""), false, 0));
    CHECK_FALSE(h.divergence());
    std::vector<float> bad = x0;
    bad[7] = std::numeric_limits<float>::quiet_NaN();
    CHECK_FALSE(h.check(bad, std::nan(""), true, 1));
    CHECK(h.divergence()->reason == "the model is not finite after mixing");
  }
  SECTION("the norm: over kNormGrowth x max(|x0|, 1)") {
    engine::HealthMonitor h(0, false);
    h.start(x0);
    std::vector<float> x(100, 0.5f * 999.0f);
    CHECK(h.check(x, 1.0, false, 0));
    x.assign(100, 0.5f * 1001.0f);
    CHECK_FALSE(h.check(x, 1.0, false, 1));
    CHECK(h.divergence()->reason == "the model norm grew over 1000x its initial value");
  }
  SECTION("the loss average: over 1000x its lowest and 10x the first round's") {
    engine::HealthMonitor h(0, false);
    h.start(x0);
    CHECK(h.check(x0, 1.0, false, 0));
    std::int64_t round = 1;
    for (; round < 200 && h.check(x0, 1.0e6, false, round); ++round) {
    }
    REQUIRE(h.divergence());
    CHECK(h.divergence()->reason == "the loss average grew over 1000x its lowest");
    // The average of 1 then 1e6 with weight 0.1 passes 1000 in the 1st round at 1e6 (1e5 + 0.9).
    CHECK(h.divergence()->round == 1);
    CHECK(h.history().firstLoss == 1.0);
    // A later notice does not replace the first divergence known.
    h.noteDivergence({99, 4, 0.0, 0.0, "other"});
    CHECK(h.divergence()->origin == 0);
  }
}
