// The process driver and what it writes: when a round gets a record, checked writes (a full disk is
// an error, not silence), the output folder and bootstrap failure paths, and two peers of a real
// run (one thread each, over TCP on localhost) with their records and final files.
#include "runtime/engine/driver.h"

#include <sys/resource.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <csignal>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "runtime/config/loader.h"
#include "runtime/engine/records.h"
#include "runtime/engine/summary.h"
#include "tests/test_util/config.h"
#include "tests/test_util/skip.h"

using namespace grapevine;

namespace {

config::Config loadYaml(const std::string& yaml) {
  return test_util::loadYaml(yaml, "driver_test.yaml");
}

using test_util::makePlan;

// Two peers exchanging full models (D-PSGD) on the consensus workload: quick, and every round
// needs the other peer's message.
std::string twoPeers(int basePort, int rounds) {
  return "run: { rounds: " + std::to_string(rounds) + " }\n" +
         "peers: { count: 2, host: 127.0.0.1, base_port: " + std::to_string(basePort) +
         ", connect_timeout: 1.0 }\n"
         "topology: { kind: complete }\n"
         "transport: { backend: tcp }\n"
         "algorithm: { name: dsgd }\n"
         "optimizer: { lr: 0.0, momentum: 0.0, nesterov: false }\n"
         "workload: { name: consensus, dim: 16, eval_every: 15 }\n"
         "output: { log_every: 10 }\n";
}

std::string freshDir(const std::string& name) {
  const std::string dir = std::string(GRAPEVINE_BINARY_DIR) + "/driver_test_" + name;
  std::filesystem::remove_all(dir);
  return dir;
}

std::vector<nlohmann::json> readLines(const std::string& path) {
  std::ifstream in(path);
  std::vector<nlohmann::json> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(nlohmann::json::parse(line));
  return lines;
}

}  // namespace

TEST_CASE("a round gets a record every log_every rounds, at the last round, and at each event") {
  const auto c = loadYaml(
      "run: { rounds: 25 }\npeers: { count: 2 }\ntopology: { kind: complete }\n"
      "workload: { name: consensus, dim: 4, eval_every: 20 }\noutput: { log_every: 10 }\n");
  std::vector<std::int64_t> logged, evaluated;
  for (std::int64_t r = 0; r < 25; ++r) {
    const auto report = engine::roundReport(c, r);
    if (report.log) logged.push_back(r);
    if (report.evaluate) evaluated.push_back(r);
  }
  CHECK(logged == std::vector<std::int64_t>{9, 19, 24});
  CHECK(evaluated == std::vector<std::int64_t>{19});
  const auto quiet = engine::roundReport(c, 3);
  CHECK_FALSE(quiet.due({}, {}));
  CHECK(quiet.due({1}, {}));  // a suspect
  CHECK(quiet.due({}, {1}));  // a death

  auto never = c;
  never.workload.evalEvery = 0;
  for (std::int64_t r = 0; r < 25; ++r) CHECK_FALSE(engine::roundReport(never, r).evaluate);
}

TEST_CASE("a write that does not reach the file is an error, not silence") {
  // /dev/full opens like a file and fails every write (ENOSPC): a full disk.
  if (!std::filesystem::exists("/dev/full")) {
    GV_SKIP("no /dev/full here");
  }
  const nlohmann::json j = {{"rank", 0}, {"finished", true}};
  CHECK_FALSE(engine::writeJsonFile("/dev/full", j).isOk());
  CHECK_FALSE(engine::writeModel("/dev/full", std::vector<float>(4, 1.0f)).isOk());
  engine::RecordWriter records;
  REQUIRE(records.open("/dev/full").isOk());
  CHECK_FALSE(records.write(j).isOk());

  const std::string dir = freshDir("writes");
  CHECK_FALSE(engine::writeJsonFile(dir + "/missing/x.json", j).isOk());
  std::filesystem::create_directories(dir);
  REQUIRE(engine::writeJsonFile(dir + "/x.json", j).isOk());
  std::ifstream in(dir + "/x.json");
  CHECK(nlohmann::json::parse(in) == j);
}

