// A neighbour's membership (runtime/engine/membership.h) without transports: a fake core that
// records what it is asked, and the actions the driver would carry out. The paths of
// docs/faults.md: silent -> dead with its connections open -> back; silent, then its connection
// fails (closed, redialed by the lower rank); failure -> rejoin; a rejoin during collectives waits
// for their end; a quarantined neighbour never comes back; a finished one is not counted dead; and
// a move outside the diagram aborts.
#include "runtime/engine/membership.h"

#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <csignal>
#include <cstdlib>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "tests/test_util/in_child.h"

using namespace grapevine::engine;
using Kind = MembershipAction::Kind;
using S = NeighbourState;
using grapevine::test_util::inChild;

namespace {

// PeerCore's liveness, as far as Membership sees it.
class FakeCore final : public MembershipCore {
 public:
  bool isDead(int j) const override { return dead.count(j) != 0; }
  bool finishedRounds(int j) const override { return finished.count(j) != 0; }
  void markDead(int j, bool lost) override {
    calls.push_back("markDead " + std::to_string(j) + (lost ? " lost" : " not-lost"));
    if (!dead.count(j)) dead[j] = lost;
  }
  bool revive(int j) override {
    calls.push_back("revive " + std::to_string(j));
    if (!dead.count(j) || quarantined.count(j)) return false;
    dead.erase(j);
    return true;
  }
  bool rejoin(const Reconnection& r) override {
    calls.push_back("rejoin " + std::to_string(r.peer));
    if (quarantined.count(r.peer)) return false;
    dead.erase(r.peer);
    return true;
  }
  // PeerCore::refuse: the core drops the edge by itself.
  void quarantine(int j) {
    quarantined.insert(j);
    dead[j] = true;
  }

  std::map<int, bool> dead;
  std::set<int> finished, quarantined;
  std::vector<std::string> calls;
};

Reconnection reconnection(int peer, std::uint64_t gen) {
  Reconnection r;
  r.peer = peer;
  r.gen = gen;
  r.incarnation = 7;
  r.theirRound = 12;
  return r;
}

bool abortedIn(int status) { return WIFSIGNALED(status) && WTERMSIG(status) == SIGABRT; }

}  // namespace

TEST_CASE("silent, dead with its connections open, then back: revived") {
  FakeCore core;
  Membership m(/*rank=*/0, core);
  const auto lost = m.heartbeatsLost(1);
  CHECK(lost.kind == Kind::kDropped);
  CHECK(lost.from == S::kLive);
  CHECK(lost.to == S::kSilent);
  CHECK_FALSE(lost.close);  // connections kept open: it may come back
  CHECK_FALSE(lost.redial);
  CHECK(core.dead.at(1));  // counted as lost
  CHECK(m.state(1) == S::kSilent);
  CHECK(m.deadThisRound() == std::vector<int>{1});

  // A second verdict changes nothing.
  CHECK(m.heartbeatsLost(1).kind == Kind::kNone);

  const auto back = m.heartbeatsBack(1);
  CHECK(back.kind == Kind::kRevived);
  CHECK(back.from == S::kSilent);
  CHECK(back.to == S::kLive);
  CHECK(back.restartSendClock);
  CHECK_FALSE(back.close);
  CHECK_FALSE(core.isDead(1));
  CHECK(m.state(1) == S::kLive);
  CHECK(m.revivedThisRound() == std::vector<int>{1});

  m.endRound();
  CHECK(m.deadThisRound().empty());
  CHECK(m.revivedThisRound().empty());
  // Heartbeats back of a live neighbour: nothing.
  CHECK(m.heartbeatsBack(1).kind == Kind::kNone);
}

TEST_CASE("silent, then its connection fails: closed, and redialed by the lower rank") {
  FakeCore core;
  Membership m(/*rank=*/1, core);
  m.heartbeatsLost(2);  // we are the lower rank of edge {1, 2}
  m.heartbeatsLost(0);  // the higher rank of edge {0, 1}
  m.endRound();

  const auto a = m.connectionFailed(2);
  CHECK(a.kind == Kind::kLostAfterSilence);
  CHECK(a.from == S::kSilent);
  CHECK(a.to == S::kLost);
  REQUIRE(a.close);
  CHECK(*a.close == 0);
  REQUIRE(a.redial);
  CHECK(*a.redial == 0);
  CHECK(m.deadThisRound().empty());  // counted dead once, when it fell silent

  const auto b = m.connectionFailed(0);
  CHECK(b.kind == Kind::kLostAfterSilence);
  CHECK(b.close);
  CHECK_FALSE(b.redial);  // neighbour 0 dials us

  // Lost now: heartbeats back do not revive it (its connections are gone), more failures nothing.
  CHECK(m.heartbeatsBack(2).kind == Kind::kNone);
  CHECK(m.connectionFailed(2).kind == Kind::kNone);
  CHECK(m.state(2) == S::kLost);
}

