// Grapevine's C++ API: drive a gossip-training peer from your own training loop.
//
//   grapevine::Options o;
//   o.configPath = "run.yaml";                 // the same YAML as `grapevine launch`
//   grapevine::Peer peer(o);                   // rank from o.rank or GRAPEVINE_RANK, SLURM_PROCID, ...
//   peer.addTensor("w", w.data(), w.size());   // every parameter tensor, fp32, any sizes
//   peer.start();                              // connects; every peer starts from the lowest rank's values
//   for (int t = 0; t < peer.plannedRounds(); ++t) {
//     float loss = computeGradients();         // at the current values of the tensors
//     peer.step({gw.data()}, loss);            // Grapevine's optimizer step + one gossip round
//   }
//   peer.finalize(/*average=*/true);           // every live peer ends with the average model
//
// Two ways to step (docs/api.md):
//   step(grads)   Grapevine owns the optimizer (optimizer.* of the config, every momentum kind);
//   mix()         the caller owns it (any optimizer; its momentum is then local momentum): after the
//                 caller's step, one gossip round mixes the tensors' values.
// startStep()/startMix() + wait() split a round: the messages are in flight while the caller
// computes its next gradient (at the values before mixing), which is algorithm.overlap.
//
// Memory: Grapevine keeps the model in one flat buffer of its own. Registered tensors are read
// from the caller's memory before each round and written back after it (and after start()), unless
// the caller moves a tensor into Grapevine's buffer with bind(): then no copy is made.
//
// Threads: a Peer is used from one thread at a time (the caller's training thread). Grapevine runs
// one thread of its own per peer for the transports. Errors are thrown as grapevine::Error.
#pragma once

#include <cstddef>
#include <cstdint>
#include <limits>
#include <memory>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#define GRAPEVINE_API_VERSION 1

#if defined(_WIN32)
#define GRAPEVINE_EXPORT
#else
#define GRAPEVINE_EXPORT __attribute__((visibility("default")))
#endif

namespace grapevine {

// Every failure of a call is thrown as an Error; code() says what kind it was, stable across
// releases (the C API's grapevine_status uses the same values).
class GRAPEVINE_EXPORT Error : public std::runtime_error {
 public:
  enum class Code : int {
    kInvalidArgument = 1,     // a bad config, override, tensor, rank or argument
    kNotFound = 2,            // a file or tensor that does not exist
    kFailedPrecondition = 3,  // a call in the wrong state (e.g. step() before start())
    kUnavailable = 4,         // the network: a bootstrap that failed, a port in use
    kAborted = 5,             // training diverged (here or at a peer that told us)
    kInternal = 6,            // a bug: please report it
  };
  Error(Code code, const std::string& message) : std::runtime_error(message), code_(code) {}
  Code code() const { return code_; }

 private:
  Code code_;
};

struct Options {
  std::string configPath;  // a YAML config file; or, when empty,
  std::string configText;  // the YAML text itself; both empty: the file GRAPEVINE_CONFIG names
  // "key=value" overrides applied last, as `--set` does (e.g. "optimizer.lr=0.05").
  std::vector<std::string> overrides;
  // -1: from the environment: GRAPEVINE_RANK, SLURM_PROCID, OMPI_COMM_WORLD_RANK, PMIX_RANK.
  int rank = -1;
  // Records and the final model go to outDir; empty: GRAPEVINE_OUT, else the config's output.dir.
  std::string outDir;
  std::uint32_t incarnation = 0;  // restart count of this peer
  // Continue from checkpoints (checkpoint.every writes them, model and Grapevine's state), as
  // `grapevine peer --resume` does: every peer of the run agrees on the newest checkpoint round
  // they all have and continues after it (records kept up to it, the lr schedule where it was);
  // with none anywhere, all start at round 0. A peer whose neighbours are training already rejoins
  // them from its own newest checkpoint. Also set by GRAPEVINE_RESUME=1 (`grapevine launch
  // --resume` / `--max-restarts` ... -- COMMAND). Every peer of a whole-run resume must set it.
  bool resume = false;
  // A null gradient in step() leaves that tensor alone: no step, its momentum untouched (as torch
  // skips a parameter whose .grad is None). false: a null gradient is a zero gradient (weight decay
  // and momentum still move the tensor). With gradient tracking (a tracker needs every value's
  // gradient) it is a zero gradient either way.
  bool skipMissingGradients = false;
};

enum class EventKind : int {
  kSuspect = 1,   // a neighbour's message missed a round (round_timeout); the round went on
  kDead = 2,      // a neighbour's edge was dropped (closed, crashed, heartbeats stopped)
  kDiverged = 3,  // training diverged: the run stops (peer = where it was detected)
  kRevived = 4,   // a neighbour dropped for silence answers again: its edge is back
};

struct Event {
  EventKind kind = EventKind::kSuspect;
  int peer = -1;            // the neighbour (or the origin of a divergence)
  std::int64_t round = -1;  // the round in which it was seen
  std::string message;
};

struct Stats {
  std::int64_t rounds = 0;  // completed gossip rounds
  std::uint64_t bytesSent = 0;
  std::uint64_t bytesReceived = 0;
  std::uint64_t bytesDenseEquivalent = 0;  // what the same messages would take uncompressed
  std::uint64_t droppedFrames = 0;         // by every reason (corrupt, duplicate, ...)
  std::uint64_t suspectRounds = 0;         // (neighbour, round) pairs that missed their round
  int neighbours = 0;                      // in the topology (union over a time-varying one)
  int liveNeighbours = 0;
  double consensusStep = std::numeric_limits<double>::quiet_NaN();  // gamma in use (NaN: none)
  double lr = 0.0;                                                  // of the last round
  double loss = std::numeric_limits<double>::quiet_NaN();           // the last reported loss
  // The round of the newest checkpoint this peer wrote (checkpoint.every; -1: none yet), and the
  // round it resumed from (-1: it did not): the caller's own state (a torch optimizer's) saved for
  // the same round resumes with it.
  std::int64_t lastCheckpointRound = -1;
  std::int64_t resumedFromRound = -1;
};

class GRAPEVINE_EXPORT Peer {
 public:
  static constexpr double kNoLoss = std::numeric_limits<double>::quiet_NaN();

