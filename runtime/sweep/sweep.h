// Sweeps: a base config plus lists of values for any keys, expanded into cells (every combination),
// and the tables a finished sweep is summarised in (results.csv, cells.csv). Running the cells is
// the CLI's job (tools/grapevine/cmd_sweep.cc); this library is pure and tested on its own.
//
// Sweep file:
//   base: ../torus16.yaml          # config file, relative to the sweep file (or `config:` inline)
//   set: { run.rounds: 600 }       # applied to every cell
//   sweep:                         # axes, expanded in file order (the last one varies fastest)
//     topology.kind: [ring, torus]             # a scalar value sets the key
//     compression:                             # a mapping value sets keys below the axis key;
//       - { label: top-1%, method: top-k, ratio: 0.01 }   # `label` names it in tables and plots;
//       - { label: sign, method: sign, algorithm.consensus_step: 0.2 }   # a dotted key is a full
//       path
//     run.seed: [1, 2, 3]
//   target_accuracy: 0.85          # cells.csv: rounds, time and bytes to reach it
//   mode: sim                      # or launch; --mode overrides
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "runtime/common/status.h"
#include "runtime/config/diagnostics.h"

namespace grapevine::sweep {

struct AxisValue {
  std::string label;                                      // the value's name in tables and plots
  std::vector<std::pair<std::string, std::string>> sets;  // key path -> YAML value text
};

struct Axis {
  std::string key;  // "topology.kind", or a prefix such as "compression" for mapping values
  std::vector<AxisValue> values;
};

struct SweepSpec {
  std::string path;                // the sweep file
  std::string name;                // `name:`, else the file's stem
  std::string baseConfig;          // resolved path of `base:` ("" when `config:` is inline)
  std::string inlineConfig;        // `config:` as YAML text
  std::vector<std::string> fixed;  // `set:` as key=value
  std::vector<Axis> axes;
  std::optional<double> targetAccuracy;
  std::string mode = "sim";
};

struct Cell {
  int index = 0;
  std::string id;  // "007-1a2b3c4d": index and a hash of everything that defines it
  std::vector<std::string> labels;     // one per axis
  std::vector<std::string> overrides;  // key=value, `set:` first, then the axes'
};

// Parses a sweep file. Errors are diagnostics with file:line:col and the key path.
Result<SweepSpec> loadSweep(const std::string& path, std::vector<config::Diagnostic>* diagnostics);
Result<SweepSpec> parseSweep(const std::string& text, const std::string& path,
                             std::vector<config::Diagnostic>* diagnostics);

// Every combination, in file order. `baseText` (the base config's bytes) goes into each cell's
// hash, so editing the base config re-runs the cells instead of keeping stale results.
std::vector<Cell> expand(const SweepSpec& spec, const std::string& baseText);

// One evaluation point of a cell (sim: DIR/evals.jsonl; launch: aggregated from peer-*.jsonl).
struct EvalPoint {
  long long round = 0;
  std::optional<double> simTime, wallTime, bytesSentPerPeer, trainLoss, testAccuracy,
      averagedAccuracy, consensusDistance;
};

// Reads a finished cell's evaluation points, in round order.
Result<std::vector<EvalPoint>> readEvalPoints(const std::string& cellDir);

// The first point at or above `target` (by mean test accuracy), if any.
std::optional<EvalPoint> firstReaching(const std::vector<EvalPoint>& points, double target);

// CSV field: quoted when it holds a comma, quote or newline; numbers with up to 9 significant
// digits.
std::string csvField(const std::string& s);
std::string csvNumber(const std::optional<double>& v);

}  // namespace grapevine::sweep
