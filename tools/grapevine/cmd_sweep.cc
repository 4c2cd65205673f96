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
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!(out << text)) return false;
  }
  std::error_code ec;
  fs::rename(tmp, path, ec);
  return !ec;
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
// (waitpid(-1) in runSweep).
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

int runSweep(const SweepArgs& a) {
  std::vector<config::Diagnostic> diags;
  auto specOr = sweep::loadSweep(a.path, &diags);
  std::cerr << config::formatDiagnostics(diags);
  if (!specOr.isOk()) {
    if (diags.empty()) std::cerr << "grapevine sweep: " << specOr.status().message() << "\n";
    return kExitBadInput;
  }
  sweep::SweepSpec spec = std::move(specOr).value();
  if (!a.mode.empty()) spec.mode = a.mode;
  const std::string out = a.out.empty() ? "runs/sweeps/" + spec.name : a.out;
  std::error_code ec;
  fs::create_directories(fs::path(out) / "cells", ec);
  if (ec) {
    std::cerr << "grapevine sweep: cannot create " << out << ": " << ec.message() << "\n";
    return kExitFailure;
  }
  // The base config: a file, or the inline mapping written next to the results.
  std::string basePath = spec.baseConfig;
  if (basePath.empty()) {
    basePath = (fs::path(out) / "base.yaml").string();
    writeFile(basePath, spec.inlineConfig);
  }
  const std::string baseText = readFile(basePath);
  const auto cells = sweep::expand(spec, baseText);

  // Every cell must be a valid config before anything runs. The environment is not read: a sweep is
  // defined by its files alone.
  std::vector<std::string> cellConfigs(cells.size());
  std::vector<double> spectralGapHint(cells.size(), 0.0);
  int invalid = 0;
  for (std::size_t i = 0; i < cells.size(); ++i) {
    config::LoadOptions o;
    o.useEnvironment = false;
    o.overrides = cells[i].overrides;
    o.overrides.push_back("output.dir=" + (fs::path(out) / "cells" / cells[i].id).string());
    auto r = config::loadFile(basePath, o);
    if (!r.ok()) {
      std::string labels;
      for (const auto& l : cells[i].labels) labels += (labels.empty() ? "" : ", ") + l;
      std::cerr << "grapevine sweep: cell " << cells[i].id << " (" << labels
                << ") is not a valid config:\n"
                << config::formatDiagnostics(r.diagnostics);
      ++invalid;
      continue;
    }
    cellConfigs[i] = config::toYaml(r.config);
  }
  if (invalid) {
    std::cerr << "grapevine sweep: " << invalid << " of " << cells.size()
              << " cells are invalid; nothing ran\n";
    return kExitBadInput;
  }

  // What the sweep is, for `grapevine plot` and for people.
  nlohmann::json meta;
  meta["name"] = spec.name;
  meta["sweep_file"] = fs::absolute(a.path).string();
  meta["base_config"] = basePath;
  meta["mode"] = spec.mode;
  meta["target_accuracy"] =
      spec.targetAccuracy ? nlohmann::json(*spec.targetAccuracy) : nlohmann::json(nullptr);
  for (const auto& ax : spec.axes) {
    nlohmann::json j;
    j["key"] = ax.key;
    for (const auto& v : ax.values) j["labels"].push_back(v.label);
    meta["axes"].push_back(j);
  }
  for (const auto& c : cells) meta["cells"].push_back({{"id", c.id}, {"labels", c.labels}});
  writeFile((fs::path(out) / "sweep.json").string(), meta.dump(2) + "\n");

  std::cout << "grapevine sweep: " << spec.name << ": " << cells.size() << " cells (";
  for (std::size_t i = 0; i < spec.axes.size(); ++i) {
    std::cout << (i ? " x " : "") << spec.axes[i].values.size() << " " << spec.axes[i].key;
  }
  std::cout << "), mode " << spec.mode << ", output in " << out << "/\n";
  if (a.dryRun) {
    for (std::size_t i = 0; i < cells.size(); ++i) {
      std::cout << "  " << cells[i].id;
      for (const auto& o : cells[i].overrides) std::cout << "  " << o;
      std::cout << "\n";
    }
    return kExitOk;
  }

  const int jobs =
      spec.mode == "launch" ? 1 : std::max(1, a.jobs);  // launched peers use fixed ports
  const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
  const int threads = a.threads > 0 ? a.threads : std::max(1, static_cast<int>(cores) / jobs);
  const std::string exe = selfExe();

  std::vector<std::size_t> todo;
  int kept = 0;
  for (std::size_t i = 0; i < cells.size(); ++i) {
    if (fs::exists(fs::path(out) / "cells" / cells[i].id / "done.json"))
      ++kept;
    else
      todo.push_back(i);
  }
  struct sigaction sa {
  }, oldInt{}, oldTerm{};
  sa.sa_handler = onSignal;
  sigaction(SIGINT, &sa, &oldInt);
  sigaction(SIGTERM, &sa, &oldTerm);

  const bool tty = isatty(STDOUT_FILENO) && !a.quiet;
  const auto start = Clock::now();
  std::map<pid_t, Running> running;
  std::vector<std::string> failed;
  std::size_t next = 0, finished = 0;
  double cellSecondsSum = 0;
  auto progress = [&] {
    if (a.quiet) return;
    const std::size_t done = static_cast<std::size_t>(kept) + finished;
    const int width = 30;
    const int filled = static_cast<int>(width * done / std::max<std::size_t>(1, cells.size()));
    const double elapsed = std::chrono::duration<double>(Clock::now() - start).count();
    std::string eta = "?";
    if (finished > 0) {
      const double perCell = cellSecondsSum / static_cast<double>(finished);
      const double left = static_cast<double>(todo.size() - finished) * perCell / jobs;
      eta = duration(left);
    }
    char line[256];
    std::snprintf(line, sizeof line,
                  "[%s%s] %zu/%zu cells (%d kept, %zu failed, %zu running)  %s elapsed, eta %s",
                  std::string(static_cast<std::size_t>(filled), '#').c_str(),
                  std::string(static_cast<std::size_t>(width - filled), '.').c_str(), done,
                  cells.size(), kept, failed.size(), running.size(), duration(elapsed).c_str(),
                  eta.c_str());
    if (tty)
      std::cout << "\r" << line << "   " << std::flush;
    else
      std::cout << line << "\n" << std::flush;
  };
  progress();
  while ((next < todo.size() && !gInterrupted) || !running.empty()) {
    while (!gInterrupted && next < todo.size() && static_cast<int>(running.size()) < jobs) {
      const std::size_t i = todo[next++];
      const fs::path dir = fs::path(out) / "cells" / cells[i].id;
      fs::create_directories(dir, ec);
      const std::string cfg = (dir / "config.yaml").string();
      std::string header = "# sweep " + spec.name + ", cell " + cells[i].id + ":";
      for (const auto& o : cells[i].overrides) header += " " + o;
      writeFile(cfg, header + "\n" + cellConfigs[i]);
      std::vector<std::string> argv = {exe, spec.mode, cfg, "--out", dir.string(), "--quiet"};
      if (spec.mode == "sim") {
        argv.insert(argv.end(), {"--no-models", "--threads", std::to_string(threads)});
      }
      const pid_t pid = spawn(argv, (dir / "log.txt").string());
      if (pid < 0) {
        failed.push_back(cells[i].id + " (fork failed)");
        continue;
      }
      running[pid] = {i, Clock::now()};
    }
    int status = 0;
    const pid_t pid = ::waitpid(-1, &status, 0);
    if (pid < 0) {
      if (errno == EINTR) continue;
      break;
    }
    auto it = running.find(pid);
    if (it == running.end()) continue;
    const std::size_t i = it->second.cell;
    const double secs = std::chrono::duration<double>(Clock::now() - it->second.start).count();
    running.erase(it);
    ++finished;
    cellSecondsSum += secs;
    const fs::path dir = fs::path(out) / "cells" / cells[i].id;
    if (WIFEXITED(status) && WEXITSTATUS(status) == 0) {
      nlohmann::json done;
      done["id"] = cells[i].id;
      done["labels"] = cells[i].labels;
      done["overrides"] = cells[i].overrides;
      done["seconds"] = secs;
      writeFile((dir / "done.json").string(), done.dump(2) + "\n");
    } else {
      std::string why = WIFEXITED(status) ? "exit " + std::to_string(WEXITSTATUS(status))
                                          : "signal " + std::to_string(WTERMSIG(status));
      failed.push_back(cells[i].id + " (" + why + ", see " + (dir / "log.txt").string() + ")");
    }
    progress();
  }
  if (tty) std::cout << "\n";
  sigaction(SIGINT, &oldInt, nullptr);
  sigaction(SIGTERM, &oldTerm, nullptr);

  // The tables, from every finished cell (this run's and kept ones).
  std::ostringstream results, cellsCsv;
  std::string axisHeader;
  for (const auto& ax : spec.axes) axisHeader += sweep::csvField(ax.key) + ",";
  results << "cell," << axisHeader
          << "round,sim_time_s,wall_time_s,bytes_sent_per_peer,train_loss,test_accuracy,"
             "averaged_model_accuracy,consensus_distance,spectral_gap\n";
  cellsCsv
      << "cell," << axisHeader
      << "status,rounds,sim_time_s,wall_time_s,bytes_sent_per_peer,test_accuracy,averaged_model_"
         "accuracy,"
         "consensus_distance,spectral_gap,target_accuracy,rounds_to_target,sim_time_to_target_s,"
         "wall_time_to_target_s,bytes_to_target_per_peer\n";
  int tabulated = 0;
  for (const auto& c : cells) {
    const fs::path dir = fs::path(out) / "cells" / c.id;
    std::string labels;
    for (const auto& l : c.labels) labels += sweep::csvField(l) + ",";
    if (!fs::exists(dir / "done.json")) {
      cellsCsv << c.id << "," << labels << (gInterrupted ? "interrupted" : "failed")
               << ",,,,,,,,,,,,,\n";
      continue;
    }
    std::optional<double> gap;
    auto summary = nlohmann::json::parse(readFile((dir / "summary.json").string()), nullptr, false);
    if (summary.is_object() && summary.contains("spectral_gap") &&
        summary["spectral_gap"].is_number()) {
      gap = summary["spectral_gap"].get<double>();
    }
    auto points = sweep::readEvalPoints(dir.string());
    if (!points.isOk()) {
      cellsCsv << c.id << "," << labels << "unreadable,,,,,,,,,,,,,\n";
      continue;
    }
    ++tabulated;
    for (const auto& p : *points) {
      results << c.id << "," << labels << p.round << "," << sweep::csvNumber(p.simTime) << ","
              << sweep::csvNumber(p.wallTime) << "," << sweep::csvNumber(p.bytesSentPerPeer) << ","
              << sweep::csvNumber(p.trainLoss) << "," << sweep::csvNumber(p.testAccuracy) << ","
              << sweep::csvNumber(p.averagedAccuracy) << ","
              << sweep::csvNumber(p.consensusDistance) << "," << sweep::csvNumber(gap) << "\n";
    }
    const sweep::EvalPoint last = points->empty() ? sweep::EvalPoint{} : points->back();
    cellsCsv << c.id << "," << labels << "done," << last.round << ","
             << sweep::csvNumber(last.simTime) << "," << sweep::csvNumber(last.wallTime) << ","
             << sweep::csvNumber(last.bytesSentPerPeer) << ","
             << sweep::csvNumber(last.testAccuracy) << ","
             << sweep::csvNumber(last.averagedAccuracy) << ","
             << sweep::csvNumber(last.consensusDistance) << "," << sweep::csvNumber(gap) << ","
             << sweep::csvNumber(spec.targetAccuracy) << ",";
    std::optional<sweep::EvalPoint> hit;
    if (spec.targetAccuracy) hit = sweep::firstReaching(*points, *spec.targetAccuracy);
    if (hit) {
      cellsCsv << hit->round << "," << sweep::csvNumber(hit->simTime) << ","
               << sweep::csvNumber(hit->wallTime) << "," << sweep::csvNumber(hit->bytesSentPerPeer)
               << "\n";
    } else {
      cellsCsv << ",,,\n";
    }
  }
  writeFile((fs::path(out) / "results.csv").string(), results.str());
  writeFile((fs::path(out) / "cells.csv").string(), cellsCsv.str());

  const double elapsed = std::chrono::duration<double>(Clock::now() - start).count();
  std::cout << "grapevine sweep: " << finished - failed.size() << " cells ran, " << kept
            << " kept, " << failed.size() << " failed, in " << duration(elapsed) << "\n"
            << "  " << out << "/results.csv  (" << tabulated << " cells, one row per evaluation)\n"
            << "  " << out << "/cells.csv\n"
            << "  plots: grapevine plot " << out << "\n";
  for (const auto& f : failed) std::cerr << "grapevine sweep: cell " << f << "\n";
  if (gInterrupted) {
    std::cerr << "grapevine sweep: interrupted; run the same command again to resume\n";
    return 130;
  }
  return failed.empty() ? kExitOk : kExitFailure;
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
