// The installed package, as a user meets it. This test runs cmake itself:
//   1. `cmake --install <this build> --prefix <fresh folder>`, then checks that only the API's
//      shared library (exporting only Grapevine's symbols), the public headers and the CMake
//      package were installed;
//   2. configures and builds examples/cpp and examples/c (the examples themselves, not copies) out
//      of tree against that prefix with find_package(Grapevine), the C one with the C compiler
//      alone, -std=c99 -pedantic;
//   3. runs each example as 2 peers (ranks 0 and 1) over tcp on 127.0.0.1 (free ports), with the
//      example's own config (2 peers, D-PSGD, no compression), and checks that both exit 0, that
//      finalize(average=true) left both holding identical values equal to the average of their
//      models, and that each wrote peer-<rank>.jsonl and peer-<rank>.final.json.
#include <algorithm>
#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "runtime/common/subprocess.h"
#include "tests/test_util/cli.h"
#include "tests/test_util/ports.h"

namespace fs = std::filesystem;
using grapevine::test_util::freshDir;

namespace {

const std::string kSource = GRAPEVINE_SOURCE_DIR;
// CMAKE_INSTALL_LIBDIR: "lib", or e.g. "lib/x86_64-linux-gnu" for a build configured for /usr.
const std::string kLib = GRAPEVINE_INSTALL_LIBDIR;

std::string slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// Runs argv with stdout and stderr into `log`; its exit code (-1: killed by a signal).
int run(const std::vector<std::string>& argv, const std::string& log) {
  grapevine::SpawnOptions spawn;
  spawn.argv = argv;
  spawn.out = grapevine::ChildStream::file(log);
  spawn.err = grapevine::ChildStream::sameAsStdout();
  auto child = grapevine::Subprocess::spawn(spawn);
  REQUIRE(child.isOk());
  return grapevine::exitCode(child.value().wait());
}

// Installs this build into a fresh prefix, once per process; the prefix.
const std::string& installedPrefix() {
  static const std::string prefix = [] {
    const std::string dir = freshDir("install_test/prefix");
    const std::string log = std::string(GRAPEVINE_BINARY_DIR) + "/install_test/install.log";
    const int rc =
        run({GRAPEVINE_CMAKE_COMMAND, "--install", GRAPEVINE_BINARY_DIR, "--prefix", dir}, log);
    INFO(slurp(log));
    REQUIRE(rc == 0);
    return dir;
  }();
  return prefix;
}

// The numbers after "label:" on the line of `log` that starts with it.
std::vector<double> valuesAfter(const std::string& log, const std::string& label) {
  std::istringstream lines(log);
  std::string line;
  while (std::getline(lines, line)) {
    if (line.rfind(label + ":", 0) != 0) continue;
    std::istringstream values(line.substr(label.size() + 1));
    std::vector<double> out;
    double v;
    while (values >> v) out.push_back(v);
    return out;
  }
  return {};
}

// Builds examples/<lang> against the installed package and runs it as 2 peers over tcp.
void buildAndRunExample(const std::string& lang) {
  const std::string prefix = installedPrefix();
  const std::string dir = freshDir("install_test/" + lang);
  const std::string example = kSource + "/examples/" + lang;
  // The lines of examples/<lang>/README.md, with this build's generator and compilers.
  {
    const std::string log = dir + "/configure.log";
    std::vector<std::string> configure = {GRAPEVINE_CMAKE_COMMAND,
                                          "-S",
                                          example,
                                          "-B",
                                          dir + "/build",
                                          "-G",
                                          GRAPEVINE_CMAKE_GENERATOR,
                                          "-DCMAKE_PREFIX_PATH=" + prefix,
                                          "-DCMAKE_C_COMPILER=" GRAPEVINE_C_COMPILER,
                                          "-DCMAKE_CXX_COMPILER=" GRAPEVINE_CXX_COMPILER};
    // A sanitized libgrapevine.so needs the sanitizer's runtime first in the program.
    const std::string sanitize = GRAPEVINE_SANITIZE;
    if (!sanitize.empty()) {
      configure.push_back("-DCMAKE_EXE_LINKER_FLAGS=-fsanitize=" + sanitize);
    }
    const int rc = run(configure, log);
    INFO(slurp(log));
    REQUIRE(rc == 0);
    // It found the installed package, not a build tree or another installation.
    CHECK(slurp(dir + "/build/CMakeCache.txt")
              .find("Grapevine_DIR:PATH=" + prefix + "/" + kLib + "/cmake/Grapevine") !=
          std::string::npos);
  }
  {
    const std::string log = dir + "/build.log";
    const int rc = run({GRAPEVINE_CMAKE_COMMAND, "--build", dir + "/build", "--verbose"}, log);
    const std::string text = slurp(log);
    INFO(text);
    REQUIRE(rc == 0);
    if (lang == "c") {
      // Compiled as C99 by the C compiler, with -pedantic (the header is plain C).
      CHECK(text.find("-std=c99") != std::string::npos);
      CHECK(text.find("-pedantic") != std::string::npos);
      CHECK(text.find(GRAPEVINE_C_COMPILER) != std::string::npos);
    }
  }

  const std::string program = dir + "/build/example_" + lang;
  const std::string out = dir + "/out";
  const int port = grapevine::test_util::freeBasePort(2);
  INFO("peers.base_port=" << port);
  std::vector<grapevine::Subprocess> peers;
  for (int rank = 0; rank < 2; ++rank) {
    grapevine::SpawnOptions spawn;
    spawn.argv = {program, example + "/ring2.yaml", "peers.base_port=" + std::to_string(port),
                  "output.dir=" + out};
    spawn.setEnv = {{"GRAPEVINE_RANK", std::to_string(rank)}};
    spawn.out = grapevine::ChildStream::file(dir + "/peer" + std::to_string(rank) + ".log");
    spawn.err = grapevine::ChildStream::sameAsStdout();
    auto child = grapevine::Subprocess::spawn(spawn);
    REQUIRE(child.isOk());
    peers.push_back(std::move(child.value()));
  }
  std::vector<std::string> logs;
  std::vector<int> exits;
  for (auto& p : peers) exits.push_back(grapevine::exitCode(p.wait()));
  for (int rank = 0; rank < 2; ++rank) {
    logs.push_back(slurp(dir + "/peer" + std::to_string(rank) + ".log"));
  }
  INFO("rank 0:\n" << logs[0] << "rank 1:\n" << logs[1]);
  CHECK(exits[0] == 0);
  CHECK(exits[1] == 0);

  const std::vector<double> before0 = valuesAfter(logs[0], "before finalize");
  const std::vector<double> before1 = valuesAfter(logs[1], "before finalize");
  const std::vector<double> after0 = valuesAfter(logs[0], "after finalize");
  const std::vector<double> after1 = valuesAfter(logs[1], "after finalize");
  constexpr std::size_t kParameters = 9;  // the examples' two tensors: 6 + 3
  REQUIRE(before0.size() == kParameters);
  REQUIRE(before1.size() == kParameters);
  REQUIRE(after0.size() == kParameters);
  REQUIRE(after1.size() == kParameters);
  // The peers' own losses keep them apart (the config's mixing weight is 0.25), so the averaging
  // in finalize has work to do.
  CHECK(before0 != before1);
  for (std::size_t k = 0; k < kParameters; ++k) {
    INFO("parameter " << k);
    CHECK(after0[k] == after1[k]);  // identical, not only close (printed with 9 digits: exact)
    // finalize averages to a relative tolerance of 1e-6 (grapevine.hpp).
    CHECK(after0[k] == Approx((before0[k] + before1[k]) / 2).epsilon(1e-6).margin(1e-6));
  }
  for (int rank = 0; rank < 2; ++rank) {
    const std::string r = std::to_string(rank);
    CHECK(fs::is_regular_file(out + "/peer-" + r + ".jsonl"));
    CHECK(fs::is_regular_file(out + "/peer-" + r + ".final.json"));
    // The example's report() reached the final record.
    CHECK(slurp(out + "/peer-" + r + ".jsonl").find("\"distance_to_optimum\"") !=
          std::string::npos);
  }
}

}  // namespace

