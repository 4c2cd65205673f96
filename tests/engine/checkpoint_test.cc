// Checkpoints (runtime/engine/checkpoint.h): a run restored from a checkpoint continues bit for bit
// as the uninterrupted run; torn, corrupt and foreign files are refused and the previous one used;
// `keep` prunes; a state without a neighbour's replica asks it for a snapshot.
#include "runtime/engine/checkpoint.h"

#include <sys/stat.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <limits>
#include <string>
#include <tuple>
#include <vector>

#include "runtime/common/byte_order.h"
#include "runtime/common/hash.h"
#include "runtime/engine/envelope.h"
#include "runtime/engine/lockstep.h"
#include "runtime/engine/setup.h"
#include "tests/test_util/config.h"

using namespace grapevine;
using engine::CheckpointKnowledge;
using engine::checkpointsToDelete;
using engine::PeerCore;
using test_util::makePeers;

namespace {

namespace fs = std::filesystem;

// Stochastic gradients (minibatches), momentum, CHOCO with the automatic step and top-k: every kind
// of state a checkpoint must carry (model, momentum, public copies, replicas, the step controller,
// the minibatch stream's position).
// `extra`: more YAML (the outer optimizer's momentum is state too).
config::Config chocoConfig(const std::string& run = "run: { seed: 5, rounds: 120 }\n",
                           const std::string& extra = "") {
  return test_util::loadYaml(
      run + extra +
          "peers: { count: 5 }\ntopology: { kind: ring }\n"
          "algorithm: { name: choco, consensus_step: auto }\n"
          "optimizer: { lr: 0.05, momentum: 0.9, nesterov: true, schedule: cosine, batch_size: 16 "
          "}\n"
          "compression: { method: top-k, ratio: 0.1, dense_below: 0 }\n"
          "workload: { name: fashion-mnist-mlp, hidden: [16], eval_every: 0, eval_samples: 200 }\n",
      "checkpoint_test.yaml");
}

std::string tempFolder(const std::string& name) {
  const std::string dir = std::string(GRAPEVINE_BINARY_DIR) + "/checkpoint_test/" + name;
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

std::vector<char> readBytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

void writeBytes(const std::string& path, const std::vector<char>& bytes) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

}  // namespace

TEST_CASE("checkpoint: a restored run continues bit for bit as the uninterrupted one") {
  const bool outer = GENERATE(false, true);
  INFO((outer ? "with" : "without") << " an outer optimizer");
  const auto c = chocoConfig("run: { seed: 5, rounds: 120 }\n",
                             outer ? "outer: { optimizer: sgd, lr: 0.5, momentum: 0.5 }\n" : "");
  auto plan = test_util::makePlan(c);
  auto reference = makePeers(*plan);
  REQUIRE(engine::runLockstep(reference, 0, 120).isOk());

  auto first = makePeers(*plan);
  REQUIRE(engine::runLockstep(first, 0, 47).isOk());
  const std::string dir = tempFolder(outer ? "exact-outer" : "exact");
  for (const auto& p : first) {
    const std::string folder = engine::checkpointFolder(c, dir, p->rank());
    REQUIRE(engine::writeCheckpoint(folder, engine::checkpointIdentity(c, *p), 3, p->saveState(), 2)
                .isOk());
  }
  first.clear();  // nothing survives but the files

  auto resumed = makePeers(*plan);
  for (auto& p : resumed) {
    const std::string folder = engine::checkpointFolder(c, dir, p->rank());
    auto loaded = engine::latestCheckpoint(folder, engine::checkpointIdentity(c, *p));
    REQUIRE(loaded.has_value());
    CHECK(loaded->state.round == 46);
    CHECK(loaded->incarnation == 3);
    CHECK(loaded->state.outerMomentum.size() == (outer ? p->model().size() : 0));
    const Status st = p->restoreState(loaded->state);
    INFO(st.toString());
    REQUIRE(st.isOk());
    CHECK(p->round() == 46);
  }
  REQUIRE(engine::runLockstep(resumed, 47, 120 - 47).isOk());
  for (std::size_t r = 0; r < resumed.size(); ++r) {
    INFO("peer " << r);
    const auto a = reference[r]->model();
    const auto b = resumed[r]->model();
    REQUIRE(a.size() == b.size());
    CHECK(std::equal(a.begin(), a.end(), b.begin()));  // bit for bit
    CHECK(reference[r]->workload().step() == resumed[r]->workload().step());
    CHECK(reference[r]->counters().bytesSent == resumed[r]->counters().bytesSent);
    CHECK(reference[r]->algorithm().publicCopyHash() == resumed[r]->algorithm().publicCopyHash());
    CHECK(reference[r]->algorithm().scalars() == resumed[r]->algorithm().scalars());
  }
}

TEST_CASE("checkpoint: torn, corrupt and foreign files are refused; the previous one is used") {
  const auto c = chocoConfig();
  auto plan = test_util::makePlan(c);
  auto peers = makePeers(*plan);
  const std::string folder = tempFolder("corrupt") + "/rank-0";
  const auto id = engine::checkpointIdentity(c, *peers[0]);
  for (std::int64_t t = 0; t < 30; ++t) {
    REQUIRE(engine::runLockstep(peers, t, 1).isOk());
    if ((t + 1) % 10 == 0) {
      REQUIRE(engine::writeCheckpoint(folder, id, 0, peers[0]->saveState(), 3).isOk());
    }
  }
  REQUIRE(engine::checkpointRounds(folder) == std::vector<std::int64_t>{9, 19, 29});

  SECTION("a flipped byte fails the checksum; the previous one loads") {
    const std::string newest = engine::checkpointPath(folder, 29);
    auto bytes = readBytes(newest);
    bytes[bytes.size() / 2] ^= 0x10;
    writeBytes(newest, bytes);
    auto r = engine::readCheckpoint(newest, id);
    REQUIRE_FALSE(r.isOk());
    CHECK(r.status().code() == ErrorCode::kDataLoss);
    CHECK_THAT(r.status().message(), Catch::Contains("checksum"));
    auto latest = engine::latestCheckpoint(folder, id);
    REQUIRE(latest.has_value());
    CHECK(latest->state.round == 19);
  }
  SECTION("a torn (truncated) file and a leftover temporary are skipped") {
    const std::string newest = engine::checkpointPath(folder, 29);
    auto bytes = readBytes(newest);
    bytes.resize(bytes.size() * 2 / 3);
    writeBytes(newest, bytes);
    writeBytes(newest + ".tmp.123.0", bytes);  // a write killed before its rename
    CHECK(engine::checkpointRounds(folder) == std::vector<std::int64_t>{9, 19, 29});
    CHECK(engine::readCheckpoint(newest, id).status().code() == ErrorCode::kDataLoss);
    auto latest = engine::latestCheckpoint(folder, id);
    REQUIRE(latest.has_value());
    CHECK(latest->state.round == 19);
    // What it restores is round 19's state exactly.
    auto fresh = makePeers(*plan);
    REQUIRE(fresh[0]->restoreState(latest->state).isOk());
    CHECK(fresh[0]->round() == 19);
  }
  SECTION("another rank's or config's checkpoint is refused naming the field") {
    auto other = id;
    other.rank = 1;
    auto r = engine::readCheckpoint(engine::checkpointPath(folder, 29), other);
    REQUIRE(r.status().code() == ErrorCode::kInvalidArgument);
    CHECK_THAT(r.status().message(), Catch::Contains("rank 0"));
    other = id;
    other.parameters = id.parameters + 1;
    r = engine::readCheckpoint(engine::checkpointPath(folder, 29), other);
    REQUIRE(r.status().code() == ErrorCode::kInvalidArgument);
    CHECK_THAT(r.status().message(), Catch::Contains(std::to_string(id.parameters)));
    other = id;
    other.algorithm = "dsgd";
    CHECK(engine::readCheckpoint(engine::checkpointPath(folder, 29), other).status().code() ==
          ErrorCode::kInvalidArgument);
    CHECK_FALSE(engine::latestCheckpoint(folder, other).has_value());
  }
  SECTION("keep prunes the oldest, never the one just written") {
    REQUIRE(engine::runLockstep(peers, 30, 10).isOk());
    REQUIRE(engine::writeCheckpoint(folder, id, 0, peers[0]->saveState(), 2).isOk());
    CHECK(engine::checkpointRounds(folder) == std::vector<std::int64_t>{29, 39});
  }
}

TEST_CASE("checkpoint: hostile files named like checkpoints are refused before they are read") {
  const auto c = chocoConfig();
  auto plan = test_util::makePlan(c);
  auto peers = makePeers(*plan);
  const std::string folder = tempFolder("hostile") + "/rank-0";
  const auto id = engine::checkpointIdentity(c, *peers[0]);
  REQUIRE(engine::runLockstep(peers, 0, 10).isOk());
  REQUIRE(engine::writeCheckpoint(folder, id, 0, peers[0]->saveState(), 3).isOk());
  REQUIRE(engine::runLockstep(peers, 10, 10).isOk());
  const std::string newest = engine::checkpointPath(folder, 19);
  // Each puts something at round 19's name; round 9's must be what loads.
  const auto fallsBack = [&](const char* why) {
    INFO(why);
    const auto r = engine::readCheckpoint(newest, id);
    REQUIRE_FALSE(r.isOk());
    CHECK_THAT(r.status().message(), Catch::Contains(newest));
    CHECK_THAT(r.status().message(), Catch::Contains(why));
    const auto latest = engine::latestCheckpoint(folder, id);
    REQUIRE(latest.has_value());
    CHECK(latest->state.round == 9);
  };
  SECTION("another run's checkpoint (run.seed, optimizer.lr) is skipped naming the key") {
    REQUIRE(engine::writeCheckpoint(folder, id, 0, peers[0]->saveState(), 3).isOk());
    const auto other = chocoConfig("run: { seed: 6, rounds: 120 }\n");
    auto otherPeers = makePeers(*test_util::makePlan(other));
    const auto otherId = engine::checkpointIdentity(other, *otherPeers[0]);
    auto r = engine::readCheckpoint(newest, otherId);
    REQUIRE(r.status().code() == ErrorCode::kInvalidArgument);
    CHECK_THAT(r.status().message(), Catch::Contains("run.seed: 5 in the checkpoint, 6 here"));
    auto lr = id;
    for (auto& [path, value] : lr.config) {
      if (path == "optimizer.lr") value = "0.5";
    }
    r = engine::readCheckpoint(newest, lr);
    REQUIRE(r.status().code() == ErrorCode::kInvalidArgument);
    CHECK_THAT(r.status().message(), Catch::Contains("optimizer.lr"));
    // A key the run does not depend on (how often to evaluate) may change on resume.
    const auto evalEvery = chocoConfig("run: { seed: 5, rounds: 200 }\noutput: { log_every: 7 }\n");
    auto evalPeers = makePeers(*test_util::makePlan(evalEvery));
    CHECK(engine::readCheckpoint(newest, engine::checkpointIdentity(evalEvery, *evalPeers[0]))
              .isOk());
  }
  SECTION(
      "outer.*: another value is another run's; a checkpoint from before the keys is the "
      "default's") {
    const auto outer =
        chocoConfig("run: { seed: 5, rounds: 120 }\n", "outer: { optimizer: nesterov, lr: 0.7 }\n");
    auto outerPeers = makePeers(*test_util::makePlan(outer));
    const auto outerId = engine::checkpointIdentity(outer, *outerPeers[0]);
    REQUIRE(engine::writeCheckpoint(folder, id, 0, peers[0]->saveState(), 3).isOk());
    auto r = engine::readCheckpoint(newest, outerId);
    REQUIRE(r.status().code() == ErrorCode::kInvalidArgument);
    CHECK_THAT(r.status().message(),
               Catch::Contains("outer.optimizer: none in the checkpoint, nesterov here"));
    // A build before outer.* wrote no such keys: it ran without an outer optimizer.
    auto older = id;
    std::erase_if(older.config, [](const auto& kv) { return kv.first.starts_with("outer."); });
    REQUIRE(older.config.size() < id.config.size());
    REQUIRE(engine::writeCheckpoint(folder, older, 0, peers[0]->saveState(), 3).isOk());
    CHECK(engine::readCheckpoint(newest, id).isOk());
    r = engine::readCheckpoint(newest, outerId);
    REQUIRE(r.status().code() == ErrorCode::kInvalidArgument);
    CHECK_THAT(r.status().message(),
               Catch::Contains("outer.optimizer: absent from the checkpoint, nesterov here"));
  }
  SECTION("a directory") {
    fs::create_directory(newest);
    fallsBack("a directory");
  }
  SECTION("a FIFO (reading it would wait for a writer forever)") {
    REQUIRE(::mkfifo(newest.c_str(), 0600) == 0);
    fallsBack("a FIFO");
  }
  SECTION("a link to /dev/zero") {
    fs::create_symlink("/dev/zero", newest);
    fallsBack("a device");
  }
  SECTION("a 64 GB sparse file is not allocated") {
    std::ofstream(newest) << "GVCKPT2\n";
    REQUIRE(::truncate(newest.c_str(), 64ll << 30) == 0);
    fallsBack("bytes; at most");
  }
  SECTION("a model section shorter than the model, under a valid checksum") {
    auto state = peers[0]->saveState();
    state.model.resize(state.model.size() - 7);
    REQUIRE(engine::writeCheckpoint(folder, id, 0, state, 3).isOk());
    fallsBack("the model section holds");
  }
  SECTION("a model that is not finite, under a valid checksum") {
    auto state = peers[0]->saveState();
    state.model[3] = std::numeric_limits<float>::quiet_NaN();
    REQUIRE(engine::writeCheckpoint(folder, id, 0, state, 3).isOk());
    fallsBack("the model is not finite");
  }
}

TEST_CASE(
    "checkpoint: restoring refuses another model, and a missing replica asks for a snapshot") {
  const auto c = chocoConfig();
  auto plan = test_util::makePlan(c);
  auto peers = makePeers(*plan);
  REQUIRE(engine::runLockstep(peers, 0, 20).isOk());
  // Peer 0's neighbour 1 died before the checkpoint (its replica goes after the next mix): it is
  // not in the state.
  peers[0]->markDead(1);
  REQUIRE(engine::runLockstep(peers, 20, 1).isOk());
  const engine::PeerState saved = peers[0]->saveState();
  for (const auto& [name, values] : saved.algorithm) CHECK(name != "replica/1");

  auto fresh = makePeers(*plan);
  SECTION("another size changes nothing") {
    engine::PeerState bad = saved;
    bad.model.pop_back();
    const Status st = fresh[0]->restoreState(bad);
    CHECK(st.code() == ErrorCode::kInvalidArgument);
    CHECK_THAT(st.message(), Catch::Contains("model"));
    CHECK(fresh[0]->round() == -1);
    bad = saved;
    bad.algorithm.emplace_back("replica/9", bad.model);
    CHECK(fresh[0]->restoreState(bad).code() == ErrorCode::kInvalidArgument);
    CHECK(fresh[0]->round() == -1);
  }
  SECTION("the missing replica's edge requests a snapshot in its next message") {
    REQUIRE(fresh[0]->restoreState(saved).isOk());
    CHECK(fresh[0]->round() == 20);
    REQUIRE(fresh[0]->beginRound(21).isOk());
    const auto toOne = fresh[0]->outgoing(1);
    const auto env = engine::readEnvelope(toOne);
    REQUIRE(env.isOk());
    CHECK((env->flags & engine::kFlagResyncRequest) != 0);
    const auto toFour = fresh[0]->outgoing(4);
    const auto env4 = engine::readEnvelope(toFour);
    REQUIRE(env4.isOk());
    CHECK((env4->flags & engine::kFlagResyncRequest) == 0);
  }
}

TEST_CASE("checkpoint retention: keep, and everything from the newest round every peer has") {
  using R = std::vector<std::int64_t>;
  const R rounds = {9, 19, 29, 39, 49};
  // Without what the others have (INT64_MAX): the newest `keep`.
  CHECK(checkpointsToDelete(rounds, 2, INT64_MAX) == R{9, 19, 29});
  CHECK(checkpointsToDelete(rounds, 1, INT64_MAX) == R{9, 19, 29, 39});
  CHECK(checkpointsToDelete(rounds, 9, INT64_MAX).empty());
  // Some peer's newest is not known yet: nothing goes.
  CHECK(checkpointsToDelete(rounds, 1, -1).empty());
  CHECK(checkpointsToDelete(rounds, 1, 5).empty());  // below every round here
  // Every peer has round 19 or later (the newest one at or below 25 is 19): 19 and after stay.
  CHECK(checkpointsToDelete(rounds, 1, 25) == R{9});
  CHECK(checkpointsToDelete(rounds, 1, 29) == R{9, 19});
  CHECK(checkpointsToDelete(rounds, 2, 49) == R{9, 19, 29});
  CHECK(checkpointsToDelete({}, 1, 3).empty());
}

TEST_CASE("checkpoint knowledge: gossip of every peer's newest round, merged by maximum") {
  CheckpointKnowledge a(3), b(3);
  CHECK(a.everyoneHas() == -1);
  CHECK(a.takeUpdates(1024).empty());
  a.learn(0, 9);
  a.learn(0, 19);
  a.learn(0, 9);  // older news: ignored
  auto updates = a.takeUpdates(1024);
  REQUIRE(updates.size() == 1);
  CHECK(updates[0].size() == 12);  // one entry: rank 0 at 19
  CHECK(a.takeUpdates(1024).empty());
  REQUIRE(b.merge(updates[0]).isOk());
  b.learn(1, 29);
  b.learn(2, 19);
  CHECK(b.everyoneHas() == 19);
  // b forwards what it learnt, its own entry and the one from a alike (in messages of 2 entries).
  updates = b.takeUpdates(24);
  REQUIRE(updates.size() == 2);
  for (const auto& u : updates) REQUIRE(a.merge(u).isOk());
  CHECK(a.everyoneHas() == 19);
  // Malformed: a partial entry, a rank out of range, a round below -1; nothing of it applies.
  std::vector<std::uint8_t> bad(13, 0);
  CHECK(a.merge(bad).code() == ErrorCode::kDataLoss);
  std::vector<std::uint8_t> entry(12, 0);
  entry[0] = 7;  // rank 7 of 3
  CHECK(a.merge(entry).code() == ErrorCode::kDataLoss);
  std::fill(entry.begin(), entry.end(), std::uint8_t{0xff});
  entry[0] = 1;
  entry[1] = entry[2] = entry[3] = 0;
  entry[4] = 0xfe;  // round -2
  CHECK(a.merge(entry).code() == ErrorCode::kDataLoss);
  CHECK(a.everyoneHas() == 19);
}

TEST_CASE("checkpoint writer: writes beside the training, in order, and flushes what is pending") {
  const auto c = chocoConfig();
  auto plan = test_util::makePlan(c);
  auto peers = makePeers(*plan);
  const std::string folder = tempFolder("writer") + "/rank-0";
  const auto id = engine::checkpointIdentity(c, *peers[0]);
  std::vector<std::int64_t> written;  // on the writer's thread, read after flush()
  std::vector<engine::PeerState> states;
  {
    engine::CheckpointWriter writer(
        folder, id, 7, 2, [] { return std::int64_t{-1}; },  // nothing known: nothing deleted
        [&](std::int64_t round) { written.push_back(round); });
    for (std::int64_t t = 0; t < 30; ++t) {
      REQUIRE(engine::runLockstep(peers, t, 1).isOk());
      if ((t + 1) % 10 == 0) {
        states.push_back(peers[0]->saveState());
        writer.write(*peers[0]);
      }
    }
    writer.flush();
    CHECK(writer.written() == 3);
    CHECK(written == std::vector<std::int64_t>{9, 19, 29});
    CHECK(engine::checkpointRounds(folder) == std::vector<std::int64_t>{9, 19, 29});
    REQUIRE(engine::runLockstep(peers, 30, 10).isOk());
    states.push_back(peers[0]->saveState());
    writer.write(*peers[0]);  // into the memory of the state written before
    // Destroyed with a write pending or in flight: it is written first.
  }
  CHECK(written == std::vector<std::int64_t>{9, 19, 29, 39});
  CHECK(engine::checkpointRounds(folder) == std::vector<std::int64_t>{9, 19, 29, 39});
  for (const auto& s : states) {
    auto loaded = engine::readCheckpoint(engine::checkpointPath(folder, s.round), id);
    REQUIRE(loaded.isOk());
    CHECK(loaded->incarnation == 7);
    CHECK(loaded->state.model == s.model);
    CHECK(loaded->state.momentum == s.momentum);
    CHECK(loaded->state.algorithm == s.algorithm);
  }
}

TEST_CASE("checkpoint: a file of format 1 (older builds: FNV-1a checksum) is still read") {
  const auto c = chocoConfig();
  auto plan = test_util::makePlan(c);
  auto peers = makePeers(*plan);
  REQUIRE(engine::runLockstep(peers, 0, 12).isOk());
  const std::string folder = tempFolder("format1");
  const auto id = engine::checkpointIdentity(c, *peers[0]);
  const engine::PeerState saved = peers[0]->saveState();
  REQUIRE(engine::writeCheckpoint(folder, id, 4, saved, 2).isOk());
  const std::string path = engine::checkpointPath(folder, saved.round);
  auto bytes = readBytes(path);
  REQUIRE(bytes.size() > 16);
  CHECK(std::string(bytes.data(), 8) == "GVCKPT2\n");
  // The same content as format 1 wrote it: version byte '1', FNV-1a 64 of the bytes before it.
  bytes[6] = '1';
  const std::size_t body = bytes.size() - 8;
  storeLe(reinterpret_cast<std::uint8_t*>(bytes.data()) + body, fnv1a64(bytes.data(), body));
  writeBytes(path, bytes);
  auto loaded = engine::readCheckpoint(path, id);
  REQUIRE(loaded.isOk());
  CHECK(loaded->incarnation == 4);
  CHECK(loaded->state.model == saved.model);
  CHECK(loaded->state.algorithm == saved.algorithm);
  // Its checksum is checked as FNV-1a: one flipped byte is refused.
  bytes[body / 2] ^= 0x40;
  writeBytes(path, bytes);
  const auto torn = engine::readCheckpoint(path, id);
  REQUIRE(!torn.isOk());
  CHECK(torn.status().message().find("checksum mismatch") != std::string::npos);
}

TEST_CASE(
    "checkpoint: robust mixing's trust goes on after a restore; a distrusted neighbour is "
    "quarantined again when it is next mixed") {
  const auto c = test_util::loadYaml(
      "run: { seed: 5, rounds: 60 }\npeers: { count: 5 }\ntopology: { kind: ring }\n"
      "algorithm: { name: choco, consensus_step: 0.3, robust: clip }\n"
      "optimizer: { lr: 0.05, batch_size: 16 }\n"
      "compression: { method: top-k, ratio: 0.1, dense_below: 0 }\n"
      "workload: { name: fashion-mnist-mlp, hidden: [16], eval_every: 0, eval_samples: 200 }\n",
      "checkpoint_trust_test.yaml");
  auto plan = test_util::makePlan(c);
  auto reference = makePeers(*plan);
  REQUIRE(engine::runLockstep(reference, 0, 60).isOk());
  auto first = makePeers(*plan);
  REQUIRE(engine::runLockstep(first, 0, 30).isOk());
  const std::string dir = tempFolder("trust");
  const auto trustOf = [](const PeerCore& p) {
    std::vector<std::tuple<int, std::uint64_t, std::uint64_t, double, double, bool>> out;
    for (const auto& t : p.algorithm().robustMixer()->trust())
      out.emplace_back(t.neighbour, t.roundsMixed, t.roundsClipped, t.clipSum, t.score,
                       t.distrusted);
    return out;
  };
  for (const auto& p : first) {
    engine::PeerState s = p->saveState();
    REQUIRE(s.trust.size() == 2);
    CHECK(s.trust[0].roundsMixed == 30);
    if (p->rank() == 0) {
      // As if neighbour 1 had been distrusted, and a file naming a peer that is no neighbour.
      s.trust[0].distrusted = true;
      s.trust[0].score = 0.75;
      s.trust.push_back({.neighbour = 3, .roundsMixed = 40, .score = 0.9, .distrusted = true});
    }
    REQUIRE(engine::writeCheckpoint(engine::checkpointFolder(c, dir, p->rank()),
                                    engine::checkpointIdentity(c, *p), 1, s, 2)
                .isOk());
  }
  auto resumed = makePeers(*plan);
  for (auto& p : resumed) {
    auto loaded = engine::latestCheckpoint(engine::checkpointFolder(c, dir, p->rank()),
                                           engine::checkpointIdentity(c, *p));
    REQUIRE(loaded.has_value());
    CHECK(loaded->state.trust.size() == (p->rank() == 0 ? 3u : 2u));
    REQUIRE(p->restoreState(loaded->state).isOk());
  }
  const auto restored = resumed[0]->algorithm().robustMixer()->trust();
  REQUIRE(restored.size() == 2);  // 3 is not its neighbour
  CHECK(restored[0].neighbour == 1);
  CHECK(restored[0].distrusted);
  CHECK(restored[0].score == 0.75);
  CHECK(trustOf(*resumed[2]) == trustOf(*first[2]));  // bit for bit
  REQUIRE(engine::runLockstep(resumed, 30, 1).isOk());
  // Peer 0 quarantined 1 again in its first mix, naming the restart.
  const auto quarantined = resumed[0]->takeQuarantined();
  REQUIRE(quarantined.size() == 1);
  CHECK(quarantined[0].first == 1);
  CHECK_THAT(quarantined[0].second, Catch::Contains("quarantined again: this peer had "
                                                    "quarantined it before its restart"));
  // The others go on as the uninterrupted run.
  REQUIRE(engine::runLockstep(resumed, 31, 29).isOk());
  CHECK(trustOf(*resumed[3]) == trustOf(*reference[3]));
}