  // Loads and validates the config (workload.name must be `external`) and resolves the rank; does
  // not connect yet. Throws Error(kInvalidArgument) with every diagnostic of a bad config.
  explicit Peer(const Options& options);
  // Finalizes without averaging when the run is still open (never throws).
  ~Peer();
  Peer(const Peer&) = delete;
  Peer& operator=(const Peer&) = delete;

  int rank() const;
  int worldSize() const;
  std::int64_t plannedRounds() const;  // run.rounds: every peer steps this many times
  std::string outDir() const;
  // Where this peer's checkpoints go (checkpoint.dir or outDir/checkpoints, then rank-<rank>):
  // files named round-<10 digits>.ckpt are Grapevine's; others there are left alone.
  std::string checkpointFolder() const;
  // The resolved config (defaults and overrides applied) as YAML.
  std::string configYaml() const;

  // Registers a parameter tensor: `count` fp32 values at `data` (the caller's memory, which must
  // stay valid until finalize()). Names are unique; order of registration is the model's layout.
  void addTensor(const std::string& name, float* data, std::size_t count);
  // Registers a buffer: fp32 state that is not trained but should be one model's (BatchNorm's
  // running statistics). It is mixed every round and averaged by finalize(true) like the
  // parameters, never stepped by Grapevine's optimizer; its entry in step()'s gradients is
  // ignored (pass null). Refused by start() under gradient tracking, whose tracker steps every
  // value.
  void addBuffer(const std::string& name, float* data, std::size_t count);
  std::size_t parameterCount() const;
  // Connects to the neighbours (blocks until the bootstrap is done). Every peer then starts from
  // the lowest live rank's tensor values (they are written back into the caller's memory); with
  // Options::resume and a checkpoint, from the checkpoint's values instead, and stats().rounds is
  // the round after it (the caller's loop continues from there).
  void start();
  // Moves tensor `name` into Grapevine's buffer: returns its storage (valid until the Peer is
  // destroyed), holding the current values; from then on the caller reads and writes it there, and
  // no copy is made for it around rounds. After start().
  float* bind(const std::string& name);

  // One round with Grapevine's optimizer: grads[k] is the gradient of tensor k (registration order;
  // nullptr = zero), computed at the tensors' current values; `loss` the minibatch loss (for the
  // records and divergence detection; kNoLoss when unknown).
  void step(const std::vector<const float*>& grads, double loss = kNoLoss);
  // One round with the caller's optimizer: the tensors hold the values after the caller's step.
  void mix(double loss = kNoLoss);
  // The first half of step()/mix(): takes the step and sends the round's messages; the tensors then
  // hold the values before mixing. wait() receives and mixes. Exactly one wait() per start.
  void startStep(const std::vector<const float*>& grads, double loss = kNoLoss);
  void startMix(double loss = kNoLoss);
  // The lr of the following rounds' steps instead of optimizer.*'s schedule (a caller's scheduler);
  // NaN: the schedule again. With mix() it is the lr the caller's own optimizer used, which the
  // records then show. Finite and >= 0, else Error(kInvalidArgument).
  void setLr(double lr);
  // optimizer.*'s lr for `round` (its schedule, warm-up included). After start().
  double scheduledLr(std::int64_t round) const;
  void wait();

  // Adds the caller's metrics (e.g. {"test_accuracy", 0.87}) to the next record this peer writes
  // (and to the final record and summary when given before finalize()).
  void report(const std::vector<std::pair<std::string, double>>& metrics);
  // Grapevine's state besides the tensors' values (for a state_dict): named fp32 buffers —
  // "momentum" (Grapevine's optimizer buffer, when optimizer.momentum > 0) and the algorithm's:
  // CHOCO "public_copy" and "replica/<rank>" per live neighbour, DeepSqueeze "error". loadState()
  // takes the same names and sizes (Error kInvalidArgument naming the first that differs). After
  // start(), between rounds. Restoring every peer's state of the same round continues exactly.
  std::vector<std::pair<std::string, std::vector<float>>> state() const;
  void loadState(const std::vector<std::pair<std::string, std::vector<float>>>& state);
  // Events since the last call, oldest first.
  std::vector<Event> pollEvents();
  Stats stats() const;
  // Ends the run: with `average`, every live peer ends holding the average of the live peers'
  // models (exact averaging over the graph to a relative tolerance of 1e-6, then every peer adopts
  // the lowest live rank's result, so all hold identical values), written back into the tensors.
  // Writes the final record, the model file and peer-<rank>.final.json, and disconnects. Idempotent.
  void finalize(bool average = true);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace grapevine
