// `grapevine plot DIR [--color KEY] [--panel KEY]`: PNG plots of a sweep's results.csv with gnuplot
// (one run's folder, without sweep.json: plot_run.h)
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
#include "tools/grapevine/plot_run.h"

namespace grapevine::cli {

std::string gpath(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("''") : std::string(1, c);
  return q + "'";
}

int runGnuplot(const std::filesystem::path& plots, const std::string& text) {
  const std::filesystem::path script = plots / "plots.gp";
  {
    std::ofstream s(script);
    s << text;
  }
  const std::string cmd = "gnuplot " + script.string() + " 2>" + (plots / "gnuplot.log").string();
  const int rc = std::system(cmd.c_str());
  if (rc != 0) {
    std::cerr
        << "grapevine plot: gnuplot failed (is gnuplot-nox installed? tools/install-deps); see "
        << (plots / "gnuplot.log").string() << " and " << script.string() << "\n";
    return kExitFailure;
  }
  return kExitOk;
}

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

// What sweep.json says: the swept keys, which of them group lines (all but the seed), and the keys
// that colour the lines and split the panels (the first two grouping keys unless given).
struct Sweep {
  std::string name;
  std::vector<std::string> axes;
  std::vector<std::string> grouping;
  std::string colorKey, panelKey;
};

bool isSeedKey(const std::string& k) { return k == "run.seed" || k == "seed"; }

// Reads DIR/sweep.json into sweep; kExitOk, or the exit code after a message on stderr.
int readSweep(const PlotArgs& a, const fs::path& dir, std::istream& meta, Sweep& sweep) {
  auto m = nlohmann::json::parse(meta, nullptr, false);
  if (!m.is_object() || !m.contains("axes")) {
    std::cerr << "grapevine plot: " << (dir / "sweep.json").string()
              << " is not a sweep description\n";
    return kExitBadInput;
  }
  sweep.name = m.value("name", std::string("sweep"));
  auto& axes = sweep.axes;
  for (const auto& ax : m["axes"]) axes.push_back(ax["key"].get<std::string>());
  for (const auto& k : axes) {
    if (!isSeedKey(k)) sweep.grouping.push_back(k);
  }
  for (const std::string* k : {&a.color, &a.panel}) {
    if (!k->empty() && std::find(axes.begin(), axes.end(), *k) == axes.end()) {
      std::cerr << "grapevine plot: " << *k << " is not a swept key (swept: ";
      for (std::size_t i = 0; i < axes.size(); ++i) std::cerr << (i ? ", " : "") << axes[i];
      std::cerr << ")\n";
      return kExitBadInput;
    }
  }
  sweep.colorKey = a.color;
  sweep.panelKey = a.panel;
  for (const auto& k : sweep.grouping) {
    if (sweep.colorKey.empty() && k != sweep.panelKey) sweep.colorKey = k;
  }
  for (const auto& k : sweep.grouping) {
    if (sweep.panelKey.empty() && k != sweep.colorKey) sweep.panelKey = k;
  }
  return kExitOk;
}

// The lines of results.csv, grouped by every swept key but the seed, in first-seen order.
struct Lines {
  std::map<std::string, Line> byKey;  // by group key, in label order
  std::vector<std::string> order;
  bool anySim = false, anyAcc = false, anyCons = false;
};

// Column indices of results.csv: cell, <axes...>, round, sim_time_s, wall_time_s,
// bytes_sent_per_peer, train_loss, test_accuracy, averaged_model_accuracy, consensus_distance,
// spectral_gap. -1 where absent.
struct Columns {
  std::vector<std::string> header;
  int round = -1, sim = -1, wall = -1, bytes = -1, acc = -1, cons = -1;
  int of(const std::string& name) const {
    for (std::size_t i = 0; i < header.size(); ++i) {
      if (header[i] == name) return static_cast<int>(i);
    }
    return -1;
  }
};

double csvNumber(const std::string& s) { return s.empty() ? NAN : std::strtod(s.c_str(), nullptr); }

// Adds one row of results.csv (fields f) to its line.
void addRow(const Sweep& sweep, const Columns& cols, const std::vector<std::string>& f,
            Lines& lines) {
  auto field = [&f](int c) -> const std::string& { return f[static_cast<std::size_t>(c)]; };
  std::string key, color, panel, rest;
  for (const auto& k : sweep.grouping) {
    const std::string& v = field(cols.of(k));
    key += v + "\x1f";
    if (k == sweep.colorKey)
      color = v;
    else if (k == sweep.panelKey)
      panel = v;
    else
      rest += (rest.empty() ? "" : ", ") + v;
  }
  auto [it, fresh] = lines.byKey.try_emplace(key);
  Line& l = it->second;
  if (fresh) {
    l.color = color;
    l.panel = panel;
    l.rest = rest;
    lines.order.push_back(key);
  }
  l.cells.insert(f[0]);
  Point& p = l.byRound[static_cast<long long>(csvNumber(field(cols.round)))];
  const double sim = cols.sim >= 0 ? csvNumber(field(cols.sim)) : NAN;
  const double wall = cols.wall >= 0 ? csvNumber(field(cols.wall)) : NAN;
  lines.anySim = lines.anySim || std::isfinite(sim);
  p.time.add(std::isfinite(sim) ? sim : wall);
  p.bytes.add(csvNumber(field(cols.bytes)) / (1024.0 * 1024.0));
  const double acc = csvNumber(field(cols.acc));
  const double cons = csvNumber(field(cols.cons));
  lines.anyAcc = lines.anyAcc || std::isfinite(acc);
  lines.anyCons = lines.anyCons || (std::isfinite(cons) && cons > 0);
  p.acc.add(acc);
  p.cons.add(cons > 0 ? cons : NAN);
}

// Reads DIR/results.csv into lines; kExitOk, or the exit code after a message on stderr.
int readResults(const fs::path& dir, std::istream& csv, const Sweep& sweep, Lines& lines) {
  std::string line;
  std::getline(csv, line);
  Columns cols;
  cols.header = splitCsvLine(line);
  cols.round = cols.of("round");
  cols.sim = cols.of("sim_time_s");
  cols.wall = cols.of("wall_time_s");
  cols.bytes = cols.of("bytes_sent_per_peer");
  cols.acc = cols.of("test_accuracy");
  cols.cons = cols.of("consensus_distance");
  if (cols.round < 0 || cols.bytes < 0 || cols.acc < 0 || cols.cons < 0) {
    std::cerr << "grapevine plot: " << (dir / "results.csv").string()
              << " lacks the expected columns\n";
    return kExitBadInput;
  }
  while (std::getline(csv, line)) {
    if (line.empty()) continue;
    const auto f = splitCsvLine(line);
    if (f.size() != cols.header.size()) continue;
    addRow(sweep, cols, f, lines);
  }
  if (lines.byKey.empty()) {
    std::cerr << "grapevine plot: " << (dir / "results.csv").string()
              << " has no rows (no finished cells)\n";
    return kExitFailure;
  }
  return kExitOk;
}

fs::path lineDataFile(const fs::path& plots, std::size_t i) {
  return plots / "data" / ("line" + std::to_string(i) + ".dat");
}

// The data, one file per line (PLOTS/data/line<i>.dat); sets each line's seed count.
void writeLineData(const fs::path& plots, Lines& lines) {
  fs::create_directories(plots / "data");
  for (std::size_t i = 0; i < lines.order.size(); ++i) {
    Line& l = lines.byKey[lines.order[i]];
    l.seeds = static_cast<int>(l.cells.size());
    std::ofstream d(lineDataFile(plots, i));
    d << "# round bytes_MiB time_s acc_mean acc_min acc_max cons_mean cons_min cons_max\n";
    for (const auto& [round, p] : l.byRound) {
      auto v = [](double x) { return std::isfinite(x) ? x : NAN; };
      d << round << " " << v(p.bytes.mean()) << " " << v(p.time.mean()) << " " << v(p.acc.mean())
        << " " << v(p.acc.lo) << " " << v(p.acc.hi) << " " << v(p.cons.mean()) << " "
        << v(p.cons.lo) << " " << v(p.cons.hi) << "\n";
    }
  }
}

// An x axis: a column of the data files.
struct XAxis {
  const char* name;
  int column;
  std::string label;
  bool log;
};

// A y axis: the mean and band columns of the data files; present when the results have it.
struct YAxis {
  const char* name;
  int mean, lo, hi;
  std::string label;
  bool log;
  bool present;
};

// The figure's layout and legend order: colours and panels in first-seen order.
struct Layout {
  std::vector<std::string> colors, panels;
  int cols = 1, rows = 1;
};

Layout layoutOf(Lines& lines) {
  Layout out;
  for (const auto& k : lines.order) {
    const Line& l = lines.byKey[k];
    auto& colors = out.colors;
    auto& panels = out.panels;
    if (std::find(colors.begin(), colors.end(), l.color) == colors.end()) colors.push_back(l.color);
    if (std::find(panels.begin(), panels.end(), l.panel) == panels.end()) panels.push_back(l.panel);
  }
  const std::size_t np = out.panels.size();
  out.cols = np <= 1 ? 1 : np <= 4 ? static_cast<int>(np) : 3;
  out.rows = static_cast<int>((np + static_cast<std::size_t>(out.cols) - 1) /
                              static_cast<std::size_t>(out.cols));
  return out;
}

// The gnuplot plot clauses of line i (a band when it has several seeds, then the mean).
void appendLineClauses(const fs::path& plots, const Layout& layout, const Line& l, std::size_t i,
                       const XAxis& x, const YAxis& y, std::vector<std::string>& parts) {
  // Twelve distinct colours (gnuplot's default cycle repeats after eight); dashes after that.
  static const char* kPalette[] = {"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e",
                                   "#9467bd", "#8c564b", "#e377c2", "#17becf",
                                   "#7f7f7f", "#bcbd22", "#000000", "#aec7e8"};
  const auto idx = static_cast<std::size_t>(
      std::find(layout.colors.begin(), layout.colors.end(), l.color) - layout.colors.begin());
  const std::string ci =
      std::string("rgb '") + kPalette[idx % 12] + "' dt " + std::to_string(idx / 12 + 1);
  const std::string file = gpath(lineDataFile(plots, i).string());
  std::string title = l.color + (l.rest.empty() ? "" : " (" + l.rest + ")");
  if (title.empty()) title = "all";
  if (l.seeds > 1) {
    parts.push_back(file + " using " + std::to_string(x.column) + ":" + std::to_string(y.lo) + ":" +
                    std::to_string(y.hi) + " with filledcurves lc " + ci.substr(0, ci.find(" dt")) +
                    " notitle");
    title += " (" + std::to_string(l.seeds) + " seeds)";
  }
  parts.push_back(file + " using " + std::to_string(x.column) + ":" + std::to_string(y.mean) +
                  " with linespoints pt 7 ps 0.4 lw 2 lc " + ci + " title " + gq(title));
}

// One PNG: y against x, one panel per panel value.
void appendFigure(const fs::path& plots, const Sweep& sweep, Lines& lines, const Layout& layout,
                  const XAxis& x, const YAxis& y, const std::string& png, std::ostream& gp) {
  gp << "reset\nset terminal pngcairo size " << 700 * layout.cols << "," << 420 * layout.rows + 40
     << " font 'sans,10'\nset output " << gpath((plots / png).string()) << "\n";
  gp << "set multiplot layout " << layout.rows << "," << layout.cols << " title "
     << gq(sweep.name + ": " + y.name + " against " + x.label +
           (sweep.colorKey.empty() ? "" : " (colour: " + sweep.colorKey + ")"))
     << " font 'sans,12'\n";
  // The legend outside the plot: lines never hide behind it.
  gp << "set grid\nset key outside right top font 'sans,9'\n"
     << "set style fill transparent solid 0.15 noborder\n";
  gp << "set xlabel " << gq(x.label) << "\nset ylabel " << gq(y.label) << "\n";
  gp << (x.log ? "set logscale x\n" : "unset logscale x\n");
  gp << (y.log ? "set logscale y\nset format y '10^{%L}'\n"
               : "unset logscale y\nset format y '%g'\n");
  for (const auto& panel : layout.panels) {
    gp << "set title " << gq(sweep.panelKey.empty() ? "" : sweep.panelKey + " = " + panel) << "\n";
    std::vector<std::string> parts;
    for (std::size_t i = 0; i < lines.order.size(); ++i) {
      const Line& l = lines.byKey[lines.order[i]];
      if (l.panel == panel) appendLineClauses(plots, layout, l, i, x, y, parts);
    }
    gp << "plot ";
    for (std::size_t k = 0; k < parts.size(); ++k) gp << (k ? ", \\\n     " : "") << parts[k];
    gp << "\n";
  }
  gp << "unset multiplot\nset output\n";
}

// The gnuplot script of every figure; made gets the PNG paths it writes.
std::string gnuplotScript(const fs::path& plots, const Sweep& sweep, Lines& lines,
                          std::vector<std::string>& made) {
  const Layout layout = layoutOf(lines);
  const std::string timeLabel = lines.anySim ? "simulated time (s)" : "wall time (s)";
  const std::vector<XAxis> xs = {{"rounds", 1, "round", false},
                                 {"bytes", 2, "bytes sent per peer (MiB)", true},
                                 {"time", 3, timeLabel, false}};
  const std::vector<YAxis> ys = {
      {"accuracy", 4, 5, 6, "test accuracy (mean over peers)", false, lines.anyAcc},
      {"consensus", 7, 8, 9, "consensus distance (mean |x_i - mean|^2 / |mean|^2)", true,
       lines.anyCons}};
  std::ostringstream gp;
  for (const auto& y : ys) {
    if (!y.present) continue;
    for (const auto& x : xs) {
      const std::string png = std::string(y.name) + "_vs_" + x.name + ".png";
      made.push_back((plots / png).string());
      appendFigure(plots, sweep, lines, layout, x, y, png, gp);
    }
  }
  return gp.str();
}

void printMade(const Sweep& sweep, const Lines& lines, const std::vector<std::string>& made) {
  std::cout << "grapevine plot: " << lines.byKey.size() << " lines";
  if (!sweep.colorKey.empty()) std::cout << ", colour: " << sweep.colorKey;
  if (!sweep.panelKey.empty()) std::cout << ", panels: " << sweep.panelKey;
  std::cout << "\n";
  if (!lines.anyAcc)
    std::cout << "  (no accuracy in results: the workload has none; consensus plots only)\n";
  for (const auto& p : made) std::cout << "  " << p << "\n";
}

int runPlot(const PlotArgs& a) {
  const fs::path dir(a.dir);
  std::ifstream meta(dir / "sweep.json");
  std::ifstream csv(dir / "results.csv");
  if (!meta && !csv) return plotRun(dir);  // one run's folder (or a message saying neither)
  if (!meta || !csv) {
    std::cerr << "grapevine plot: " << a.dir
              << " has only one of sweep.json and results.csv (an unfinished sweep?)\n";
    return kExitBadInput;
  }
  Sweep sweep;
  if (const int rc = readSweep(a, dir, meta, sweep); rc != kExitOk) return rc;
  Lines lines;
  if (const int rc = readResults(dir, csv, sweep, lines); rc != kExitOk) return rc;
  const fs::path plots = dir / "plots";
  writeLineData(plots, lines);
  std::vector<std::string> made;
  const std::string script = gnuplotScript(plots, sweep, lines, made);
  if (const int rc = runGnuplot(plots, script); rc != kExitOk) return rc;
  printMade(sweep, lines, made);
  return kExitOk;
}

}  // namespace

Command registerPlot(CLI::App& root) {
  auto args = std::make_shared<PlotArgs>();
  CLI::App* app =
      root.add_subcommand("plot", "PNG plots of a sweep's results, or of one run's (gnuplot)");
  app->add_option("dir", args->dir,
                  "Output folder of grapevine sweep, or of one run (launch, sim, summarize)")
      ->required();
  app->add_option("--color", args->color, "Swept key that colours the lines (default: the first)");
  app->add_option("--panel", args->panel,
                  "Swept key with one panel per value (default: the second)");
  return {app, [args] { return runPlot(*args); }};
}

}  // namespace grapevine::cli
