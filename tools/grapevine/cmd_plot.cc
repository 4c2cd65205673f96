// `grapevine plot DIR [--color KEY] [--panel KEY]`: PNG plots of a sweep's results.csv with gnuplot
// (Debian's gnuplot-nox, installed by tools/install-deps). Accuracy and consensus distance against
// rounds, bytes sent per peer and time; one line per cell, coloured by one swept key, one panel per
// value of another, the mean over seeds (run.seed) with a band from the lowest to the highest seed.
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "tools/grapevine/command.h"

namespace grapevine::cli {
namespace {

namespace fs = std::filesystem;

struct PlotArgs {
  std::string dir;
  std::string color;
  std::string panel;
};

std::vector<std::string> splitCsvLine(const std::string& line) {
  std::vector<std::string> out;
  std::string cur;
  bool quoted = false;
  for (std::size_t i = 0; i < line.size(); ++i) {
    const char c = line[i];
    if (quoted) {
      if (c == '"' && i + 1 < line.size() && line[i + 1] == '"') {
        cur += '"';
        ++i;
      } else if (c == '"') {
        quoted = false;
      } else {
        cur += c;
      }
    } else if (c == '"') {
      quoted = true;
    } else if (c == ',') {
      out.push_back(cur);
      cur.clear();
    } else {
      cur += c;
    }
  }
  out.push_back(cur);
  return out;
}

// gnuplot single-quoted string for file names (no escapes inside but '' for a quote).
std::string gpath(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("''") : std::string(1, c);
  return q + "'";
}

// gnuplot string literal for text shown in a plot (enhanced-text control characters escaped).
std::string gq(const std::string& s) {
  std::string q = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') q += '\\';
    if (c == '_' || c == '^' || c == '{' || c == '}' || c == '@' || c == '&' || c == '~')
      q += "\\\\";
    q += c;
  }
  return q + "\"";
}

struct Stat {
  double sum = 0, lo = INFINITY, hi = -INFINITY;
  int n = 0;
  void add(double v) {
    if (!std::isfinite(v)) return;
    sum += v;
    lo = std::min(lo, v);
    hi = std::max(hi, v);
    ++n;
  }
  double mean() const { return n ? sum / n : NAN; }
};

struct Point {
  Stat bytes, time, acc, cons;
};

struct Line {
  std::string color, panel, rest;  // labels
  std::map<long long, Point> byRound;
  int seeds = 0;
  std::set<std::string> cells;
};

int runPlot(const PlotArgs& a) {
  const fs::path dir(a.dir);
  std::ifstream meta(dir / "sweep.json");
  std::ifstream csv(dir / "results.csv");
  if (!meta || !csv) {
    std::cerr << "grapevine plot: " << a.dir
              << " has no sweep.json and results.csv (run grapevine sweep first)\n";
    return kExitBadInput;
  }
  auto m = nlohmann::json::parse(meta, nullptr, false);
  if (!m.is_object() || !m.contains("axes")) {
    std::cerr << "grapevine plot: " << (dir / "sweep.json").string()
              << " is not a sweep description\n";
    return kExitBadInput;
  }
  std::vector<std::string> axes;
  for (const auto& ax : m["axes"]) axes.push_back(ax["key"].get<std::string>());
  auto isSeed = [](const std::string& k) { return k == "run.seed" || k == "seed"; };
  std::vector<std::string> grouping;
  for (const auto& k : axes) {
    if (!isSeed(k)) grouping.push_back(k);
  }
  auto known = [&](const std::string& k) {
    return std::find(axes.begin(), axes.end(), k) != axes.end();
  };
  for (const std::string* k : {&a.color, &a.panel}) {
    if (!k->empty() && !known(*k)) {
      std::cerr << "grapevine plot: " << *k << " is not a swept key (swept: ";
      for (std::size_t i = 0; i < axes.size(); ++i) std::cerr << (i ? ", " : "") << axes[i];
      std::cerr << ")\n";
      return kExitBadInput;
    }
  }
  std::string colorKey = a.color, panelKey = a.panel;
  for (const auto& k : grouping) {
    if (colorKey.empty() && k != panelKey) colorKey = k;
  }
  for (const auto& k : grouping) {
    if (panelKey.empty() && k != colorKey) panelKey = k;
  }

  // results.csv: cell, <axes...>, round, sim_time_s, wall_time_s, bytes_sent_per_peer, train_loss,
  // test_accuracy, averaged_model_accuracy, consensus_distance, spectral_gap
  std::string line;
  std::getline(csv, line);
  const auto header = splitCsvLine(line);
  auto col = [&](const std::string& name) -> int {
    for (std::size_t i = 0; i < header.size(); ++i) {
      if (header[i] == name) return static_cast<int>(i);
    }
    return -1;
  };
  const int cRound = col("round"), cSim = col("sim_time_s"), cWall = col("wall_time_s"),
            cBytes = col("bytes_sent_per_peer"), cAcc = col("test_accuracy"),
            cCons = col("consensus_distance");
  if (cRound < 0 || cBytes < 0 || cAcc < 0 || cCons < 0) {
    std::cerr << "grapevine plot: " << (dir / "results.csv").string()
              << " lacks the expected columns\n";
    return kExitBadInput;
  }
  std::map<std::string, Line> lines;  // by group key, in label order
  std::vector<std::string> order;
  bool anySim = false, anyAcc = false, anyCons = false;
  auto number = [](const std::string& s) {
    return s.empty() ? NAN : std::strtod(s.c_str(), nullptr);
  };
  while (std::getline(csv, line)) {
    if (line.empty()) continue;
    const auto f = splitCsvLine(line);
    if (f.size() != header.size()) continue;
    std::string key, color, panel, rest;
    for (const auto& k : grouping) {
      const std::string& v = f[static_cast<std::size_t>(col(k))];
      key += v + "\x1f";
      if (k == colorKey)
        color = v;
      else if (k == panelKey)
        panel = v;
      else
        rest += (rest.empty() ? "" : ", ") + v;
    }
    auto [it, fresh] = lines.try_emplace(key);
    Line& l = it->second;
    if (fresh) {
      l.color = color;
      l.panel = panel;
      l.rest = rest;
      order.push_back(key);
    }
    l.cells.insert(f[0]);
    Point& p = l.byRound[static_cast<long long>(number(f[static_cast<std::size_t>(cRound)]))];
    const double sim = cSim >= 0 ? number(f[static_cast<std::size_t>(cSim)]) : NAN;
    const double wall = cWall >= 0 ? number(f[static_cast<std::size_t>(cWall)]) : NAN;
    anySim = anySim || std::isfinite(sim);
    p.time.add(std::isfinite(sim) ? sim : wall);
    p.bytes.add(number(f[static_cast<std::size_t>(cBytes)]) / (1024.0 * 1024.0));
    const double acc = number(f[static_cast<std::size_t>(cAcc)]);
    const double cons = number(f[static_cast<std::size_t>(cCons)]);
    anyAcc = anyAcc || std::isfinite(acc);
    anyCons = anyCons || (std::isfinite(cons) && cons > 0);
    p.acc.add(acc);
    p.cons.add(cons > 0 ? cons : NAN);
  }
  if (lines.empty()) {
    std::cerr << "grapevine plot: " << (dir / "results.csv").string()
              << " has no rows (no finished cells)\n";
    return kExitFailure;
  }

  // Colours and panels in first-seen order; the data, one file per line.
  std::vector<std::string> colors, panels;
  for (const auto& k : order) {
    const Line& l = lines[k];
    if (std::find(colors.begin(), colors.end(), l.color) == colors.end()) colors.push_back(l.color);
    if (std::find(panels.begin(), panels.end(), l.panel) == panels.end()) panels.push_back(l.panel);
  }
  const fs::path plots = dir / "plots";
  fs::create_directories(plots / "data");
  for (std::size_t i = 0; i < order.size(); ++i) {
    Line& l = lines[order[i]];
    l.seeds = static_cast<int>(l.cells.size());
    std::ofstream d(plots / "data" / ("line" + std::to_string(i) + ".dat"));
    d << "# round bytes_MiB time_s acc_mean acc_min acc_max cons_mean cons_min cons_max\n";
    for (const auto& [round, p] : l.byRound) {
      auto v = [](double x) { return std::isfinite(x) ? x : NAN; };
      d << round << " " << v(p.bytes.mean()) << " " << v(p.time.mean()) << " " << v(p.acc.mean())
        << " " << v(p.acc.lo) << " " << v(p.acc.hi) << " " << v(p.cons.mean()) << " "
        << v(p.cons.lo) << " " << v(p.cons.hi) << "\n";
    }
  }

  const std::string timeLabel = anySim ? "simulated time (s)" : "wall time (s)";
  struct X {
    const char* name;
    int column;
    std::string label;
    bool log;
  };
  const std::vector<X> xs = {{"rounds", 1, "round", false},
                             {"bytes", 2, "bytes sent per peer (MiB)", true},
                             {"time", 3, timeLabel, false}};
  struct Y {
    const char* name;
    int mean, lo, hi;
    std::string label;
    bool log;
    bool present;
  };
  const std::vector<Y> ys = {
      {"accuracy", 4, 5, 6, "test accuracy (mean over peers)", false, anyAcc},
      {"consensus", 7, 8, 9, "consensus distance (mean |x_i - mean|^2 / |mean|^2)", true, anyCons}};
  const int cols = panels.size() <= 1   ? 1
                   : panels.size() <= 4 ? static_cast<int>(panels.size())
                                        : 3;
  const int rows = static_cast<int>((panels.size() + static_cast<std::size_t>(cols) - 1) /
                                    static_cast<std::size_t>(cols));
  std::ostringstream gp;
  std::vector<std::string> made;
  for (const auto& y : ys) {
    if (!y.present) continue;
    for (const auto& x : xs) {
      const std::string png = std::string(y.name) + "_vs_" + x.name + ".png";
      made.push_back((plots / png).string());
      gp << "reset\nset terminal pngcairo size " << 700 * cols << "," << 420 * rows + 40
         << " font 'sans,10'\nset output " << gpath((plots / png).string()) << "\n";
      gp << "set multiplot layout " << rows << "," << cols << " title "
         << gq(m.value("name", std::string("sweep")) + ": " + y.name + " against " + x.label +
               (colorKey.empty() ? "" : " (colour: " + colorKey + ")"))
         << " font 'sans,12'\n";
      // The legend outside the plot: lines never hide behind it.
      gp << "set grid\nset key outside right top font 'sans,9'\n"
         << "set style fill transparent solid 0.15 noborder\n";
      gp << "set xlabel " << gq(x.label) << "\nset ylabel " << gq(y.label) << "\n";
      gp << (x.log ? "set logscale x\n" : "unset logscale x\n");
      gp << (y.log ? "set logscale y\nset format y '10^{%L}'\n"
                   : "unset logscale y\nset format y '%g'\n");
      for (const auto& panel : panels) {
        gp << "set title " << gq(panelKey.empty() ? "" : panelKey + " = " + panel) << "\n";
        std::vector<std::string> parts;
        for (std::size_t i = 0; i < order.size(); ++i) {
          const Line& l = lines[order[i]];
          if (l.panel != panel) continue;
          // Twelve distinct colours (gnuplot's default cycle repeats after eight); dashes after
          // that.
          static const char* kPalette[] = {"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e",
                                           "#9467bd", "#8c564b", "#e377c2", "#17becf",
                                           "#7f7f7f", "#bcbd22", "#000000", "#aec7e8"};
          const auto idx = static_cast<std::size_t>(
              std::find(colors.begin(), colors.end(), l.color) - colors.begin());
          const std::string ci =
              std::string("rgb '") + kPalette[idx % 12] + "' dt " + std::to_string(idx / 12 + 1);
          const std::string file =
              gpath((plots / "data" / ("line" + std::to_string(i) + ".dat")).string());
          std::string title = l.color + (l.rest.empty() ? "" : " (" + l.rest + ")");
          if (title.empty()) title = "all";
          if (l.seeds > 1) {
            parts.push_back(file + " using " + std::to_string(x.column) + ":" +
                            std::to_string(y.lo) + ":" + std::to_string(y.hi) +
                            " with filledcurves lc " + ci.substr(0, ci.find(" dt")) + " notitle");
            title += " (" + std::to_string(l.seeds) + " seeds)";
          }
          parts.push_back(file + " using " + std::to_string(x.column) + ":" +
                          std::to_string(y.mean) + " with linespoints pt 7 ps 0.4 lw 2 lc " + ci +
                          " title " + gq(title));
        }
        gp << "plot ";
        for (std::size_t k = 0; k < parts.size(); ++k) gp << (k ? ", \\\n     " : "") << parts[k];
        gp << "\n";
      }
      gp << "unset multiplot\nset output\n";
    }
  }
  const fs::path script = plots / "plots.gp";
  {
    std::ofstream s(script);
    s << gp.str();
  }
  const std::string cmd = "gnuplot " + script.string() + " 2>" + (plots / "gnuplot.log").string();
  const int rc = std::system(cmd.c_str());
  if (rc != 0) {
    std::cerr
        << "grapevine plot: gnuplot failed (is gnuplot-nox installed? tools/install-deps); see "
        << (plots / "gnuplot.log").string() << " and " << script.string() << "\n";
    return kExitFailure;
  }
  std::cout << "grapevine plot: " << lines.size() << " lines";
  if (!colorKey.empty()) std::cout << ", colour: " << colorKey;
  if (!panelKey.empty()) std::cout << ", panels: " << panelKey;
  std::cout << "\n";
  if (!anyAcc)
    std::cout << "  (no accuracy in results: the workload has none; consensus plots only)\n";
  for (const auto& p : made) std::cout << "  " << p << "\n";
  return kExitOk;
}

}  // namespace

Command registerPlot(CLI::App& root) {
  auto args = std::make_shared<PlotArgs>();
  CLI::App* app = root.add_subcommand("plot", "PNG plots of a sweep's results (gnuplot)");
  app->add_option("dir", args->dir, "Output folder of grapevine sweep")->required();
  app->add_option("--color", args->color, "Swept key that colours the lines (default: the first)");
  app->add_option("--panel", args->panel,
                  "Swept key with one panel per value (default: the second)");
  return {app, [args] { return runPlot(*args); }};
}

}  // namespace grapevine::cli
