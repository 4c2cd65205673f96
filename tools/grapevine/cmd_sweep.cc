// `grapevine sweep SWEEP.yaml [--out DIR] [--mode sim|launch] [--jobs J]`: runs every cell of a
// sweep (runtime/sweep/sweep.h) as its own `grapevine sim` (or `launch`) process, keeps finished
// cells (resumable: a cell whose DIR/cells/<id>/done.json exists is skipped; the id hashes
// everything that defines the cell), and writes DIR/results.csv (one row per cell and evaluation
// point) and DIR/cells.csv (one row per cell).
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

#include "runtime/common/atomic_file.h"
#include "runtime/common/elapsed.h"
#include "runtime/common/subprocess.h"
#include "runtime/config/loader.h"
#include "runtime/sweep/sweep.h"
#include "tools/grapevine/command.h"

namespace grapevine::cli {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

struct SweepArgs {
  std::string path;
  std::string out;
  std::string mode;
  int jobs = 1;
  int threads = 0;
  bool dryRun = false;
  bool quiet = false;
};

std::atomic<bool> gInterrupted{false};
void onSignal(int) { gInterrupted = true; }

std::string readFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

bool writeFile(const std::string& path, const std::string& text) {
  return writeFileAtomically(path, text).isOk();
}

std::string selfExe() {
  std::error_code ec;
  auto p = fs::read_symlink("/proc/self/exe", ec);
  return ec ? std::string("grapevine") : p.string();
}

std::string duration(double s) {
  char b[32];
  if (s < 60)
    std::snprintf(b, sizeof b, "%.0fs", s);
  else if (s < 3600)
    std::snprintf(b, sizeof b, "%dm%02ds", int(s) / 60, int(s) % 60);
  else
    std::snprintf(b, sizeof b, "%dh%02dm", int(s) / 3600, int(s) % 3600 / 60);
  return b;
}

// Starts `argv` with stdout and stderr to `log`; returns the pid (or -1). The caller reaps it
// (waitpid(-1) in SweepRun::runCells).
pid_t spawn(const std::vector<std::string>& argv, const std::string& log) {
  SpawnOptions o;
  o.argv = argv;
  o.out = ChildStream::file(log);
  o.err = ChildStream::sameAsStdout();
  auto child = Subprocess::spawn(o);
  return child.isOk() ? child->release() : -1;
}

struct Running {
  std::size_t cell;
  Clock::time_point start;
};

// One `grapevine sweep`, step by step: plan the cells (sweep file, output folder, base config),
// check that each is a valid config, describe them (sweep.json and a header line), run the cells
// not kept from an earlier run, tabulate results.csv and cells.csv, report. Single-threaded; the
// only asynchronous input is gInterrupted, set by the handler runCells() installs while cells run.
class SweepRun {
 public:
  explicit SweepRun(const SweepArgs& args) : args_(args) {}

  int plan();
  int checkCells();  // every cell must be a valid config before anything runs
  void writeMeta() const;
  void printPlan() const;
  void printCells() const;  // --dry-run
  void runCells();          // returns when every started cell has exited
  void writeTables();
  int report() const;

 private:
  void startCells();                       // up to jobs_ at once
  bool finishCell(pid_t pid, int status);  // false: not one of our cells
  void showProgress() const;
  bool tabulateCell(const sweep::Cell& c, std::ostream& results, std::ostream& cellsCsv) const;
  fs::path cellDir(const sweep::Cell& c) const { return fs::path(out_) / "cells" / c.id; }