TEST_CASE("cmake --install: the shared library, the public headers and the CMake package only") {
  const std::string prefix = installedPrefix();
  std::set<std::string> files;
  for (const auto& entry : fs::recursive_directory_iterator(prefix)) {
    if (!entry.is_directory()) files.insert(entry.path().lexically_relative(prefix).string());
  }
  std::string listing;
  for (const auto& f : files) listing += f + "\n";
  INFO("installed:\n" << listing);

  // Headers: exactly the files of include/grapevine/, nothing from the internal tree.
  std::set<std::string> publicHeaders;
  for (const auto& entry : fs::directory_iterator(kSource + "/include/grapevine")) {
    publicHeaders.insert("include/grapevine/" + entry.path().filename().string());
  }
  CHECK(publicHeaders.count("include/grapevine/grapevine.h") == 1);
  CHECK(publicHeaders.count("include/grapevine/grapevine.hpp") == 1);
  std::set<std::string> installedHeaders;
  for (const auto& f : files) {
    if (f.rfind("include/", 0) == 0) installedHeaders.insert(f);
  }
  CHECK(installedHeaders == publicHeaders);

  // The library with its soname links, the package, no static (internal) library.
  CHECK(files.count(kLib + "/libgrapevine.so") == 1);
  CHECK(fs::is_symlink(prefix + "/" + kLib + "/libgrapevine.so"));
  CHECK(files.count(kLib + "/cmake/Grapevine/GrapevineConfig.cmake") == 1);
  CHECK(files.count(kLib + "/cmake/Grapevine/GrapevineConfigVersion.cmake") == 1);
  CHECK(files.count(kLib + "/cmake/Grapevine/GrapevineTargets.cmake") == 1);
  CHECK(files.count("bin/grapevine") == 1);
  // The installed CLI runs from the prefix and validates the examples' config.
  CHECK(run({prefix + "/bin/grapevine", "validate", kSource + "/examples/cpp/ring2.yaml"},
            std::string(GRAPEVINE_BINARY_DIR) + "/install_test/validate.log") == 0);
  for (const auto& f : files) {
    INFO(f);
    CHECK(fs::path(f).extension() != ".a");
  }

  // Exported symbols: every call of grapevine.h, and otherwise only the public C++ classes
  // (grapevine::Peer, grapevine::Error: capitalised names); nothing of an internal namespace
  // (grapevine::engine::..., lowercase) or of a library linked in.
  const std::string symbolFile = std::string(GRAPEVINE_BINARY_DIR) + "/install_test/symbols.txt";
  REQUIRE(run({"nm", "-D", "--defined-only", "-C", "--format=just-symbols",
               prefix + "/" + kLib + "/libgrapevine.so"},
              symbolFile) == 0);
  std::set<std::string> exported;
  {
    std::istringstream lines(slurp(symbolFile));
    std::string line;
    while (std::getline(lines, line)) exported.insert(line);
  }
  const std::regex cppApi(R"(^((typeinfo|typeinfo name|vtable) for )?grapevine::[A-Z]\w*\b.*)");
  const std::regex internal(R"(grapevine::[a-z_]+::)");
  const std::regex cApi(R"(^grapevine_[a-z_]+$)");
  int cppCount = 0;
  for (const auto& name : exported) {
    INFO("exported: " << name);
    const bool isCpp = std::regex_match(name, cppApi) && !std::regex_search(name, internal);
    CHECK((std::regex_match(name, cApi) || isCpp));
    cppCount += isCpp;
  }
  CHECK(cppCount > 0);  // grapevine::Peer's members
  const std::string header = slurp(kSource + "/include/grapevine/grapevine.h");
  const std::regex declared(R"(GRAPEVINE_C_EXPORT[^;(]*\b(grapevine_[a-z_]+)\()");
  int cCount = 0;
  for (auto it = std::sregex_iterator(header.begin(), header.end(), declared);
       it != std::sregex_iterator(); ++it) {
    INFO("declared in grapevine.h: " << (*it)[1]);
    CHECK(exported.count((*it)[1]) == 1);
    ++cCount;
  }
  CHECK(cCount >= 30);
}

TEST_CASE(
    "examples/cpp: find_package(Grapevine) out of tree, 2 peers over tcp, finalize averages") {
  buildAndRunExample("cpp");
}

TEST_CASE("examples/c: the C API from C99 out of tree, 2 peers over tcp, finalize averages") {
  buildAndRunExample("c");
}