TEST_CASE("a write that fails halfway leaves the previous file whole (atomic output files)") {
  // A file size limit makes the write fail after a few bytes (EFBIG; SIGXFSZ ignored), as a full
  // disk or a crash in the middle would: the old summary / model must still be there, unchanged,
  // and no temporary file may be left beside it.
  const std::string dir = freshDir("atomic");
  std::filesystem::create_directories(dir);
  const nlohmann::json old = {{"rank", 0}, {"finished", true}};
  REQUIRE(engine::writeJsonFile(dir + "/summary.json", old).isOk());
  REQUIRE(engine::writeModel(dir + "/model-0.bin", std::vector<float>(4, 2.0f)).isOk());
  nlohmann::json big = old;
  big["pad"] = std::string(64 * 1024, 'x');
  rlimit saved{};
  REQUIRE(getrlimit(RLIMIT_FSIZE, &saved) == 0);
  auto* savedHandler = std::signal(SIGXFSZ, SIG_IGN);
  rlimit tiny = saved;
  tiny.rlim_cur = 4096;
  REQUIRE(setrlimit(RLIMIT_FSIZE, &tiny) == 0);
  const Status json = engine::writeJsonFile(dir + "/summary.json", big);
  const Status model = engine::writeModel(dir + "/model-0.bin", std::vector<float>(100000, 3.0f));
  setrlimit(RLIMIT_FSIZE, &saved);
  std::signal(SIGXFSZ, savedHandler);
  INFO(json.toString() << " / " << model.toString());
  CHECK_FALSE(json.isOk());
  CHECK_FALSE(model.isOk());
  std::ifstream in(dir + "/summary.json");
  CHECK(nlohmann::json::parse(in) == old);
  auto back = engine::readModel(dir + "/model-0.bin", 4);
  REQUIRE(back.isOk());
  CHECK(*back == std::vector<float>(4, 2.0f));
  int files = 0;
  for ([[maybe_unused]] const auto& e : std::filesystem::directory_iterator(dir)) ++files;
  CHECK(files == 2);
}

TEST_CASE("model files: checksummed, bounded by the expected size, older format still read") {
  const std::string dir = freshDir("model_files");
  std::filesystem::create_directories(dir);
  const std::string path = dir + "/model-0.bin";
  const std::vector<float> x = {1.5f, -2.0f, 3.25f, 0.0f, 7.0f};
  REQUIRE(engine::writeModel(path, x).isOk());
  std::string bytes;
  {
    std::ifstream in(path, std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(in), {});
  }
  REQUIRE(bytes.size() == 16 + 4 * x.size() + 8);
  CHECK(bytes.substr(0, 8) == "GVMODEL2");
  REQUIRE(engine::readModel(path, x.size()).isOk());
  CHECK(*engine::readModel(path, x.size()) == x);
  const auto refused = [&](const std::string& content, std::size_t expected, const char* why) {
    INFO(why);
    std::ofstream(path, std::ios::binary | std::ios::trunc) << content;
    const auto r = engine::readModel(path, expected);
    REQUIRE_FALSE(r.isOk());
    CHECK_THAT(r.status().message(), Catch::Contains(why));
  };
  std::string flipped = bytes;
  flipped[20] ^= 0x01;  // 4 bytes changed made summarize report a loss of 6.8e75 before
  refused(flipped, x.size(), "checksum");
  // A forged parameter count (final.json's model_size) allocates nothing: the file's own size
  // bounds the read.
  refused(bytes, std::size_t{1} << 40, "has 5 parameters, expected");
  refused(bytes.substr(0, bytes.size() - 3), x.size(), "truncated");
  // A count of 2^62 in the file and in final.json: 4 x 2^62 wraps to 0, and a 24-byte file would
  // pass a size check that multiplies first; it must not allocate 2^62 floats.
  std::string forged = bytes.substr(0, 16) + bytes.substr(bytes.size() - 8);
  const std::uint64_t huge = std::uint64_t{1} << 62;
  std::memcpy(forged.data() + 8, &huge, 8);
  refused(forged, static_cast<std::size_t>(huge), "truncated");
  // Format 1 (older builds): no checksum, still read.
  std::string v1 = bytes.substr(0, bytes.size() - 8);
  v1[7] = '1';
  std::ofstream(path, std::ios::binary | std::ios::trunc) << v1;
  REQUIRE(engine::readModel(path, x.size()).isOk());
  CHECK(*engine::readModel(path, x.size()) == x);
  std::filesystem::remove(path);
  std::filesystem::create_directory(path);
  CHECK_THAT(engine::readModel(path, x.size()).status().message(), Catch::Contains("directory"));
}