  const SweepArgs& args_;
  sweep::SweepSpec spec_;
  std::string out_;
  std::string basePath_;
  std::vector<sweep::Cell> cells_;
  std::vector<std::string> cellConfigs_;  // each cell's full config, as YAML
  int jobs_ = 1;
  int threads_ = 1;  // per simulated cell
  std::string exe_;
  bool tty_ = false;
  Clock::time_point start_;
  std::vector<std::size_t> todo_;  // cells to run, in order; next_ is the next to start
  std::size_t next_ = 0;
  int kept_ = 0;
  std::map<pid_t, Running> running_;
  std::size_t finished_ = 0;
  double cellSecondsSum_ = 0;
  std::vector<std::string> failed_;    // "<id> (<why>)"
  std::vector<std::string> diverged_;  // ids of this run's cells whose training diverged
  int tabulated_ = 0;
};

int SweepRun::plan() {
  std::vector<config::Diagnostic> diags;
  auto specOr = sweep::loadSweep(args_.path, &diags);
  std::cerr << config::formatDiagnostics(diags);
  if (!specOr.isOk()) {
    if (diags.empty()) std::cerr << "grapevine sweep: " << specOr.status().message() << "\n";
    return kExitBadInput;
  }
  spec_ = std::move(specOr).value();
  if (!args_.mode.empty()) spec_.mode = args_.mode;
  out_ = args_.out.empty() ? "runs/sweeps/" + spec_.name : args_.out;
  std::error_code ec;
  fs::create_directories(fs::path(out_) / "cells", ec);
  if (ec) {
    std::cerr << "grapevine sweep: cannot create " << out_ << ": " << ec.message() << "\n";
    return kExitFailure;
  }
  // The base config: a file, or the inline mapping written next to the results.
  basePath_ = spec_.baseConfig;
  if (basePath_.empty()) {
    basePath_ = (fs::path(out_) / "base.yaml").string();
    writeFile(basePath_, spec_.inlineConfig);
  }
  cells_ = sweep::expand(spec_, readFile(basePath_));
  return kExitOk;
}

// The environment is not read: a sweep is defined by its files alone.
int SweepRun::checkCells() {
  cellConfigs_.assign(cells_.size(), std::string());
  int invalid = 0;
  for (std::size_t i = 0; i < cells_.size(); ++i) {
    config::LoadOptions o;
    o.useEnvironment = false;
    o.overrides = cells_[i].overrides;
    o.overrides.push_back("output.dir=" + cellDir(cells_[i]).string());
    auto r = config::loadFile(basePath_, o);
    if (!r.ok()) {
      std::string labels;
      for (const auto& l : cells_[i].labels) labels += (labels.empty() ? "" : ", ") + l;
      std::cerr << "grapevine sweep: cell " << cells_[i].id << " (" << labels
                << ") is not a valid config:\n"
                << config::formatDiagnostics(r.diagnostics);
      ++invalid;
      continue;
    }
    cellConfigs_[i] = config::toYaml(r.config);
  }
  if (invalid) {
    std::cerr << "grapevine sweep: " << invalid << " of " << cells_.size()
              << " cells are invalid; nothing ran\n";
    return kExitBadInput;
  }
  return kExitOk;
}

// What the sweep is, for `grapevine plot` and for people.
void SweepRun::writeMeta() const {
  nlohmann::json meta;
  meta["name"] = spec_.name;
  meta["sweep_file"] = fs::absolute(args_.path).string();
  meta["base_config"] = basePath_;
  meta["mode"] = spec_.mode;
  meta["target_accuracy"] =
      spec_.targetAccuracy ? nlohmann::json(*spec_.targetAccuracy) : nlohmann::json(nullptr);
  for (const auto& ax : spec_.axes) {
    nlohmann::json j;
    j["key"] = ax.key;
    for (const auto& v : ax.values) j["labels"].push_back(v.label);
    meta["axes"].push_back(j);
  }
  for (const auto& c : cells_) meta["cells"].push_back({{"id", c.id}, {"labels", c.labels}});
  writeFile((fs::path(out_) / "sweep.json").string(), meta.dump(2) + "\n");
}

void SweepRun::printPlan() const {
  std::cout << "grapevine sweep: " << spec_.name << ": " << cells_.size() << " cells (";
  for (std::size_t i = 0; i < spec_.axes.size(); ++i) {
    std::cout << (i ? " x " : "") << spec_.axes[i].values.size() << " " << spec_.axes[i].key;
  }
  std::cout << "), mode " << spec_.mode << ", output in " << out_ << "/\n";
}

void SweepRun::printCells() const {
  for (const auto& c : cells_) {
    std::cout << "  " << c.id;
    for (const auto& o : c.overrides) std::cout << "  " << o;
    std::cout << "\n";
  }
}

void SweepRun::runCells() {
  jobs_ = spec_.mode == "launch" ? 1 : std::max(1, args_.jobs);  // launched peers use fixed ports
  const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
  threads_ = args_.threads > 0 ? args_.threads : std::max(1, static_cast<int>(cores) / jobs_);
  exe_ = selfExe();
  for (std::size_t i = 0; i < cells_.size(); ++i) {
    if (fs::exists(cellDir(cells_[i]) / "done.json"))
      ++kept_;
    else
      todo_.push_back(i);
  }
  struct sigaction sa {
  }, oldInt{}, oldTerm{};
  sa.sa_handler = onSignal;
  sigaction(SIGINT, &sa, &oldInt);
  sigaction(SIGTERM, &sa, &oldTerm);

  tty_ = isatty(STDOUT_FILENO) && !args_.quiet;
  start_ = Clock::now();
  showProgress();
  while ((next_ < todo_.size() && !gInterrupted) || !running_.empty()) {
    startCells();
    int status = 0;
    const pid_t pid = ::waitpid(-1, &status, 0);
    if (pid < 0) {
      if (errno == EINTR) continue;
      break;
    }
    if (finishCell(pid, status)) showProgress();
  }
  if (tty_) std::cout << "\n";
  sigaction(SIGINT, &oldInt, nullptr);
  sigaction(SIGTERM, &oldTerm, nullptr);
}

// Each cell runs as `grapevine sim|launch DIR/config.yaml --out DIR`, its output in DIR/log.txt.
void SweepRun::startCells() {
  while (!gInterrupted && next_ < todo_.size() && static_cast<int>(running_.size()) < jobs_) {
    const std::size_t i = todo_[next_++];
    const fs::path dir = cellDir(cells_[i]);
    std::error_code ec;
    fs::create_directories(dir, ec);
    const std::string cfg = (dir / "config.yaml").string();
    std::string header = "# sweep " + spec_.name + ", cell " + cells_[i].id + ":";
    for (const auto& o : cells_[i].overrides) header += " " + o;
    writeFile(cfg, header + "\n" + cellConfigs_[i]);
    std::vector<std::string> argv = {exe_, spec_.mode, cfg, "--out", dir.string(), "--quiet"};
    if (spec_.mode == "sim") {
      argv.insert(argv.end(), {"--no-models", "--threads", std::to_string(threads_)});
    }
    const pid_t pid = spawn(argv, (dir / "log.txt").string());
    if (pid < 0) {
      failed_.push_back(cells_[i].id + " (fork failed)");
      continue;
    }
    running_[pid] = {i, Clock::now()};
  }
}

// A cell that exited 0 gets DIR/done.json, which keeps it on the next run.
bool SweepRun::finishCell(pid_t pid, int status) {
  auto it = running_.find(pid);
  if (it == running_.end()) return false;
  const std::size_t i = it->second.cell;
  const double secs = secondsSince(it->second.start);
  running_.erase(it);
  ++finished_;
  cellSecondsSum_ += secs;
  const fs::path dir = cellDir(cells_[i]);
  // A cell whose training diverged (exit 3) is a result too: kept, and tabulated as diverged.
  const bool diverged = WIFEXITED(status) && WEXITSTATUS(status) == kExitDiverged;
  if (WIFEXITED(status) && (WEXITSTATUS(status) == 0 || diverged)) {
    nlohmann::json done;
    done["id"] = cells_[i].id;
    done["labels"] = cells_[i].labels;
    done["overrides"] = cells_[i].overrides;
    done["seconds"] = secs;
    done["diverged"] = diverged;
    if (diverged) diverged_.push_back(cells_[i].id);
    writeFile((dir / "done.json").string(), done.dump(2) + "\n");
  } else {
    std::string why = WIFEXITED(status) ? "exit " + std::to_string(WEXITSTATUS(status))
                                        : "signal " + std::to_string(WTERMSIG(status));
    failed_.push_back(cells_[i].id + " (" + why + ", see " + (dir / "log.txt").string() + ")");
  }
  return true;
}

void SweepRun::showProgress() const {
  if (args_.quiet) return;
  const std::size_t done = static_cast<std::size_t>(kept_) + finished_;
  const int width = 30;
  const int filled = static_cast<int>(width * done / std::max<std::size_t>(1, cells_.size()));
  const double elapsed = secondsSince(start_);
  std::string eta = "?";
  if (finished_ > 0) {
    const double perCell = cellSecondsSum_ / static_cast<double>(finished_);
    const double left = static_cast<double>(todo_.size() - finished_) * perCell / jobs_;
    eta = duration(left);
  }
  char line[256];
  std::snprintf(line, sizeof line,
                "[%s%s] %zu/%zu cells (%d kept, %zu failed, %zu running)  %s elapsed, eta %s",
                std::string(static_cast<std::size_t>(filled), '#').c_str(),
                std::string(static_cast<std::size_t>(width - filled), '.').c_str(), done,
                cells_.size(), kept_, failed_.size(), running_.size(), duration(elapsed).c_str(),
                eta.c_str());
  if (tty_)
    std::cout << "\r" << line << "   " << std::flush;
  else
    std::cout << line << "\n" << std::flush;
}

// The tables, from every finished cell (this run's and kept ones).
void SweepRun::writeTables() {
  std::ostringstream results, cellsCsv;
  std::string axisHeader;
  for (const auto& ax : spec_.axes) axisHeader += sweep::csvField(ax.key) + ",";
  results << "cell," << axisHeader
          << "round,sim_time_s,wall_time_s,bytes_sent_per_peer,train_loss,test_accuracy,"
             "averaged_model_accuracy,consensus_distance,spectral_gap\n";
  cellsCsv
      << "cell," << axisHeader
      << "status,rounds,sim_time_s,wall_time_s,bytes_sent_per_peer,test_accuracy,averaged_model_"
         "accuracy,"
         "consensus_distance,spectral_gap,target_accuracy,rounds_to_target,sim_time_to_target_s,"
         "wall_time_to_target_s,bytes_to_target_per_peer,diverged_round,honest_test_accuracy,"
         "quarantined_by_trust\n";
  for (const auto& c : cells_) {
    if (tabulateCell(c, results, cellsCsv)) ++tabulated_;
  }
  writeFile((fs::path(out_) / "results.csv").string(), results.str());
  writeFile((fs::path(out_) / "cells.csv").string(), cellsCsv.str());
}

// Writes the cell's row of cells.csv and, when it finished, its rows of results.csv (then true).
bool SweepRun::tabulateCell(const sweep::Cell& c, std::ostream& results,
                            std::ostream& cellsCsv) const {
  const fs::path dir = cellDir(c);
  std::string labels;
  for (const auto& l : c.labels) labels += sweep::csvField(l) + ",";
  if (!fs::exists(dir / "done.json")) {
    cellsCsv << c.id << "," << labels << (gInterrupted ? "interrupted" : "failed")
             << ",,,,,,,,,,,,,,,,\n";
    return false;
  }
  std::optional<double> gap;
  auto summary = nlohmann::json::parse(readFile((dir / "summary.json").string()), nullptr, false);
  if (summary.is_object() && summary.contains("spectral_gap") &&
      summary["spectral_gap"].is_number()) {
    gap = summary["spectral_gap"].get<double>();
  }
  auto points = sweep::readEvalPoints(dir.string());
  if (!points.isOk()) {
    cellsCsv << c.id << "," << labels << "unreadable,,,,,,,,,,,,,,,,\n";
    return false;
  }
  // The run's end when no evaluation fell on its last round (run.rounds not a multiple of
  // workload.eval_every): the summary's final figures, so that a cell's row is where it ended.
  if (summary.is_object() && summary.contains("rounds") && summary["rounds"].is_number_integer() &&
      summary.contains("test_accuracy_mean") && summary["test_accuracy_mean"].is_number()) {
    const auto rounds = summary["rounds"].get<long long>();
    if (points->empty() || points->back().round < rounds) {
      const auto num = [&](const char* k) -> std::optional<double> {
        if (!summary.contains(k) || !summary[k].is_number()) return std::nullopt;
        return summary[k].get<double>();
      };
      sweep::EvalPoint end;
      end.round = rounds;
      end.simTime = num("simulated_seconds");
      end.wallTime = num("wall_seconds");
      const auto peers = num("peers");
      if (const auto bytes = num("bytes_sent_total"); bytes && peers && *peers > 0)
        end.bytesSentPerPeer = *bytes / *peers;
      end.testAccuracy = num("test_accuracy_mean");
      end.averagedAccuracy = num("averaged_model_accuracy");
      end.consensusDistance = num("consensus_distance_final");
      points->push_back(end);
    }
  }
  for (const auto& p : *points) {
    results << c.id << "," << labels << p.round << "," << sweep::csvNumber(p.simTime) << ","
            << sweep::csvNumber(p.wallTime) << "," << sweep::csvNumber(p.bytesSentPerPeer) << ","
            << sweep::csvNumber(p.trainLoss) << "," << sweep::csvNumber(p.testAccuracy) << ","
            << sweep::csvNumber(p.averagedAccuracy) << "," << sweep::csvNumber(p.consensusDistance)
            << "," << sweep::csvNumber(gap) << "\n";
  }
  const sweep::EvalPoint last = points->empty() ? sweep::EvalPoint{} : points->back();
  std::optional<std::int64_t> divergedRound;
  if (summary.is_object() && summary.value("diverged", false) &&
      summary.contains("diverged_round") && summary["diverged_round"].is_number_integer()) {
    divergedRound = summary["diverged_round"].get<std::int64_t>();
  }
  cellsCsv << c.id << "," << labels << (divergedRound ? "diverged," : "done,") << last.round << ","
           << sweep::csvNumber(last.simTime) << "," << sweep::csvNumber(last.wallTime) << ","
           << sweep::csvNumber(last.bytesSentPerPeer) << "," << sweep::csvNumber(last.testAccuracy)
           << "," << sweep::csvNumber(last.averagedAccuracy) << ","
           << sweep::csvNumber(last.consensusDistance) << "," << sweep::csvNumber(gap) << ","
           << sweep::csvNumber(spec_.targetAccuracy) << ",";
  std::optional<sweep::EvalPoint> hit;
  if (spec_.targetAccuracy) hit = sweep::firstReaching(*points, *spec_.targetAccuracy);
  if (hit) {
    cellsCsv << hit->round << "," << sweep::csvNumber(hit->simTime) << ","
             << sweep::csvNumber(hit->wallTime) << "," << sweep::csvNumber(hit->bytesSentPerPeer)
             << ",";
  } else {
    cellsCsv << ",,,,";
  }
  cellsCsv << (divergedRound ? std::to_string(*divergedRound) : std::string()) << ",";
  // Attacks: the peers that did not attack, and the neighbours robust mixing quarantined.
  std::optional<double> honest;
  std::optional<double> distrusted;
  if (summary.is_object() && summary.contains("honest_test_accuracy_mean") &&
      summary["honest_test_accuracy_mean"].is_number())
    honest = summary["honest_test_accuracy_mean"].get<double>();
  if (summary.is_object() && summary.contains("quarantined_by_trust") &&
      summary["quarantined_by_trust"].is_array())
    distrusted = static_cast<double>(summary["quarantined_by_trust"].size());
  cellsCsv << sweep::csvNumber(honest) << "," << sweep::csvNumber(distrusted) << "\n";
  return true;
}

int SweepRun::report() const {
  const double elapsed = secondsSince(start_);
  std::cout << "grapevine sweep: " << finished_ - failed_.size() << " cells ran, " << kept_
            << " kept, " << failed_.size() << " failed, " << diverged_.size() << " diverged, in "
            << duration(elapsed) << "\n"
            << "  " << out_ << "/results.csv  (" << tabulated_
            << " cells, one row per evaluation)\n"
            << "  " << out_ << "/cells.csv\n"
            << "  plots: grapevine plot " << out_ << "\n";
  for (const auto& f : failed_) std::cerr << "grapevine sweep: cell " << f << "\n";
  for (const auto& d : diverged_) {
    std::cout << "grapevine sweep: cell " << d << " diverged (cells.csv: diverged_round)\n";
  }
  if (gInterrupted) {
    std::cerr << "grapevine sweep: interrupted; run the same command again to resume\n";
    return 130;
  }
  return failed_.empty() ? kExitOk : kExitFailure;
}

int runSweep(const SweepArgs& a) {
  SweepRun run(a);
  if (int rc = run.plan(); rc != kExitOk) return rc;
  if (int rc = run.checkCells(); rc != kExitOk) return rc;
  run.writeMeta();
  run.printPlan();
  if (a.dryRun) {
    run.printCells();
    return kExitOk;
  }
  run.runCells();
  run.writeTables();
  return run.report();
}

}  // namespace

Command registerSweep(CLI::App& root) {
  auto args = std::make_shared<SweepArgs>();
  CLI::App* app = root.add_subcommand(
      "sweep",
      "Run every combination of a sweep file's values (resumable) and tabulate the results");
  app->add_option("sweep", args->path, "Sweep YAML file (see docs/ablations.md)")->required();
  app->add_option("--out", args->out, "Output folder (default: runs/sweeps/<name>)");
  app->add_option("--mode", args->mode,
                  "sim (one process per cell, simulated links) or launch (real peers)")
      ->check(CLI::IsMember({"sim", "launch"}));
  app->add_option("--jobs", args->jobs, "Cells run at once (sim mode; default 1)")
      ->check(CLI::Range(1, 256));
  app->add_option("--threads", args->threads,
                  "Worker threads per simulated cell (default: cores / jobs)")
      ->check(CLI::Range(1, 1024));
  app->add_flag("--dry-run", args->dryRun, "List the cells and their overrides; run nothing");
  app->add_flag("--quiet", args->quiet, "No progress bar");
  return {app, [args] { return runSweep(*args); }};
}

}  // namespace grapevine::cli
