// `grapevine validate` on refused combinations: exit 2 and a message naming the keys and saying
// why (runs build/bin/grapevine, built before this test).
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

namespace {

struct Outcome {
  int exitCode = -1;
  std::string err;
};

// `grapevine COMMAND CONFIG EXTRA`: its exit code and stderr.
Outcome run(const std::string& command, const std::string& config, const std::string& extra) {
  const std::string bin = std::string(GRAPEVINE_BINARY_DIR) + "/bin/grapevine";
  REQUIRE(std::filesystem::exists(bin));
  const auto log = std::filesystem::temp_directory_path() /
                   ("gv_validate_" + std::to_string(::getpid()) + ".log");
  const std::string cmd =
      bin + " " + command + " " + config + " " + extra + " > /dev/null 2> " + log.string();
  const int rc = std::system(cmd.c_str());
  Outcome o;
  if (WIFEXITED(rc)) o.exitCode = WEXITSTATUS(rc);
  std::ifstream in(log);
  std::stringstream ss;
  ss << in.rdbuf();
  o.err = ss.str();
  std::filesystem::remove(log);
  return o;
}

Outcome validate(const std::string& config, const std::string& extra = "") {
  return run("validate", config, extra);
}

const std::string kInvalid = std::string(GRAPEVINE_SOURCE_DIR) + "/tests/config/invalid/";

}  // namespace

TEST_CASE("validate refuses error feedback with choco and deepsqueeze: exit 2, keys and reason") {
  for (const char* name : {"choco_error_feedback.yaml", "deepsqueeze_error_feedback.yaml"}) {
    const Outcome o = validate(kInvalid + name);
    INFO(name << ":\n" << o.err);
    CHECK(o.exitCode == 2);
    CHECK(o.err.find("compression.error_feedback: true cannot be used with algorithm.name:") !=
          std::string::npos);
    CHECK(o.err.find("counts it twice and diverges") != std::string::npos);
  }
  // Turning it off makes the same file valid.
  const Outcome ok =
      validate(kInvalid + "choco_error_feedback.yaml", "--set compression.error_feedback=false");
  INFO(ok.err);
  CHECK(ok.exitCode == 0);
}

TEST_CASE(
    "peer and launch refuse transport.backend inproc (it connects peers in one process only)") {
  const std::string config = std::string(GRAPEVINE_SOURCE_DIR) + "/configs/ring8.yaml";
  for (const std::string command : {"peer", "launch"}) {
    const Outcome o = run(command, config,
                          "--set transport.backend=inproc" +
                              std::string(command == "peer" ? " --rank 0" : " --quiet"));
    INFO(command << ":\n" << o.err);
    CHECK(o.exitCode == 2);
    CHECK(o.err.find("transport.backend is 'inproc', which connects peers inside one process "
                     "only") != std::string::npos);
  }
}

TEST_CASE("validate prints robust mixing: the rule, b, the quarantine score, loss screening") {
  const auto config = std::filesystem::temp_directory_path() /
                      ("gv_validate_robust_" + std::to_string(::getpid()) + ".yaml");
  {
    std::ofstream out(config);
    out << "peers: { count: 8 }\ntopology: { kind: ring }\n"
           "algorithm: { name: choco, robust: clip, robust_quarantine: 0.6, robust_probe: 64 }\n";
  }
  const std::string bin = std::string(GRAPEVINE_BINARY_DIR) + "/bin/grapevine";
  FILE* pipe = ::popen((bin + " validate " + config.string() + " 2>&1").c_str(), "r");
  REQUIRE(pipe != nullptr);
  std::string text;
  char buffer[512];
  while (std::fgets(buffer, sizeof buffer, pipe)) text += buffer;
  CHECK(::pclose(pipe) == 0);
  std::filesystem::remove(config);
  INFO(text);
  CHECK(text.find("  robust       clip, b 1, quarantine at suspicion 0.6, loss screening on 64 "
                  "samples of the own shard\n") != std::string::npos);
}
