// tagged::EarlyQueue on its own: the bounds on what a tagged backend (ucx) holds for messages that
// came before their receive, with injected time and liveness.
#include "runtime/transport/tagged/early_queue.h"

#include <algorithm>
#include <catch2/catch.hpp>
#include <map>
#include <set>
#include <vector>

using namespace grapevine::transport::tagged;
using Queue = EarlyQueue<int>;
using namespace std::chrono_literals;

namespace {

const Queue::LiveFn kNoneLive = [](std::uint64_t) { return false; };
Queue::Clock::time_point t0() { return Queue::Clock::time_point{} + 1000s; }

}  // namespace

TEST_CASE("early queue: a receive takes the oldest message of its exact tag") {
  Queue q;
  const auto now = t0();
  CHECK(q.add(wireTag(1, 7), 10, 100, 100, now, kNoneLive).empty());
  CHECK(q.add(wireTag(1, 8), 11, 5, 5, now, kNoneLive).empty());
  CHECK(q.add(wireTag(1, 7), 12, 200, 200, now, kNoneLive).empty());
  CHECK(q.add(wireTag(2, 7), 13, 1, 1, now, kNoneLive).empty());
  CHECK(q.held() == 4);
  CHECK(q.heldBytes() == 306);
  auto a = q.take(wireTag(1, 7));
  REQUIRE(a);
  CHECK(a->handle == 10);
  CHECK(a->length == 100);
  auto b = q.take(wireTag(1, 7));
  REQUIRE(b);
  CHECK(b->handle == 12);
  CHECK(!q.take(wireTag(1, 7)));  // another sender's tag 7 is not ours
  CHECK(q.take(wireTag(2, 7))->handle == 13);
  CHECK(q.take(wireTag(1, 8))->handle == 11);
  CHECK(q.held() == 0);
  CHECK(q.heldBytes() == 0);
  CHECK(q.dropped() == 0);
}

TEST_CASE("early queue: a sender over its bound loses its oldest messages, others keep theirs") {
  Queue::Limits limits;
  limits.perSender = 3;
  Queue q(limits);
  const auto now = t0();
  CHECK(q.add(wireTag(5, 1), 100, 1, 1, now, kNoneLive).empty());
  std::vector<int> dropped;
  for (int i = 0; i < 10; ++i) {
    // Junk on tags nobody receives, interleaved with another sender's message.
    auto out = q.add(wireTag(4, 1000 + static_cast<std::uint64_t>(i)), i, 1, 1, now, kNoneLive);
    dropped.insert(dropped.end(), out.begin(), out.end());
  }
  CHECK(dropped == std::vector<int>{0, 1, 2, 3, 4, 5, 6});
  CHECK(q.held() == 4);
  CHECK(q.dropped() == 7);
  CHECK(q.take(wireTag(5, 1))->handle == 100);
  CHECK(q.take(wireTag(4, 1009))->handle == 9);
  CHECK(!q.take(wireTag(4, 1000)));
}

TEST_CASE("early queue: over the total bound a stranger's oldest goes first, then the oldest") {
  Queue::Limits limits;
  limits.total = 4;
  Queue q(limits);
  const auto now = t0();
  const Queue::LiveFn live = [](std::uint64_t sender) { return sender == 1; };
  CHECK(q.add(wireTag(1, 1), 1, 1, 1, now, live).empty());
  CHECK(q.add(wireTag(9, 1), 2, 1, 1, now, live).empty());
  CHECK(q.add(wireTag(1, 1), 3, 1, 1, now, live).empty());
  CHECK(q.add(wireTag(8, 1), 4, 1, 1, now, live).empty());
  CHECK(q.add(wireTag(1, 1), 5, 1, 1, now, live) == std::vector<int>{2});  // stranger 9, oldest
  CHECK(q.add(wireTag(1, 1), 6, 1, 1, now, live) == std::vector<int>{4});  // then stranger 8
  CHECK(q.add(wireTag(1, 1), 7, 1, 1, now, live) == std::vector<int>{1});  // then the oldest
  CHECK(q.held() == 4);
  CHECK(q.dropped() == 3);
  for (int h : {3, 5, 6, 7}) CHECK(q.take(wireTag(1, 1))->handle == h);
}

