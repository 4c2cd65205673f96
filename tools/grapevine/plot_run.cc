#include "tools/grapevine/plot_run.h"

#include <cmath>
#include <fstream>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tools/grapevine/command.h"

namespace grapevine::cli {
namespace {

namespace fs = std::filesystem;

// One record's values (NaN where the record has none).
struct Row {
  long long round = 0;
  double time = NAN, mib = NAN, loss = NAN, accuracy = NAN, testLoss = NAN;
};

double field(const nlohmann::json& j, const char* key) {
  const auto it = j.find(key);
  return it != j.end() && it->is_number() ? it->get<double>() : NAN;
}

// The records of each peer present in `dir` (rank -> rows), the final record excluded.
std::map<int, std::vector<Row>> readRecords(const fs::path& dir) {
  std::map<int, std::vector<Row>> out;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    int rank = -1;
    char tail[8] = {};
    if (std::sscanf(name.c_str(), "peer-%d.%7s", &rank, tail) != 2 ||
        std::string(tail) != "jsonl" || rank < 0)
      continue;
    std::ifstream in(entry.path());
    std::string line;
    while (std::getline(in, line)) {
      const auto j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
      if (!j.is_object() || j.value("final", false) || !j.contains("round")) continue;
      Row r;
      r.round = static_cast<long long>(field(j, "round"));
      r.time = field(j, "time");
      r.mib = field(j, "bytes_sent") / (1024.0 * 1024.0);
      r.loss = field(j, "loss");
      r.accuracy = field(j, "test_accuracy");
      r.testLoss = field(j, "test_loss");
      out[rank].push_back(r);
    }
  }
  return out;
}

}  // namespace

int plotRun(const fs::path& dir) {
  const auto records = readRecords(dir);
  if (records.empty()) {
    std::cerr << "grapevine plot: " << dir.string()
              << " has neither a sweep (sweep.json, results.csv) nor a run's records "
                 "(peer-<rank>.jsonl)\n";
    return kExitBadInput;
  }
  const fs::path plots = dir / "plots";
  fs::create_directories(plots / "data");
  bool anyAccuracy = false, anyTestLoss = false;
  for (const auto& [rank, rows] : records) {
    std::ofstream d(plots / "data" / ("peer-" + std::to_string(rank) + ".dat"));
    d << "# round time_s bytes_MiB loss test_accuracy test_loss\n";
    for (const Row& r : rows) {
      d << r.round << " " << r.time << " " << r.mib << " " << r.loss << " " << r.accuracy << " "
        << r.testLoss << "\n";
      anyAccuracy = anyAccuracy || std::isfinite(r.accuracy);
      anyTestLoss = anyTestLoss || std::isfinite(r.testLoss);
    }
  }
  struct Axis {
    const char* name;
    int column;
    const char* label;
  };
  const std::vector<Axis> xs = {{"rounds", 1, "round"},
                                {"time", 2, "time (s)"},
                                {"bytes", 3, "bytes sent by the peer (MiB)"}};
  std::vector<Axis> ys = {{"loss", 4, "training loss (the peer's minibatches)"}};
  if (anyAccuracy) ys.push_back({"accuracy", 5, "test accuracy"});
  if (anyTestLoss) ys.push_back({"test_loss", 6, "test loss (reported)"});
  std::string gp;
  std::vector<std::string> made;
  for (const Axis& y : ys) {
    for (const Axis& x : xs) {
      const std::string png = std::string(y.name) + "_vs_" + x.name + ".png";
      made.push_back((plots / png).string());
      gp += "reset\nset terminal pngcairo size 800,480 font 'sans,10'\nset output " +
            gpath((plots / png).string()) + "\nset grid\nset key outside right top\n" +
            "set datafile missing 'nan'\nset xlabel " + gpath(x.label) + "\nset ylabel " +
            gpath(y.label) + "\nplot ";
      bool first = true;
      for (const auto& [rank, rows] : records) {
        const std::string file =
            (plots / "data" / ("peer-" + std::to_string(rank) + ".dat")).string();
        gp += std::string(first ? "" : ", ") + gpath(file) + " using " + std::to_string(x.column) +
              ":" + std::to_string(y.column) + " with linespoints pt 7 ps 0.4 title 'peer " +
              std::to_string(rank) + "'";
        first = false;
      }
      gp += "\nset output\n";
    }
  }
  if (const int rc = runGnuplot(plots, gp); rc != kExitOk) return rc;
  std::cout << "grapevine plot: " << records.size() << " peers' records";
  if (!anyAccuracy && !anyTestLoss) std::cout << " (no test metric recorded: loss plots only)";
  std::cout << "\n";
  for (const auto& p : made) std::cout << "  " << p << "\n";
  return kExitOk;
}

}  // namespace grapevine::cli
