// The bench references: parsing the native tools' output (fixed samples, as the Debian 12 versions
// print it), and one short live run of each tool on loopback when it is installed (otherwise that
// case alone skips; its own ctest entry, transport_native_reference_live, reports it).
#include "runtime/transport/ofi/native_reference.h"

#include <catch2/catch.hpp>
#include <cstdio>
#include <cstdlib>

#include "runtime/transport/ucx/native_reference.h"
#include "tests/test_util/skip.h"

using namespace grapevine;
using namespace grapevine::transport;

namespace {

const char* kPerftestLatency =
    R"(+--------------+--------------+------------------------------+---------------------+-----------------------+
|              |              |       overhead (usec)        |   bandwidth (MB/s)  |  message rate (msg/s) |
+--------------+--------------+----------+---------+---------+----------+----------+-----------+-----------+
|    Stage     | # iterations | 50.0%ile | average | overall |  average |  overall |  average  |  overall  |
+--------------+--------------+----------+---------+---------+----------+----------+-----------+-----------+
[thread 0]               162      9.844  3155.617  3155.617        0.00       0.00         317         317
Final:                  2000      9.969   660.475  1468.440        0.01       0.01        1514         681
)";

const char* kPerftestBandwidth =
    R"(|    Stage     | # iterations | 50.0%ile | average | overall |  average |  overall |  average  |  overall  |
+--------------+--------------+----------+---------+---------+----------+----------+-----------+-----------+
Final:                    50      3.885 18950.319 18950.319      211.08     211.08          53          53
)";

const char* kPingpong =
    R"(bytes   #sent   #ack     total       time     MB/sec    usec/xfer   Mxfers/sec
4m      20      =20      160m        6.02s     27.87  150499.45       0.00
)";

bool haveTool(const char* name) {
  const std::string cmd = std::string("command -v ") + name + " >/dev/null 2>&1";
  return std::system(cmd.c_str()) == 0;
}

}  // namespace

TEST_CASE("ucx_perftest output: latency is the overall column of the Final row") {
  auto r = ucx::parsePerftestOutput(kPerftestLatency, ucx::PerftestKind::kTagLatency);
  REQUIRE(r.isOk());
  CHECK(r->latencyUs == Approx(1468.440));
  auto b = ucx::parsePerftestOutput(kPerftestBandwidth, ucx::PerftestKind::kTagBandwidth);
  REQUIRE(b.isOk());
  CHECK(b->bytesPerSecond == Approx(211.08 * 1024 * 1024));
  CHECK(ucx::parsePerftestOutput("no such row", ucx::PerftestKind::kTagLatency).status().code() ==
        ErrorCode::kDataLoss);
  CHECK(ucx::parsePerftestOutput("Final: 12 x", ucx::PerftestKind::kTagLatency).status().code() ==
        ErrorCode::kDataLoss);
}

TEST_CASE("fi_pingpong output: MB/sec and usec/xfer of the result row") {
  auto r = ofi::parsePingpongOutput(kPingpong);
  REQUIRE(r.isOk());
  CHECK(r->latencyUs == Approx(150499.45));
  CHECK(r->bytesPerSecond == Approx(27.87e6));
  CHECK(ofi::parsePingpongOutput("bytes #sent\n").status().code() == ErrorCode::kDataLoss);
}

TEST_CASE("live: ucx_perftest and fi_pingpong on loopback give positive numbers", "[live]") {
  if (!haveTool("ucx_perftest") || !haveTool("fi_pingpong")) {
    GV_SKIP_MISSING("tools",
                    "ucx_perftest or fi_pingpong not installed (ucx-utils, libfabric-bin)");
  }
  auto lat = ucx::runPerftest(ucx::PerftestKind::kTagLatency, 8, "tcp", 500, 30);
  INFO(lat.status().toString());
  REQUIRE(lat.isOk());
  CHECK(lat->latencyUs > 0);
  auto bw = ucx::runPerftest(ucx::PerftestKind::kTagBandwidth, 1 << 20, "tcp", 20, 30);
  INFO(bw.status().toString());
  REQUIRE(bw.isOk());
  CHECK(bw->bytesPerSecond > 1e6);
  auto pp = ofi::runPingpong(4096, "tcp;ofi_rxm", 50, 30);
  INFO(pp.status().toString());
  REQUIRE(pp.isOk());
  CHECK(pp->latencyUs > 0);
  CHECK(pp->bytesPerSecond > 0);
  std::printf(
      "ucx_perftest tcp: tag_lat 8 B %.1f us, tag_bw 1 MiB %.3f GB/s; fi_pingpong 4 KiB %.1f us\n",
      lat->latencyUs, bw->bytesPerSecond / 1e9, pp->latencyUs);
}