TEST_CASE("early queue: over the byte bound the oldest go until the rest fits") {
  Queue::Limits limits;
  limits.totalBytes = 1000;
  Queue q(limits);
  const auto now = t0();
  CHECK(q.add(wireTag(3, 1), 1, 400, 400, now, kNoneLive).empty());
  CHECK(q.add(wireTag(3, 2), 2, 400, 400, now, kNoneLive).empty());
  CHECK(q.add(wireTag(3, 3), 3, 1 << 20, 700, now, kNoneLive) == std::vector<int>{1, 2});
  CHECK(q.heldBytes() == 700);
  // A message that alone is over the bound is not held at all.
  CHECK(q.add(wireTag(3, 4), 4, 5000, 5000, now, kNoneLive) == std::vector<int>{3, 4});
  CHECK(q.held() == 0);
  CHECK(q.heldBytes() == 0);
}

TEST_CASE("early queue: a stranger's messages are held for a while, a live sender's until taken") {
  Queue::Limits limits;
  limits.strangerAge = 30s;
  Queue q(limits);
  bool twoLive = true;
  const Queue::LiveFn live = [&](std::uint64_t sender) { return sender == 2 && twoLive; };
  const auto start = t0();
  CHECK(q.add(wireTag(7, 1), 1, 1, 1, start, live).empty());
  CHECK(q.add(wireTag(2, 1), 2, 1, 1, start, live).empty());
  CHECK(q.add(wireTag(7, 1), 3, 1, 1, start + 20s, live).empty());
  CHECK(q.expire(start + 29s, live).empty());
  CHECK(q.expire(start + 31s, live) == std::vector<int>{1});
  CHECK(q.held() == 2);
  CHECK(q.expire(start + 100s, live) == std::vector<int>{3});
  CHECK(q.take(wireTag(2, 1))->handle == 2);
  // A peer whose connection is gone counts as a stranger again.
  CHECK(q.add(wireTag(2, 1), 4, 1, 1, start + 100s, live).empty());
  twoLive = false;
  CHECK(q.expire(start + 200s, live) == std::vector<int>{4});
  CHECK(q.dropped() == 3);
}

TEST_CASE("early queue: taking and evicting in any order keeps the counts and the order right") {
  Queue::Limits limits;
  limits.perSender = 5;
  limits.total = 12;
  Queue q(limits);
  const auto now = t0();
  const Queue::LiveFn live = [](std::uint64_t sender) { return sender < 2; };
  std::set<int> seen;
  std::uint32_t x = 12345;
  auto next = [&x] { return x = x * 1664525u + 1013904223u; };
  int handle = 0;
  std::map<std::uint64_t, int> lastTaken;  // per wire tag: handles come out increasing
  std::size_t expectHeld = 0;
  for (int step = 0; step < 20000; ++step) {
    const std::uint64_t tag = wireTag(next() % 4, next() % 3);
    if (next() % 3 != 0) {
      const int h = handle++;
      auto out = q.add(tag, h, 10, 10, now, live);
      ++expectHeld;
      for (int d : out) CHECK(seen.insert(d).second);
      expectHeld -= out.size();
    } else if (auto e = q.take(tag)) {
      CHECK(seen.insert(e->handle).second);
      CHECK(e->wireTag == tag);
      auto it = lastTaken.find(tag);
      if (it != lastTaken.end()) CHECK(e->handle > it->second);
      lastTaken[tag] = e->handle;
      --expectHeld;
    }
    REQUIRE(q.held() == expectHeld);
    REQUIRE(q.held() <= 12);
    if (step % 1000 == 0) (void)q.expire(now, live);  // nothing is old: only compacts
  }
  for (int h : q.clear()) CHECK(seen.insert(h).second);
  CHECK(seen.size() == static_cast<std::size_t>(handle));
  CHECK(q.held() == 0);
}
