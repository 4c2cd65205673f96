// Sweeps: the file format (every error at file:line with the key), the expansion into cells (every
// combination, stable ids that change when the cell's definition changes), and the CLI end to end:
// results.csv / cells.csv contents, resuming (finished cells kept, edited cells re-run), plots
// (their own case and ctest entry, sweep_plot_test: skipped without gnuplot).
#include "runtime/sweep/sweep.h"

#include <sys/wait.h>

#include <catch2/catch.hpp>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <utility>

#include "tests/test_util/ports.h"
#include "tests/test_util/skip.h"

using namespace grapevine;
namespace fs = std::filesystem;

namespace {

std::string readAll(const fs::path& p) {
  std::ifstream in(p);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string diagText(const std::vector<config::Diagnostic>& d) {
  return config::formatDiagnostics(d);
}

bool contains(const std::string& hay, const std::string& needle) {
  return hay.find(needle) != std::string::npos;
}

int run(const std::string& cmd) {
  const int rc = std::system(cmd.c_str());
  return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

std::vector<std::string> lines(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  std::string l;
  while (std::getline(in, l)) out.push_back(l);
  return out;
}

const char* kSweep = R"(name: t
config:
  run: { rounds: 30, seed: 1 }
  peers: { count: 6 }
  topology: { kind: ring }
  algorithm: { name: choco, consensus_step: 0.5 }
  compression: { method: none, dense_below: 16 }
  optimizer: { lr: 0.0, momentum: 0.0, nesterov: false }
  workload: { name: consensus, dim: 512, eval_every: 10 }
set: { network.latency_ms: 2 }
sweep:
  topology.kind: [ring, complete]
  compression:
    - { label: dense, method: none }
    - { label: int8, method: int8, block_size: 64 }
  run.seed: [1, 2]
)";

}  // namespace

TEST_CASE("a sweep file expands into every combination, last axis fastest") {
  std::vector<config::Diagnostic> d;
  auto spec = sweep::parseSweep(kSweep, "t.yaml", &d);
  REQUIRE(spec.isOk());
  CHECK(d.empty());
  REQUIRE(spec->axes.size() == 3);
  CHECK(spec->axes[1].key == "compression");
  CHECK(spec->axes[1].values[1].label == "int8");
  const auto cells = sweep::expand(*spec, "");
  REQUIRE(cells.size() == 8);
  CHECK(cells[0].labels == std::vector<std::string>{"ring", "dense", "1"});
  CHECK(cells[1].labels == std::vector<std::string>{"ring", "dense", "2"});
  CHECK(cells[7].labels == std::vector<std::string>{"complete", "int8", "2"});
  CHECK(cells[3].overrides == std::vector<std::string>{"network.latency_ms=2", "topology.kind=ring",
                                                       "compression.method=int8",
                                                       "compression.block_size=64", "run.seed=2"});
  // A dotted key inside a mapping value is a full config path.
  auto dotted = sweep::parseSweep(
      "config: { peers: { count: 4 } }\nsweep:\n  compression:\n"
      "    - { method: sign, algorithm.consensus_step: 0.1 }\n",
      "d.yaml", nullptr);
  REQUIRE(dotted.isOk());
  CHECK(dotted->axes[0].values[0].sets ==
        std::vector<std::pair<std::string, std::string>>{{"compression.method", "sign"},
                                                         {"algorithm.consensus_step", "0.1"}});
  CHECK(dotted->axes[0].values[0].label == "sign 0.1");
  std::set<std::string> ids;
  for (const auto& c : cells) ids.insert(c.id);
  CHECK(ids.size() == 8);
  CHECK(cells[5].id.rfind("005-", 0) == 0);
  // The id hashes the definition: same input, same ids; another base config, other ids.
  CHECK(sweep::expand(*spec, "")[5].id == cells[5].id);
  CHECK(sweep::expand(*spec, "run: { rounds: 31 }")[5].id != cells[5].id);
}

TEST_CASE("bad sweep files: file:line:col, the key, what was expected") {
  auto errors = [](const std::string& text) {
    std::vector<config::Diagnostic> d;
    auto r = sweep::parseSweep(text, "s.yaml", &d);
    CHECK_FALSE(r.isOk());
    return diagText(d);
  };
  CHECK(contains(errors("base: nope.yaml\nsweep: { run.seed: [1] }\n"),
                 "s.yaml:1:7: error: base: no such file"));
  CHECK(contains(
      errors("config: { peers: { count: 4 } }\nsweep: { topology.knd: [ring] }\n"),
      "s.yaml:2:10: error: sweep.topology.knd: not a config key (did you mean topology.kind?)"));
  CHECK(contains(errors("config: { peers: { count: 4 } }\nsweep: { run.seed: 3 }\n"),
                 "sweep.run.seed: expected a non-empty list of values, found \"3\""));
  CHECK(contains(
      errors("config: { peers: { count: 4 } }\nsweep:\n  compression:\n    - { metod: none }\n"),
      "s.yaml:4:9: error: sweep.compression: compression.metod: not a config key (did you mean "
      "compression.method?)"));
  CHECK(contains(errors("config: { peers: { count: 4 } }\nsweep: { run.seed: [1, 1] }\n"),
                 "two values are both labelled \"1\""));
  CHECK(contains(
      errors("config: { peers: { count: 4 } }\nsweep: { run.seed: [1] }\ntarget_accuracy: 3\n"),
      "s.yaml:3:18: error: target_accuracy: expected a number in (0, 1], found \"3\""));
  CHECK(contains(errors("config: { peers: { count: 4 } }\nsweep: { run.seed: [1] }\nmode: fast\n"),
                 "mode: expected sim or launch"));
  CHECK(contains(errors("config: { peers: { count: 4 } }\nswep: { run.seed: [1] }\n"),
                 "swep: unknown key"));
  CHECK(contains(errors("sweep: { run.seed: [1] }\n"), "base: required"));
  CHECK(contains(errors("[1, 2"), "s.yaml:1:"));
  CHECK(contains(errors("- a\n- b\n"), "expected a mapping"));
}

TEST_CASE("grapevine sweep runs every cell, tabulates and resumes") {
  const fs::path dir = fs::path(GRAPEVINE_BINARY_DIR) / "sweep_cli_scratch";
  fs::remove_all(dir);
  fs::create_directories(dir);
  const fs::path file = dir / "t.yaml";
  std::ofstream(file) << kSweep << "target_accuracy: 0.5\n";
  const std::string bin = GRAPEVINE_BIN;
  const std::string out = (dir / "out").string();
  const std::string cmd = bin + " sweep " + file.string() + " --out " + out +
                          " --jobs 2 --quiet > " + (dir / "stdout.txt").string() + " 2>&1";
  REQUIRE(run(cmd) == 0);
  const std::string first = readAll(dir / "stdout.txt");
  CHECK(contains(first, "8 cells ran, 0 kept, 0 failed"));

  // results.csv: one row per cell and evaluation (3 per cell), with the swept keys as columns.
  const auto results = lines(readAll(fs::path(out) / "results.csv"));
  REQUIRE(results.size() == 1 + 8 * 3);
  CHECK(results[0] ==
        "cell,topology.kind,compression,run.seed,round,sim_time_s,wall_time_s,bytes_sent_per_peer,"
        "train_loss,"
        "test_accuracy,averaged_model_accuracy,consensus_distance,spectral_gap");
  CHECK(contains(results[1], ",ring,dense,1,10,"));
  CHECK(contains(results[3], ",ring,dense,1,30,"));
  // Consensus falls faster on the complete graph (spectral gap 1) than on the ring.
  auto lastField = [](const std::string& row, int fromEnd) {
    std::vector<std::string> f;
    std::stringstream ss(row);
    std::string x;
    while (std::getline(ss, x, ',')) f.push_back(x);
    return std::stod(f[f.size() - static_cast<std::size_t>(fromEnd)]);
  };
  const double ringCons = lastField(results[3], 2), completeCons = lastField(results[3 + 12], 2);
  CHECK(contains(results[3 + 12], ",complete,dense,1,30,"));
  CHECK(completeCons < ringCons * 1e-3);
  CHECK(lastField(results[3], 1) < lastField(results[15], 1));  // spectral gaps

  // Simulated time: 2 ms links, so every round takes more than 2 ms.
  const auto cells = lines(readAll(fs::path(out) / "cells.csv"));
  REQUIRE(cells.size() == 9);
  CHECK(contains(cells[0], "status,rounds,sim_time_s"));
  CHECK(contains(
      cells[0],
      "rounds_to_target,sim_time_to_target_s,wall_time_to_target_s,bytes_to_target_per_peer"));
  for (std::size_t i = 1; i < cells.size(); ++i) CHECK(contains(cells[i], ",done,30,"));
  // int8 sends fewer bytes than dense on the same graph.
  auto bytesOf = [&](std::size_t row) {
    std::vector<std::string> f;
    std::stringstream ss(cells[row]);
    std::string x;
    while (std::getline(ss, x, ',')) f.push_back(x);
    CHECK(std::stod(f[6]) > 30 * 0.002);  // sim_time_s
    return std::stod(f[8]);
  };
  CHECK(bytesOf(3) < bytesOf(1) / 2);

  // Resume: everything is kept; an edited cell definition (another seed list) runs only the new
  // cells.
  REQUIRE(run(cmd) == 0);
  CHECK(contains(readAll(dir / "stdout.txt"), "0 cells ran, 8 kept, 0 failed"));
  fs::remove_all(fs::path(out) / "cells" / cells[2].substr(0, cells[2].find(',')));
  REQUIRE(run(cmd) == 0);
  CHECK(contains(readAll(dir / "stdout.txt"), "1 cells ran, 7 kept, 0 failed"));
  REQUIRE(lines(readAll(fs::path(out) / "results.csv")).size() == 1 + 8 * 3);

  // An invalid cell stops the sweep before anything runs, naming the cell.
  std::ofstream(dir / "bad.yaml") << R"(config: { peers: { count: 6 }, topology: { kind: torus } }
sweep: { peers.count: [6, 7] }
)";
  const std::string bad = bin + " sweep " + (dir / "bad.yaml").string() + " --out " +
                          (dir / "bad").string() + " --quiet > " + (dir / "bad.txt").string() +
                          " 2>&1";
  CHECK(run(bad) == 2);
  CHECK(contains(readAll(dir / "bad.txt"), "peers.count 7 has no a x b factorisation"));
  CHECK(contains(readAll(dir / "bad.txt"), "1 of 2 cells are invalid; nothing ran"));
  CHECK_FALSE(fs::exists(dir / "bad" / "results.csv"));
}