TEST_CASE(
    "a failed connection, then the neighbour connects again: rejoined on the new generation") {
  FakeCore core;
  Membership m(/*rank=*/0, core);
  const auto dead = m.connectionFailed(3);
  CHECK(dead.kind == Kind::kDropped);
  CHECK(dead.to == S::kLost);
  CHECK(dead.close);
  CHECK(dead.redial);
  CHECK(core.dead.at(3));

  CHECK(m.current(3, 0));
  const auto back = m.reconnected(reconnection(3, 1));
  CHECK(back.kind == Kind::kRejoined);
  CHECK(back.from == S::kLost);  // the driver logs "it was dead"
  CHECK(back.to == S::kLive);
  CHECK(back.incarnation == 7);
  REQUIRE(back.startReceiving);
  CHECK(*back.startReceiving == 1);
  CHECK(back.restartSendClock);
  CHECK_FALSE(back.close);
  CHECK(m.gen(3) == 1);
  CHECK_FALSE(m.current(3, 0));  // items of the old connections are ignored
  CHECK(m.current(3, 1));
  CHECK(m.rejoinedThisRound() == std::vector<int>{3});
  CHECK_FALSE(core.isDead(3));

  // A live neighbour that restarted before its death was noticed: rejoined from kLive.
  const auto again = m.reconnected(reconnection(3, 2));
  CHECK(again.kind == Kind::kRejoined);
  CHECK(again.from == S::kLive);
}

TEST_CASE("a rejoin during collectives waits for their end; so does heartbeats back") {
  FakeCore core;
  Membership m(/*rank=*/0, core);
  m.heartbeatsLost(2);
  m.beginCollectives();
  CHECK(m.inCollectives());

  // Live neighbour 1 connects again: its old edge ends now (not counted lost), the new one later.
  const auto r = m.reconnected(reconnection(1, 1));
  CHECK(r.kind == Kind::kDeferred);
  CHECK(r.to == S::kRejoining);
  CHECK(core.dead.at(1) == false);
  CHECK(m.gen(1) == 1);  // the training thread is on the new connections already
  CHECK(m.rejoinedThisRound().empty());
  CHECK_FALSE(r.startReceiving);

  // Silent neighbour 2 is heard again: deferred too, still silent.
  CHECK(m.heartbeatsBack(2).kind == Kind::kDeferred);
  CHECK(m.state(2) == S::kSilent);
  // A failure of the rejoining one's new connection changes nothing (it is dead already).
  CHECK(m.connectionFailed(1).kind == Kind::kNone);

  const Membership::Deferred deferred = m.endCollectives();
  CHECK_FALSE(m.inCollectives());
  CHECK(deferred.back == std::set<int>{2});
  REQUIRE(deferred.rejoins.count(1) == 1);
  // The driver replays them: revivals, then rejoins.
  for (int j : deferred.back) CHECK(m.heartbeatsBack(j).kind == Kind::kRevived);
  for (const auto& [j, rec] : deferred.rejoins) {
    const auto a = m.reconnected(rec);
    CHECK(a.kind == Kind::kRejoined);
    CHECK(a.from == S::kRejoining);  // logged as "it was dead", as before
    REQUIRE(a.startReceiving);
    CHECK(*a.startReceiving == 1);
  }
  CHECK(m.state(1) == S::kLive);
  CHECK(m.state(2) == S::kLive);
  CHECK(m.endCollectives().rejoins.empty());  // replayed once
}