TEST_CASE("a records write that fails says why (ENOSPC, not only 'cannot write')") {
  engine::RecordWriter w;
  REQUIRE(w.open("/dev/full").isOk());
  const Status st = w.write(nlohmann::json{{"round", 0}});
  REQUIRE_FALSE(st.isOk());
  CHECK_THAT(st.message(), Catch::Contains("cannot write /dev/full: No space left on device"));
}

TEST_CASE("a peer process whose output folder cannot be made names the folder") {
  const auto plan = makePlan(loadYaml(twoPeers(31400, 5)));
  engine::PeerRunOptions o;
  o.outDir = "/dev/null/out";  // below a file: create_directories fails
  const Status st = engine::runPeerProcess(*plan, o);
  INFO(st.toString());
  REQUIRE_FALSE(st.isOk());
  CHECK(st.message().find("cannot create /dev/null/out") != std::string::npos);
}

TEST_CASE("a peer process whose neighbour never comes up fails its bootstrap and shuts down") {
  const auto plan = makePlan(loadYaml(twoPeers(31410, 5)));
  engine::PeerRunOptions o;
  o.outDir = freshDir("lonely");
  const auto start = std::chrono::steady_clock::now();
  const Status st = engine::runPeerProcess(*plan, o);  // peer 1 is never started
  const double took =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  INFO(st.toString());
  CHECK_FALSE(st.isOk());
  CHECK(took < 30.0);  // the connect timeout is 1 s; shutting down must not hang
}

TEST_CASE("two peer processes over TCP run every round and write records and final files") {
  const int rounds = 30;
  const auto plan = makePlan(loadYaml(twoPeers(31420, rounds)));
  const std::string dir = freshDir("pair");
  Status results[2];
  std::vector<std::thread> peers;
  for (int rank = 0; rank < 2; ++rank) {
    peers.emplace_back([&, rank] {
      engine::PeerRunOptions o;
      o.rank = rank;
      o.outDir = dir;
      results[rank] = engine::runPeerProcess(*plan, o);
    });
  }
  for (auto& t : peers) t.join();
  for (int rank = 0; rank < 2; ++rank) {
    INFO("peer " << rank << ": " << results[rank].toString());
    REQUIRE(results[rank].isOk());
    const std::string stem = dir + "/peer-" + std::to_string(rank);
    const auto lines = readLines(stem + ".jsonl");
    // Logged at 9, 19 and 29 (the last), evaluated at 14 and 29; then the final line.
    std::vector<std::int64_t> recorded;
    for (const auto& l : lines) recorded.push_back(l.at("round").get<std::int64_t>());
    CHECK(recorded == std::vector<std::int64_t>{9, 14, 19, 29, 29});
    for (std::size_t i = 0; i + 1 < lines.size(); ++i) {
      for (const char* key : {"lr", "eval_seconds", "step_seconds", "wait_seconds", "mix_seconds",
                              "bytes_sent", "dropped", "live_degree"}) {
        CHECK(lines[i].contains(key));
      }
      CHECK(lines[i].contains("test_loss") == (i == 1 || i == 3));
      CHECK_FALSE(lines[i].contains("final"));
      // `time` less the evaluations before it (the record's own comes after `time`): round 19's
      // record leaves out round 14's evaluation, round 14's none.
      const double train = lines[i].at("train_seconds").get<double>();
      const double time = lines[i].at("time").get<double>();
      CHECK(train >= 0.0);
      CHECK(train <= time);
      const double before = i >= 2 ? lines[1].at("eval_seconds").get<double>() : 0.0;
      CHECK(train == Approx(time - before).margin(1e-9));
    }
    CHECK(lines.back().at("final") == true);
    CHECK(lines.back().contains("test_loss"));
    CHECK_FALSE(lines.back().contains("eval_seconds"));

    std::ifstream f(stem + ".final.json");
    REQUIRE(f);
    const auto result = nlohmann::json::parse(f);
    CHECK(result.at("finished") == true);
    CHECK(result.at("rounds") == rounds);
    CHECK(result.contains("wall_seconds"));
    CHECK(engine::readModel(dir + "/model-" + std::to_string(rank) + ".bin",
                            result.at("model_size").get<std::size_t>())
              .isOk());
  }
}