TEST_CASE("grapevine plot draws a sweep's results as PNG files", "[plot]") {
  const fs::path dir = fs::path(GRAPEVINE_BINARY_DIR) / "sweep_plot_scratch";
  fs::remove_all(dir);
  fs::create_directories(dir);
  const fs::path file = dir / "t.yaml";
  std::ofstream(file) << kSweep;
  const std::string bin = GRAPEVINE_BIN;
  const std::string out = (dir / "out").string();
  REQUIRE(run(bin + " sweep " + file.string() + " --out " + out + " --jobs 2 --quiet > " +
              (dir / "stdout.txt").string() + " 2>&1") == 0);
  // Bad flags are refused before gnuplot is needed.
  CHECK(run(bin + " plot " + out + " --color nope > /dev/null 2>&1") == 2);

  // Plots: PNG files (the workload has no accuracy: consensus plots only).
  const std::string plot = bin + " plot " + out + " > " + (dir / "plot.txt").string() + " 2>&1";
  if (run("command -v gnuplot > /dev/null") != 0) {
    // Without gnuplot the command fails and says what to install.
    CHECK(run(plot) == 1);
    CHECK(contains(readAll(dir / "plot.txt"), "gnuplot"));
    GV_SKIP_MISSING("tools", "gnuplot not installed (tools/install-deps): no PNG files to check");
  }
  REQUIRE(run(plot) == 0);
  for (const char* png :
       {"consensus_vs_rounds.png", "consensus_vs_bytes.png", "consensus_vs_time.png"}) {
    const std::string bytes = readAll(fs::path(out) / "plots" / png);
    REQUIRE(bytes.size() > 1000);
    CHECK(bytes.substr(1, 3) == "PNG");
  }
}