TEST_CASE("a quarantined neighbour is never taken back: its rejoin is refused and closed") {
  FakeCore core;
  Membership m(/*rank=*/0, core);
  core.quarantine(4);  // PeerCore::refuse, reported by takeQuarantined()
  const auto q = m.quarantined(4);
  CHECK(q.kind == Kind::kQuarantined);
  CHECK(q.from == S::kLive);
  CHECK(q.to == S::kQuarantined);
  REQUIRE(q.close);
  CHECK_FALSE(q.redial);
  CHECK(m.deadThisRound() == std::vector<int>{4});

  const auto r = m.reconnected(reconnection(4, 1));
  CHECK(r.kind == Kind::kRejoinRefused);
  REQUIRE(r.close);
  CHECK(*r.close == 1);  // the new connections
  CHECK_FALSE(r.startReceiving);
  CHECK(m.state(4) == S::kQuarantined);
  CHECK(m.rejoinedThisRound().empty());
  CHECK(m.heartbeatsBack(4).kind == Kind::kNone);
  CHECK(m.connectionFailed(4).kind == Kind::kNone);
}

TEST_CASE("a quarantine the core made before the driver heard of it behaves as one") {
  // The core can quarantine while applying held messages (PeerCore::beginRound); the driver hears
  // of it after the next message. Meanwhile a heartbeat verdict changes nothing (dead already).
  FakeCore core;
  Membership m(/*rank=*/0, core);
  core.quarantine(1);
  CHECK(m.heartbeatsLost(1).kind == Kind::kNone);
  CHECK(m.state(1) == S::kQuarantined);
  CHECK(core.calls.empty());        // not marked dead a second time
  const auto q = m.quarantined(1);  // reported once
  CHECK(q.kind == Kind::kQuarantined);
  CHECK(q.from == S::kLive);
  CHECK(m.deadThisRound() == std::vector<int>{1});
}

TEST_CASE("a neighbour that finished its rounds is closed, not counted dead, and not redialed") {
  FakeCore core;
  Membership m(/*rank=*/0, core);
  core.finished = {1, 2};
  const auto a = m.connectionFailed(1);  // linger(): its last message is in
  CHECK(a.kind == Kind::kFinished);
  CHECK(a.to == S::kFinished);
  CHECK(a.close);
  CHECK_FALSE(a.redial);
  CHECK(core.dead.at(1) == false);
  // Its heartbeats stopping after its last round: closed too, not kept for a revival.
  const auto b = m.heartbeatsLost(2);
  CHECK(b.kind == Kind::kFinished);
  CHECK(b.close);
  CHECK(m.deadThisRound().empty());
  CHECK(m.heartbeatsBack(2).kind == Kind::kNone);
}

TEST_CASE("the transition table") {
  const std::vector<S> all = {S::kLive,     S::kSilent,    S::kLost,
                              S::kFinished, S::kRejoining, S::kQuarantined};
  const std::set<std::pair<S, S>> legal = {
      {S::kLive, S::kSilent},    {S::kLive, S::kLost},        {S::kLive, S::kFinished},
      {S::kLive, S::kRejoining}, {S::kLive, S::kQuarantined}, {S::kSilent, S::kLive},
      {S::kSilent, S::kLost},    {S::kLost, S::kLive},        {S::kFinished, S::kLive},
      {S::kRejoining, S::kLive},
  };
  for (S from : all) {
    for (S to : all) {
      INFO(toString(from) << " -> " << toString(to));
      CHECK(Membership::legal(from, to) == (legal.count({from, to}) == 1));
    }
  }
}

TEST_CASE("a move outside the diagram aborts") {
  // A core that takes a quarantined neighbour back would make kQuarantined -> kLive.
  const int taken = inChild([] {
    FakeCore core;
    Membership m(/*rank=*/0, core);
    core.quarantine(1);
    m.quarantined(1);
    core.quarantined.clear();  // the fake now accepts the rejoin
    m.reconnected(reconnection(1, 1));
  });
  CHECK(abortedIn(taken));
  // A quarantine reported for a neighbour that is not live (reported twice).
  const int twice = inChild([] {
    FakeCore core;
    Membership m(/*rank=*/0, core);
    core.quarantine(1);
    m.quarantined(1);
    m.quarantined(1);
  });
  CHECK(abortedIn(twice));
  // The same steps without the illegal one end normally.
  const int fine = inChild([] {
    FakeCore core;
    Membership m(/*rank=*/0, core);
    core.quarantine(1);
    m.quarantined(1);
    m.reconnected(reconnection(1, 1));
  });
  CHECK((WIFEXITED(fine) && WEXITSTATUS(fine) == 0));
}
