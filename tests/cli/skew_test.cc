// Version and config skew between real peer processes (issue 16, docs/security.md): a neighbour
// whose envelope version differs (GRAPEVINE_TEST_ENVELOPE_VERSION, a test-only override: see
// runtime/engine/envelope.h) or whose transport.max_frame_bytes differs fails the bootstrap on both
// sides as soon as the hellos cross, long before peers.connect_timeout, and the error names the
// protocol or the key.
#include <catch2/catch.hpp>
#include <fstream>
#include <string>

#include "tests/test_util/cli.h"
#include "tests/test_util/ports.h"

namespace {

using grapevine::test_util::grapevineBin;
using grapevine::test_util::readFile;

constexpr double kConnectTimeout = 30;

struct PeerExit {
  int rc = -1;
  double seconds = 0;  // from the process's start to its exit
  std::string err;
};

// Starts ranks 0 and 1 together (rank 0 dials, retrying until rank 1 listens), `rank1Prefix` in
// front of rank 1's command (environment) and `rank1Sets` after it; waits for both exits.
std::vector<PeerExit> runPair(const std::string& dir, const std::string& rank1Prefix,
                              const std::string& rank1Sets) {
  const int port = grapevine::test_util::freeBasePort(4);
  std::ofstream(dir + "/pair.yaml") << "run: { rounds: 20 }\n"
                                       "peers: { count: 2, base_port: "
                                    << port << ", connect_timeout: " << kConnectTimeout
                                    << " }\n"
                                       "topology: { kind: complete }\n"
                                       "transport: { backend: tcp }\n"
                                       "workload: { name: consensus, dim: 16 }\n"
                                       "algorithm: { name: dsgd, round_timeout: 5 }\n";
  std::string cmd;
  for (int r = 0; r < 2; ++r) {
    const std::string rr = dir + "/r" + std::to_string(r);
    cmd += "(s=$(date +%s%N); " + (r == 1 ? rank1Prefix + " " : std::string()) + grapevineBin() +
           " peer " + dir + "/pair.yaml --rank " + std::to_string(r) + " --out " + dir + "/out" +
           (r == 1 ? " " + rank1Sets : std::string()) + " > /dev/null 2> " + rr +
           ".err; echo $? > " + rr + ".rc; echo $(( $(date +%s%N) - s )) > " + rr + ".ns) & ";
  }
  cmd += "wait";
  REQUIRE(std::system(cmd.c_str()) == 0);
  std::vector<PeerExit> out(2);
  for (int r = 0; r < 2; ++r) {
    const std::string rr = dir + "/r" + std::to_string(r);
    out[r].rc = std::stoi(readFile(rr + ".rc"));
    out[r].seconds = std::stod(readFile(rr + ".ns")) / 1e9;
    out[r].err = readFile(rr + ".err");
  }
  return out;
}

}  // namespace

TEST_CASE("a neighbour with another envelope version fails the bootstrap fast on both sides",
          "[skew]") {
  const std::string dir = grapevine::test_util::freshDir("skew_test_envelope");
  const auto peers = runPair(dir, "GRAPEVINE_TEST_ENVELOPE_VERSION=7", "");
  for (int r = 0; r < 2; ++r) {
    INFO("rank " << r << " (" << peers[r].seconds << " s): " << peers[r].err);
    CHECK(peers[r].rc != 0);
    CHECK(peers[r].seconds < kConnectTimeout);  // the mismatch, not the deadline, ended it
    CHECK(peers[r].err.find("envelope protocol version mismatch with peer " +
                            std::to_string(1 - r)) != std::string::npos);
    CHECK(peers[r].err.find(r == 0 ? "ours 1, theirs 7" : "ours 7, theirs 1") != std::string::npos);
    CHECK(peers[r].err.find("builds: ours ") != std::string::npos);
  }
}

TEST_CASE(
    "a neighbour with another transport.max_frame_bytes fails the bootstrap fast on both sides",
    "[skew]") {
  const std::string dir = grapevine::test_util::freshDir("skew_test_frame_bytes");
  const auto peers = runPair(dir, "", "--set transport.max_frame_bytes=1048576");
  for (int r = 0; r < 2; ++r) {
    INFO("rank " << r << " (" << peers[r].seconds << " s): " << peers[r].err);
    CHECK(peers[r].rc != 0);
    CHECK(peers[r].seconds < kConnectTimeout);
    CHECK(peers[r].err.find("config mismatch with peer " + std::to_string(1 - r) +
                            ": part 'transport.max_frame_bytes' differs") != std::string::npos);
  }
}