namespace {

// Width and height from a PNG's IHDR chunk (0 x 0 when the bytes are not a PNG).
std::pair<std::uint32_t, std::uint32_t> pngSize(const std::string& bytes) {
  if (bytes.size() < 24 || bytes.compare(0, 8, "\x89PNG\r\n\x1a\n") != 0 ||
      bytes.compare(12, 4, "IHDR") != 0)
    return {0, 0};
  auto be32 = [&](std::size_t at) {
    std::uint32_t v = 0;
    for (std::size_t k = 0; k < 4; ++k) v = (v << 8) | static_cast<unsigned char>(bytes[at + k]);
    return v;
  };
  return {be32(16), be32(20)};
}

std::vector<std::string> fields(const std::string& row, char sep) {
  std::vector<std::string> f;
  std::stringstream ss(row);
  std::string x;
  while (std::getline(ss, x, sep)) f.push_back(x);
  if (!row.empty() && row.back() == sep) f.push_back("");
  return f;
}

}  // namespace

TEST_CASE("grapevine sweep --mode launch runs real peers; plot draws their accuracy", "[launch]") {
  // Two cells of 3 real peers over tcp (Fashion-MNIST softmax, 40 rounds, evaluated at 20 and 40),
  // then `grapevine plot`: the accuracy plots (the simulated sweeps above have no accuracy) must
  // draw exactly the evaluations results.csv holds.
  const fs::path dir = fs::path(GRAPEVINE_BINARY_DIR) / "sweep_launch_scratch";
  fs::remove_all(dir);
  fs::create_directories(dir);
  const fs::path file = dir / "l.yaml";
  std::ofstream(file) << "name: l\n"
                         "config:\n"
                         "  run: { rounds: 40, seed: 1 }\n"
                         "  peers: { count: 3, host: 127.0.0.1, base_port: "
                      << grapevine::test_util::freeBasePort(3)
                      << " }\n"
                         "  topology: { kind: ring }\n"
                         "  transport: { backend: tcp }\n"
                         "  algorithm: { name: choco, consensus_step: 0.4, round_timeout: 120 }\n"
                         "  compression: { method: top-k }\n"
                         "  optimizer: { lr: 0.05, batch_size: 32 }\n"
                         "  workload: { name: fashion-mnist-softmax, eval_every: 20, "
                         "eval_samples: 500 }\n"
                         "sweep:\n"
                         "  compression.ratio: [0.1, 0.3]\n";
  const std::string bin = GRAPEVINE_BIN;
  const std::string out = (dir / "out").string();
  REQUIRE(run(bin + " sweep " + file.string() + " --mode launch --out " + out + " --quiet > " +
              (dir / "stdout.txt").string() + " 2>&1") == 0);
  INFO(readAll(dir / "stdout.txt"));
  CHECK(contains(readAll(dir / "stdout.txt"), "mode launch"));
  CHECK(contains(readAll(dir / "stdout.txt"), "2 cells ran, 0 kept, 0 failed"));

  // Real peers ran each cell: their logs and a launch summary over tcp, not the simulator's.
  const auto cells = lines(readAll(fs::path(out) / "cells.csv"));
  REQUIRE(cells.size() == 3);
  for (std::size_t i = 1; i < cells.size(); ++i) {
    const auto f = fields(cells[i], ',');
    INFO(cells[i]);
    REQUIRE(f.size() > 4);
    CHECK(f[2] == "done");
    CHECK(f[3] == "40");
    CHECK(f[4].empty());  // no simulated time under launch
    const fs::path cell = fs::path(out) / "cells" / f[0];
    for (int r = 0; r < 3; ++r) CHECK(fs::exists(cell / ("peer-" + std::to_string(r) + ".log")));
    CHECK(contains(readAll(cell / "summary.json"), "\"transport\": \"tcp\""));
  }
  // results.csv: the two evaluations of each cell, accuracy measured, simulator-only fields empty.
  const auto results = lines(readAll(fs::path(out) / "results.csv"));
  REQUIRE(results.size() == 1 + 2 * 2);
  std::vector<std::vector<std::string>> rows;
  for (std::size_t i = 1; i < results.size(); ++i) {
    rows.push_back(fields(results[i], ','));
    INFO(results[i]);
    REQUIRE(rows.back().size() == 11);
    CHECK(rows.back()[3].empty());           // sim_time_s
    CHECK(std::stod(rows.back()[7]) > 0.5);  // test_accuracy, chance is 0.1
  }

  const std::string plot = bin + " plot " + out + " > " + (dir / "plot.txt").string() + " 2>&1";
  if (run("command -v gnuplot > /dev/null") != 0)
    GV_SKIP_MISSING("tools", "gnuplot not installed (tools/install-deps): no plots to check");
  REQUIRE(run(plot) == 0);
  INFO(readAll(dir / "plot.txt"));
  for (const char* png :
       {"accuracy_vs_rounds.png", "accuracy_vs_bytes.png", "accuracy_vs_time.png"}) {
    INFO(png);
    const auto [w, h] = pngSize(readAll(fs::path(out) / "plots" / png));
    CHECK(w >= 320);
    CHECK(h >= 200);
  }
  // Each line's data is its cell's evaluations: round, bytes and mean accuracy as results.csv has
  // them (one line per cell; no seeds to average over).
  for (int line = 0; line < 2; ++line) {
    const auto data =
        lines(readAll(fs::path(out) / "plots" / "data" / ("line" + std::to_string(line) + ".dat")));
    REQUIRE(data.size() == 3);  // header + 2 evaluations
    for (int k = 0; k < 2; ++k) {
      const auto d = fields(data[1 + k], ' ');
      const auto& row = rows[2 * line + k];
      INFO(data[1 + k] << " against " << results[1 + 2 * line + k]);
      REQUIRE(d.size() >= 4);
      CHECK(std::stod(d[0]) == std::stod(row[2]));                                  // round
      CHECK(std::stod(d[1]) == Approx(std::stod(row[5]) / 1048576).epsilon(1e-4));  // MiB sent
      CHECK(std::stod(d[3]) == Approx(std::stod(row[7])).epsilon(1e-5));            // accuracy
    }
  }
}
