// The launcher's progress line from the peers' records (runtime/launch/progress.h): a program's
// records may carry "loss": null (step() without loss=) and a test loss instead of an accuracy.
#include <catch2/catch.hpp>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "runtime/launch/progress.h"
#include "tests/test_util/cli.h"

namespace {

grapevine::launch::PeerProcess peerWithRecords(const std::string& dir, int rank,
                                               const std::vector<std::string>& lines) {
  grapevine::launch::PeerProcess p;
  p.rank = rank;
  p.jsonl = dir + "/peer-" + std::to_string(rank) + ".jsonl";
  std::ofstream out(p.jsonl);
  for (const auto& l : lines) out << l << "\n";
  return p;
}

}  // namespace

TEST_CASE("a record with a null loss and a reported test loss") {
  const std::string dir = grapevine::test_util::freshDir("progress_line_test_null");
  std::vector<grapevine::launch::PeerProcess> peers;
  peers.push_back(peerWithRecords(dir, 0,
                                  {R"({"round":4,"loss":null,"bytes_sent":2000000})",
                                   R"({"round":5,"loss":null,"test_loss":2.5})"}));
  peers.push_back(peerWithRecords(dir, 1, {R"({"round":6,"loss":null,"test_loss":2.25})"}));
  std::string line;
  REQUIRE_NOTHROW(line = grapevine::launch::progressLine(peers, 1.0, 100, 0));
  INFO(line);
  CHECK(line.find("round 6/100") != std::string::npos);
  CHECK(line.find("loss n/a") != std::string::npos);
  CHECK(line.find("test loss 2.25-2.5") != std::string::npos);
}

TEST_CASE("losses average over the peers that have one; accuracy wins over test loss") {
  const std::string dir = grapevine::test_util::freshDir("progress_line_test_mixed");
  std::vector<grapevine::launch::PeerProcess> peers;
  peers.push_back(peerWithRecords(dir, 0, {R"({"round":2,"loss":1.0,"test_accuracy":0.5})"}));
  peers.push_back(peerWithRecords(dir, 1, {R"({"round":2,"loss":null,"test_loss":3})"}));
  peers.push_back(
      peerWithRecords(dir, 2, {R"({"round":"x"})", R"([1,2])", R"({"round":2,"loss":3.0})"}));
  const std::string line = grapevine::launch::progressLine(peers, 1.0, 10, 0);
  INFO(line);
  CHECK(line.find("loss 2.0000") != std::string::npos);
  CHECK(line.find("acc 50.0-50.0%") != std::string::npos);
}
