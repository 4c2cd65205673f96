#include "runtime/engine/driver.h"

#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <deque>
#include <filesystem>
#include <future>
#include <map>
#include <mutex>
#include <optional>
#include <thread>
#include <utility>

#include "runtime/common/elapsed.h"
#include "runtime/common/lazy_buffer.h"
#include "runtime/common/log.h"
#include "runtime/engine/checkpoint.h"
#include "runtime/engine/deadline.h"
#include "runtime/engine/membership.h"
#include "runtime/engine/metrics.h"
#include "runtime/engine/neighbour_links.h"
#include "runtime/engine/process_options.h"
#include "runtime/engine/records.h"
#include "runtime/engine/rendezvous.h"
#include "runtime/engine/session_checkpoints.h"
#include "runtime/engine/session_output.h"
#include "runtime/engine/summary.h"
#include "runtime/security/key.h"
#include "runtime/transport/bootstrap.h"
#include "runtime/transport/loop.h"

namespace grapevine::engine {
namespace {

using Clock = std::chrono::steady_clock;
// Control message (ControlChannel::send's type): CheckpointKnowledge updates, each within a control
// frame (with room for the frame's own bytes).
constexpr std::uint16_t kCheckpointRoundsMessage = 1;
const std::size_t kCheckpointRoundsMessageBytes =
    transport::BootstrapOptions{}.maxControlFrameBytes - 64;

Clock::duration toDuration(double seconds) {
  return std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
}

}  // namespace

// One peer process: the training thread's rounds, membership and records, the loop thread that
// runs the transports, and between them the Inbox and the loop-confined NeighbourLinks
// (neighbour_links.h).
class PeerSession::Impl {
 public:
  Impl(const RunPlan& plan, const PeerRunOptions& options, std::unique_ptr<PeerCore> core)
      : plan_(plan),
        options_(options),
        output_(plan, options.rank, options.external),
        core_(std::move(core)),
        membershipCore_(*core_, plan.config.run.rounds, plan.config.security.encrypt),
        membership_(options.rank, membershipCore_),
        links_(loop_, inbox_, core_->maxWireBytes()),
        checkpoints_(plan.config, options.rank, options.incarnation) {
    computeScale_ = plan.config.network.computeScaleOf(options.rank);
    deadlines_ =
        ArrivalDeadlines(plan.config.algorithm.roundTimeout, plan.config.algorithm.adaptiveTimeout);
  }
  // Every exit path ends here: an early error return shuts the transports down too.
  ~Impl() { shutdown(); }
  Impl(const Impl&) = delete;
  Impl& operator=(const Impl&) = delete;

  // Where the rounds ended.
  struct RoundsOutcome {
    std::int64_t rounds = 0;  // rounds completed
    bool stopped = false;     // options.stop was raised before the last round
    bool finished = false;    // ran every round
    bool diverged = false;    // training diverged (here or at a peer whose notice reached us)
  };

  // ---- training thread: the steps of a run ----
  Status open() {
    GV_RETURN_IF_ERROR(output_.open(options_.outDir));
    checkpoints_.open(output_.dir());
    GV_RETURN_IF_ERROR(output_.startMetrics(*core_));
    GV_RETURN_IF_ERROR(boot());
    if (neighboursRunning_ >= 0 || startedAlone()) {
      GV_RETURN_IF_ERROR(joinRunning());
    } else if (options_.resume) {
      GV_RETURN_IF_ERROR(resume());
    }
    return output_.openRecords(checkpoints_.resumedFrom());
  }
  // Starts the loop thread, then creates the data Context and runs the bootstrap on it; blocks
  // until every neighbour is connected or the bootstrap failed.
  Status boot();
  Status startRound(const RoundInput& input);
  Status completeRound();
  // `initial`: a small state of the caller's instead of the model (PeerCore::beginCollective).
  // `ofRound`: the averaging of an allreduce or diloco round.
  Status runCollectives(const std::vector<CollectiveKind>& kinds,
                        std::span<const double> initial = {}, bool ofRound = false);
  Status finish(bool average);
  std::int64_t roundsDone() const { return outcome_.rounds; }
  std::int64_t resumedFrom() const { return checkpoints_.resumedFrom(); }
  std::int64_t lastCheckpointRound() const { return checkpoints_.lastRound(); }
  bool joinedRunning() const { return neighboursRunning_ >= 0 || startedAlone(); }
  PeerCore& core() { return *core_; }
  std::vector<SessionEvent> takeEvents() { return std::exchange(events_, {}); }
  void addMetrics(const nlohmann::json& metrics) { output_.addMetrics(metrics); }
  bool stopRequested() const { return options_.stop && options_.stop->load(); }
  bool neighboursGone() const { return options_.neighboursGone && options_.neighboursGone->load(); }
  // A resumed peer's bootstrap completed without any neighbour (BootstrapOptions::completeAlone).
  bool startedAlone() const {
    return !missingAtStart_.empty() && missingAtStart_.size() == core_->neighbours().size();
  }

 private:
  // Lingers (when the rounds finished) until every live neighbour has our last message, then
  // waits briefly for the last sends.
  void linger(bool finished);
  // After a divergence: sends the notice to every live neighbour (they stop and pass it on, so
  // nobody waits for us) and waits briefly for those sends.
  void sendDivergenceNotices();
  // --resume: agrees on the round with the other peers (two minimum collectives over the graph's
  // diameter: the newest checkpoint round each has, then whether each has that one) and restores
  // it. kFailedPrecondition when a peer lacks the agreed round's checkpoint.
  Status resume();
  // Sends the neighbours what changed in the checkpoint knowledge since the last call (once per
  // round).
  void shareCheckpointKnowledge();
  // Closes every neighbour and the data Context on the loop thread and waits for that to have
  // run, then stops and joins the loop thread and releases the transport objects. Blocking;
  // idempotent; a no-op before boot() started the loop thread.
  void shutdown();

  // ---- training thread: one round ----
  double seconds() const;  // since the rounds started
  void applyOwnFaults();   // faults: corrupt and the attacks on this peer (training thread)
  const config::FaultEvent* attackEvent_ = nullptr;  // the attack applyOwnFaults() runs
  // Waits until no send to a live neighbour is pending: the next round (or collective) rewrites the
  // per-edge buffers those sends read. A neighbour whose send has been pending for longer than
  // transport.io_timeout is marked dead (which closes the edge and cancels the send; a dead edge's
  // buffer is never written again), so no buffer is rewritten while a transport may still read it,
  // on any backend. kCancelled when options.stop is raised meanwhile (nothing was rewritten).
  Status waitPreviousSends(const char* what);
  // Hands the core's outgoing messages (to sendTo()) to the loop.
  void sendOutgoing();
  // Counts `sends` as pending and hands them to the loop, each with the generation of its
  // neighbour's connections that this thread knows.
  void postSends(SendList sends);
  // Applies neighbour messages until the round (or collective) is complete, stopped, or past its
  // deadline.
  void awaitNeighbours(bool collective, int waitRounds = 1);
  // After tree averaging: until every tree child has closed its connections (it has the average).
  void lingerForChildren();
  // Mixes what arrived; returns (and logs) the neighbours whose message is missing.
  std::vector<int> mixRound(std::int64_t round);
  // The round's facts for its record and metrics (SessionOutput).
  RoundFacts roundFacts(const std::vector<int>& suspects) const {
    return {suspects,
            membership_.deadThisRound(),
            membership_.revivedThisRound(),
            membership_.rejoinedThisRound(),
            skippedThisRound_,
            seconds(),
            checkpoints_.seconds()};
  }

  // ---- loop thread ----
  // Bootstrap completion: sets the edges' keys and incarnations, notes the missing neighbours and
  // hands the connections to links_.
  void onConnected(std::vector<transport::Neighbour> neighbours);
  // ---- training thread ----
  // Applies everything in the inbox; returns false if nothing was there.
  bool drainInbox();
  bool waitSends(Clock::time_point deadline) { return inbox_.waitSends(deadline); }
  // The edge to j failed (Membership::connectionFailed): dropped and closed, or finished.
  void markDead(int j, const std::string& why) { act(membership_.connectionFailed(j), why); }
  // Carries out what the membership decided: closes, redials, receives on new connections (posted
  // to the loop), logs and records the event (`why`: the event's, for drops and quarantines).
  void act(const MembershipAction& a, const std::string& why = "");
  // The generation of j's connections the training thread is on.
  std::uint64_t gen(int j) const { return membership_.gen(j); }
  // The peer joins a training that is already running (its neighbours said so in their hellos):
  // from its newest checkpoint with --resume, else from round 0, without the all-peer agreement of
  // resume(); every edge resyncs, and the rounds catch up to the neighbours'.
  Status joinRunning();
  // Loads `checkpoint` into the core; the run continues at the round after it (resume() and
  // joinRunning()).
  Status restoreCheckpoint(const LoadedCheckpoint& checkpoint);
  // Catching up: when a live neighbour is more than PeerCoreOptions::catchUpLag rounds ahead of
  // this peer, the next round is the neighbours' (PeerCore::skipTo). Not for the API's
  // caller-driven rounds, nor with overlapped push-sum (its rounds wait for shares sent rounds
  // earlier).
  bool behind() const {
    return !options_.external && core_->mixDelay() == 0 &&
           core_->neighboursRound() > core_->round() + core_->catchUpLag();
  }

  const RunPlan& plan_;
  PeerRunOptions options_;
  // Records, metrics, final files and where the time went.
  SessionOutput output_;
  // Declared before the transport objects so that it outlives them (see shutdown()).
  transport::Loop loop_;
  std::thread loopThread_;
  std::unique_ptr<transport::Context> context_;
  std::shared_ptr<transport::Bootstrap> bootstrap_;
  // The highest round a neighbour said it trains at in its hello (-1: none; set by the
  // bootstrap's completion), and ours for the hellos of rejoins (-1 before the rounds start).
  std::int64_t neighboursRunning_ = -1;
  std::atomic<std::int64_t> runningRound_{-1};
  // Neighbours the bootstrap completed without (set by onConnected, before boot() returns).
  std::vector<int> missingAtStart_;
  std::unique_ptr<PeerCore> core_;
  // Each neighbour's liveness (training thread): live, silent, lost, finished, quarantined.
  PeerCoreMembership membershipCore_;
  Membership membership_;

  // The hand-over between the threads, and the connections (loop thread; see neighbour_links.h).
  Inbox inbox_;
  NeighbourLinks links_;
  std::vector<InboxItem> deferredDeaths_;  // training thread (drainInbox)
  std::int64_t skippedThisRound_ = 0;      // rounds skipped to reach this one (catching up)

  // Training thread.
  RoundsOutcome outcome_;
  bool started_ = false;          // roundsStart_ is set
  std::int64_t firstRound_ = -1;  // the first round this process ran (set with roundsStart_)
  bool finished_ = false;         // finish() ran
  Status finishStatus_;
  std::vector<SessionEvent> events_;
  Clock::time_point roundsStart_;
  // network.compute_scale (or this peer's own in network.peers) above 1: a slower machine, played
  // by sleeping (scale - 1) x the wall time of each computation the engine runs (the local steps
  // and the message in beginRound(), the overlapped gradient). Wall time, not CPU time: peers that
  // share a machine's cores run slower than their CPU time, and the slow one must stay scale x
  // slower than they are (with CPU time, 8 peers on 2 cores made a x4 peer only about x2 slower).
  // Cumulative seconds slept (in step_seconds too): the records' throttle_seconds.
  double computeScale_ = 1.0;
  // Each neighbour's deadline in a round (algorithm.round_timeout, adaptive_timeout).
  ArrivalDeadlines deadlines_;
  void throttle(double stepSeconds) {
    if (computeScale_ <= 1.0 || !(stepSeconds > 0.0)) return;
    const double s = (computeScale_ - 1.0) * stepSeconds;
    std::this_thread::sleep_for(toDuration(s));
    output_.times.throttle += s;
  }
  // checkpoint.every, --resume, and every peer's newest checkpoint round as far as this peer knows.
  SessionCheckpoints checkpoints_;
};

void PeerSession::Impl::act(const MembershipAction& a, const std::string& why) {
  using Kind = MembershipAction::Kind;
  const int j = a.peer;
  if (a.close) loop_.post([this, j, g = *a.close] { links_.close(j, g); });
  if (a.redial) {
    // The lower rank dials a neighbour lost with its connections again until it answers (a
    // restarted peer, a healed partition); the higher rank's listener takes it in. Not when the
    // neighbour connected again meanwhile (a newer generation on the loop thread, its rejoin still
    // on the way to this thread): a second dial would make a second connection, and the two ends
    // could each keep a different one of the two. A restarted peer whose bootstrap completed
    // without a neighbour whose handshake then finished did this; on the tagged backends, which
    // match messages by rank and tag, the edge's two epochs then mixed (sequence numbers
    // restarted on one connection were dropped as duplicates, its snapshot with them, and the
    // replica stayed off).
    loop_.post([this, j, g = *a.redial] {
      if (bootstrap_ && links_.gen(j) == g) bootstrap_->redial(j);
    });
  }
  if (a.restartSendClock) {
    // A send to it still pending from before it was dropped counts from now (its io_timeout).
    inbox_.restartSendClock(j);
  }
  if (a.startReceiving) {
    loop_.post([this, j, g = *a.startReceiving] { links_.startReceiving(j, g); });
  }
  switch (a.kind) {
    case Kind::kNone:
    case Kind::kDeferred:
      return;
    case Kind::kFinished:
      log::debug("neighbour ", j, " finished its rounds");
      return;
    case Kind::kLostAfterSilence:
      log::warn("neighbour ", j, " (dead since it fell silent) lost its connection: ", why,
                options_.rank < j ? "; dialing it again" : "; it may dial again");
      return;
    case Kind::kDropped:
      events_.push_back({SessionEvent::Kind::kDead, j, core_->round(), why});
      log::warn("neighbour ", j, " is dead (", why, "); dropping the edge, ", core_->liveDegree(),
                " live neighbours left",
                a.to == NeighbourState::kSilent ? " (it is welcome back if it answers again)" : "");
      if (core_->isolated()) log::warn("isolated: every neighbour is dead; training alone");
      return;
    case Kind::kQuarantined:
      events_.push_back({SessionEvent::Kind::kDead, j, core_->round(), why});
      log::warn("neighbour ", j, " ", why, "; dropping the edge, ", core_->liveDegree(),
                " live neighbours left");
      if (core_->isolated()) log::warn("isolated: every neighbour is dead; training alone");
      return;
    case Kind::kRevived:
      events_.push_back({SessionEvent::Kind::kRevived, j, core_->round(), "heartbeats again"});
      log::warn("neighbour ", j, " is back (heartbeats again); taking the edge back, ",
                core_->liveDegree(), " live neighbours");
      return;
    case Kind::kRejoined:
      events_.push_back({SessionEvent::Kind::kRevived, j, core_->round(), "connected again"});
      log::warn("neighbour ", j, " connected again (incarnation ", a.incarnation, ", ",
                a.from != NeighbourState::kLive ? "it was dead"
                                                : "it restarted before its death was noticed",
                "); the edge starts afresh, ", core_->liveDegree(), " live neighbours");
      return;
    case Kind::kRejoinRefused:
      log::warn("neighbour ", j, " connected again but stays dropped (quarantined)");
      return;
  }
}

Status PeerSession::Impl::restoreCheckpoint(const LoadedCheckpoint& checkpoint) {
  GV_RETURN_IF_ERROR(core_->restoreState(checkpoint.state));
  const std::int64_t round = checkpoint.state.round;
  checkpoints_.restored(round);
  outcome_.rounds = round + 1;
  return Status::ok();
}

Status PeerSession::Impl::joinRunning() {
  if (neighboursRunning_ >= 0) {
    log::info("the neighbours are training already (round ", neighboursRunning_,
              "): joining the run");
  } else {
    log::warn(
        "resume: no neighbour connected (the others may have finished, or be away): "
        "training on alone from this peer's own checkpoint; they join when they connect");
  }
  bool restored = false;
  if (options_.resume) {
    const std::string& folder = checkpoints_.folder();
    if (const auto latest = checkpoints_.latest(*core_)) {
      restored = true;
      GV_RETURN_IF_ERROR(restoreCheckpoint(*latest));
      const std::int64_t round = latest->state.round;
      log::info("resumed from round ", round, " (", latest->path, "), continuing at round ",
                round + 1, neighboursRunning_ >= 0 ? " and catching up with the neighbours" : "");
    } else {
      log::warn("resume: no checkpoint in ", folder);
    }
  }
  if (!restored && !options_.external) {
    // State transfer: the first neighbour's public copy that comes becomes this peer's model (not
    // through the API: the caller owns its model).
    if (core_->adoptFirstSnapshot()) {
      log::info("no checkpoint: this peer takes its model from the first neighbour snapshot");
    } else {
      log::warn(
          "no checkpoint, and the algorithm keeps no public copy of the model to take "
          "over: this peer starts from its own initial model and the mixing pulls it in");
    }
  }
  // The replicas here are of another round than the neighbours' public copies (or placeholders):
  // every edge resyncs both ways before anything of a neighbour is mixed.
  core_->resyncAllEdges(/*await=*/true);
  return Status::ok();
}

bool PeerSession::Impl::drainInbox() {
  std::deque<InboxItem> items = inbox_.takeAll();
  // Deaths held back while the neighbour's data was still arriving go first, once it stopped.
  std::vector<InboxItem> held;
  std::deque<InboxItem> due;
  for (auto& d : deferredDeaths_) {
    if (links_.stillArriving({d.peer}).empty()) {
      due.push_back(std::move(d));
    } else {
      held.push_back(std::move(d));
    }
  }
  deferredDeaths_ = std::move(held);
  items.insert(items.begin(), std::make_move_iterator(due.begin()),
               std::make_move_iterator(due.end()));
  for (auto& item : items) {
    if (item.kind == InboxItem::kRejoin) {
      act(membership_.reconnected(
          {item.peer, item.gen, item.incarnation, item.key, item.theirRound, item.cipher}));
      continue;
    }
    // Of connections replaced since (a rejoin).
    if (!membership_.current(item.peer, item.gen)) continue;
    if (item.kind == InboxItem::kDead) {
      // The control connection closed while the data connection still delivers: the neighbour
      // finished (or failed) with messages in flight; they are taken first.
      if (item.controlClosed && !links_.stillArriving({item.peer}).empty()) {
        deferredDeaths_.push_back(std::move(item));
        continue;
      }
      act(membership_.connectionFailed(item.peer), item.why);
      continue;
    }
    if (item.kind == InboxItem::kSilent) {
      act(membership_.heartbeatsLost(item.peer), item.why);
      continue;
    }
    if (item.kind == InboxItem::kBack) {
      act(membership_.heartbeatsBack(item.peer));
      continue;
    }
    auto& buf = item.buffers->at(static_cast<std::size_t>(item.buffer));
    core_->onMessage(item.peer, buf.span(item.bytes));
    // A message larger than a round's (a snapshot, a collective) leaves no resident pages behind.
    buf.trim(item.bytes, core_->roundWireBytes());
    for (auto& [j, why] : core_->takeQuarantined()) act(membership_.quarantined(j), why);
    loop_.post([this, j = item.peer, b = item.buffer, g = item.gen] { links_.receive(j, b, g); });
  }
  return !items.empty();
}

Status PeerSession::Impl::resume() {
  const std::string& folder = checkpoints_.folder();
  const auto latest = checkpoints_.latest(*core_);
  const double own = latest ? static_cast<double>(latest->state.round) : -1.0;
  const auto agree = adoptLowestCollectives(plan_).size();
  const std::vector<CollectiveKind> minimum(agree, CollectiveKind::kMinimum);
  GV_RETURN_IF_ERROR(runCollectives(minimum, std::span<const double>(&own, 1)));
  const auto round = static_cast<std::int64_t>(core_->collectiveState().at(0));
  if (round < 0) {
    if (latest) {
      log::warn(
          "resume: a peer has no checkpoint; every peer starts from round 0 (this one had "
          "round ",
          latest->state.round, ")");
    } else {
      log::info("resume: no checkpoint in ", folder,
                " (or at another peer): starting from round 0");
    }
    // The peers still agree that they start afresh (nothing to check).
    return Status::ok();
  }
  std::optional<LoadedCheckpoint> chosen;
  if (latest && latest->state.round == round) {
    chosen = latest;
  } else {
    chosen = checkpoints_.latest(*core_, round);
    if (chosen && chosen->state.round != round) chosen.reset();
  }
  const double have = chosen ? 1.0 : 0.0;
  GV_RETURN_IF_ERROR(runCollectives(minimum, std::span<const double>(&have, 1)));
  if (core_->collectiveState().at(0) < 1.0) {
    return failedPrecondition(
        "resume: the newest checkpoint every peer has is round " + std::to_string(round) +
        ", but " +
        (chosen ? std::string("another peer") : std::string("this peer (") + folder + ")") +
        " does not have a valid one of that round; raise checkpoint.keep, or start afresh "
        "without --resume");
  }
  GV_RETURN_IF_ERROR(restoreCheckpoint(*chosen));
  // Newer checkpoints are of the abandoned attempt (peers that trained on after a crash): the run
  // continues from `round`, and they would only stand in for its own later ones.
  removeCheckpointsAfter(folder, round);
  log::info("resumed from round ", round, " (", chosen->path, "), continuing at round ", round + 1);
  return Status::ok();
}

void PeerSession::Impl::shareCheckpointKnowledge() {
  if (plan_.config.checkpoint.every <= 0) return;
  auto updates = checkpoints_.takeUpdates(kCheckpointRoundsMessageBytes);
  if (updates.empty()) return;
  loop_.post([this, u = std::move(updates)] { links_.sendControl(kCheckpointRoundsMessage, u); });
}

Status PeerSession::Impl::boot() {
  const config::Config& c = plan_.config;
  transport::BootstrapOptions bo =
      bootstrapOptions(plan_, options_.rank, options_.incarnation, *core_);
  if (!c.security.keyFile.empty()) {
    // Read again at start: the file may have changed since the config was validated.
    GV_ASSIGN_OR_RETURN(bo.psk, security::readKeyFile(c.keyFilePath()));
  }
  loopThread_ = std::thread([this, busy = c.transport.busyPoll] { loop_.run(busy); });
  transport::Options to = transportOptions(c, options_.rank, *core_);
  if (!c.peers.rendezvous.empty()) {
    // Addresses from the shared folder instead of the config (rendezvous.h): ours is published,
    // the neighbours' are read; the bootstrap then runs as with addresses from the config.
    GV_ASSIGN_OR_RETURN(to.host, resolveHost(c.peers.host));
    RendezvousOptions ro;
    ro.dir = c.peers.rendezvous;
    ro.rank = options_.rank;
    ro.count = c.peers.count;
    ro.address = to.host + ":" + std::to_string(c.peers.basePort + options_.rank);
    ro.wait = core_->neighbours();
    ro.timeoutSeconds = c.peers.connectTimeout;
    ro.stop = options_.stop;
    GV_ASSIGN_OR_RETURN(bo.peers, rendezvous(ro));
  }
  bo.onMessage = [this](int from, std::uint16_t type, std::span<const std::uint8_t> bytes) {
    if (type != kCheckpointRoundsMessage) return;  // a newer peer's kind: ignored
    checkpoints_.merge(from, bytes);
  };
  bo.onEvent = [this](const transport::ControlEvent& ev) { links_.controlEvent(ev); };
  bo.onRejoin = [this](transport::Neighbour n) { links_.rejoined(std::move(n)); };
  bo.completeAlone = options_.resume;
  bo.runningRound = [this] { return runningRound_.load(); };

  // `booted` is set exactly once: by a failed start, or by the bootstrap's completion.
  std::promise<Status> booted;
  loop_.post([&] {
    auto ctx = transport::makeContext(loop_, to);
    if (!ctx.isOk()) {
      booted.set_value(ctx.status());
      return;
    }
    context_ = std::move(*ctx);
    auto bs =
        transport::Bootstrap::start(loop_, std::move(bo), *context_,
                                    [this, &booted](Result<std::vector<transport::Neighbour>> r) {
                                      if (r.isOk()) onConnected(std::move(*r));
                                      booted.set_value(r.status());
                                    });
    if (!bs.isOk())
      booted.set_value(bs.status());
    else
      bootstrap_ = *bs;
  });
  const auto bootStart = Clock::now();
  // Waits in slices so that SIGINT / SIGTERM (options.stop) ends a bootstrap that waits on a
  // missing neighbour: cancelling makes the bootstrap complete with kCancelled.
  std::future<Status> bootResult = booted.get_future();
  bool cancelling = false, expired = false;
  while (bootResult.wait_for(std::chrono::milliseconds(50)) != std::future_status::ready) {
    if (!cancelling && stopRequested()) {
      cancelling = true;
      loop_.post([this] {
        if (bootstrap_) bootstrap_->cancel();
      });
    }
    if (!expired && neighboursGone()) {
      expired = true;
      log::info("bootstrap: told that no neighbour will come; not waiting for the missing ones");
      loop_.post([this] {
        if (bootstrap_) bootstrap_->expire();
      });
    }
  }
  if (Status st = bootResult.get(); !st.isOk()) {
    if (cancelling) return cancelled("stopped during the bootstrap");
    return st;
  }
  log::info("connected to ", core_->neighbours().size() - missingAtStart_.size(),
            " neighbours over ", c.transport.backend, " in ", secondsSince(bootStart), " s");
  // Neighbours that did not connect within peers.connect_timeout: dead until they connect (a
  // rejoin: the lower rank of each edge keeps dialing).
  for (int j : missingAtStart_) {
    markDead(j, "not connected when the bootstrap completed; it joins when it connects");
  }
  return Status::ok();
}

void PeerSession::Impl::onConnected(std::vector<transport::Neighbour> neighbours) {
  for (int j : core_->neighbours()) {
    const bool connected = std::any_of(neighbours.begin(), neighbours.end(),
                                       [j](const transport::Neighbour& n) { return n.peer == j; });
    if (!connected) missingAtStart_.push_back(j);
  }
  std::map<std::string_view, int> ciphers;  // edges per cipher, for the log
  for (auto& n : neighbours) {
    const int j = n.peer;
    // Set before any receive is posted: every message on the edge is sealed from the first one.
    if (n.sessionKey) {
      core_->setEdgeKey(j, *n.sessionKey, plan_.config.security.encrypt, n.cipher);
      ++ciphers[security::cipherName(n.cipher)];
    }
    core_->setEdgeIncarnation(j, static_cast<std::uint32_t>(n.incarnation));
    neighboursRunning_ = std::max(neighboursRunning_, n.runningRound);
  }
  if (plan_.config.security.encrypt && !ciphers.empty()) {
    std::string list;
    for (const auto& [name, edges] : ciphers) {
      list += (list.empty() ? "" : ", ") + std::string(name) + " (" + std::to_string(edges) +
              (edges == 1 ? " edge)" : " edges)");
    }
    log::info("messages encrypted with ", list);
  }
  links_.connected(std::move(neighbours));
}

double PeerSession::Impl::seconds() const { return secondsSince(roundsStart_); }

// faults: kind corrupt and the attacks on this peer, which only the peer itself can execute (the
// launcher executes the other kinds with signals and the emulator): by round, or by this peer's
// clock from its first round (about the launcher's, which counts from the first round record).
void PeerSession::Impl::applyOwnFaults() {
  bool corrupt = false;
  const config::FaultEvent* attack = nullptr;
  for (const auto& e : plan_.config.faults.events) {
    if (e.peer != core_->rank()) continue;
    if (e.kind != config::FaultKind::kCorrupt && !config::isAttack(e.kind)) continue;
    const double now = e.byRound() ? static_cast<double>(outcome_.rounds) : seconds();
    if (now < e.start() || now >= e.end()) continue;
    if (e.kind == config::FaultKind::kCorrupt)
      corrupt = true;
    else
      attack = &e;
  }
  if (corrupt != core_->corruptOutgoing()) {
    log::warn(corrupt
                  ? "fault schedule: this peer's outgoing messages are corrupted from round "
                  : "fault schedule: this peer's outgoing messages are intact again from round ",
              outcome_.rounds);
    core_->setCorruptOutgoing(corrupt);
  }
  if (attack == attackEvent_) return;
  attackEvent_ = attack;
  if (attack) {
    log::warn("fault schedule: this peer attacks from round ", outcome_.rounds, " (",
              attack->describe(), ")");
    core_->setAttacker(
        Attacker(attack->kind, attack->attackScale(), plan_.config.run.seed, core_->rank()));
  } else {
    log::warn("fault schedule: this peer sends its own model again from round ", outcome_.rounds);
    core_->setAttacker(std::nullopt);
  }
}

Status PeerSession::Impl::waitPreviousSends(const char* what) {
  const config::Config& c = plan_.config;
  const auto start = Clock::now();
  const auto ioTimeout = toDuration(c.transport.ioTimeout);
  bool warned = false;
  for (;;) {
    const auto now = Clock::now();
    const Inbox::Pending pending =
        inbox_.pendingSends(now - ioTimeout, [this](int j) { return core_->isDead(j); });
    if (!pending.any) return Status::ok();
    if (pending.stuck.empty()) {
      if (stopRequested()) return cancelled("stopped while sends were pending");
      if (!warned && now - start >= toDuration(c.peers.deadAfter)) {
        warned = true;
        log::warn("sends of the previous ", what, " still pending after ", c.peers.deadAfter, " s");
      }
      inbox_.waitSendDone(pending.done, std::chrono::milliseconds(100));
      continue;
    }
    for (int j : pending.stuck) {
      char why[96];
      std::snprintf(why, sizeof why,
                    "a send to it was pending for more than transport.io_timeout = %g s",
                    c.transport.ioTimeout);
      markDead(j, why);
    }
    // A heartbeat verdict may have arrived meanwhile: apply it before looking again.
    drainInbox();
  }
}

void PeerSession::Impl::postSends(SendList sends) {
  inbox_.countSends(sends);
  std::map<int, std::uint64_t> gens;
  for (const auto& [j, bytes] : sends) gens[j] = gen(j);
  loop_.post([this, s = std::move(sends), g = std::move(gens)]() mutable {
    links_.send(std::move(s), std::move(g));
  });
}

void PeerSession::Impl::sendOutgoing() {
  SendList sends;
  for (int j : core_->sendTo()) sends.emplace_back(j, core_->outgoing(j));
  postSends(std::move(sends));
}

Status PeerSession::Impl::startRound(const RoundInput& input) {
  if (finished_ || outcome_.diverged) return failedPrecondition("the run is over");
  if (outcome_.rounds >= plan_.config.run.rounds) {
    return failedPrecondition("all run.rounds = " + std::to_string(plan_.config.run.rounds) +
                              " rounds ran; raise run.rounds to train longer");
  }
  if (!started_) {
    roundsStart_ = Clock::now();
    started_ = true;
    firstRound_ = outcome_.rounds;
  }
  // The previous round's sends must be done before their buffers are rewritten.
  GV_RETURN_IF_ERROR(waitPreviousSends("round"));
  if (behind()) {
    // The neighbours went on without this peer (it was paused or cut off): join them at their
    // round instead of replaying the missed ones, each waiting out round_timeout.
    const std::int64_t to = core_->neighboursRound();
    log::warn("rounds ", outcome_.rounds, " to ", to - 1, " skipped: the neighbours are at round ",
              to);
    skippedThisRound_ = to - outcome_.rounds;
    core_->skipTo(to);
    outcome_.rounds = to;
  }
  runningRound_ = outcome_.rounds;
  applyOwnFaults();
  RoundInput in = input;
  if (core_->staleness() > 0 && in.localSteps) {
    // algorithm.staleness: when every neighbour's message of this round is here already, they
    // are ahead: this round takes no local steps, so a slower peer keeps up instead of holding
    // them back.
    drainInbox();
    in.skipCompute = core_->neighboursAhead(outcome_.rounds);
  }
  const auto stepStart = Clock::now();
  GV_RETURN_IF_ERROR(core_->beginRound(outcome_.rounds, in));
  if (in.localSteps && !in.skipCompute) throttle(secondsSince(stepStart));
  output_.times.step += secondsSince(stepStart);
  sendOutgoing();
  return Status::ok();
}

Status PeerSession::Impl::completeRound() {
  if (finished_ || outcome_.diverged) return failedPrecondition("the run is over");
  const std::int64_t round = outcome_.rounds;
  std::vector<int> suspects;
  if (!core_->divergence()) awaitNeighbours(false);
  if (!core_->divergence()) suspects = mixRound(round);
  if (!core_->divergence() && core_->averagesEachRound()) {
    // allreduce, diloco: the round ends with the exact average of the models, then the outer step.
    const auto averageStart = Clock::now();
    core_->setRoundCollectives(true);
    const Status st = runCollectives(core_->roundCollectives(), {}, /*ofRound=*/true);
    core_->setRoundCollectives(false);
    output_.times.mix += secondsSince(averageStart);
    GV_RETURN_IF_ERROR(st);
    core_->finishAveragedRound();  // a divergence it finds is handled right below
  }
  if (core_->divergence()) {
    core_->abandonRound();
    outcome_.diverged = true;
    const std::string message = divergenceMessage(*core_->divergence(), std::nan(""));
    log::error(message);
    events_.push_back({SessionEvent::Kind::kDiverged, core_->divergence()->origin, round, message});
    return aborted(message);
  }
  for (int j : suspects) {
    events_.push_back({SessionEvent::Kind::kSuspect, j, round,
                       deadlines_.adaptive() ? "no message within its adaptive deadline"
                                             : "no message within algorithm.round_timeout"});
  }
  GV_RETURN_IF_ERROR(output_.report(*core_, round, roundFacts(suspects)));
  checkpoints_.writeIfDue(*core_, round);
  shareCheckpointKnowledge();
  ++outcome_.rounds;
  output_.updateMetrics(*core_, outcome_.rounds, roundFacts(suspects));
  membership_.endRound();
  skippedThisRound_ = 0;
  return Status::ok();
}

Status PeerSession::Impl::runCollectives(const std::vector<CollectiveKind>& kinds,
                                         std::span<const double> initial, bool ofRound) {
  if (finished_) return failedPrecondition("the run is over");
  // A tree step may wait for as many transfers as the tree is high (its subtree's, one after
  // another); a lost tree neighbour ends the wait early (heartbeats). A round's collectives run
  // over the tree the core holds for them (PeerCore::setRoundCollectives).
  int waitRounds = 1;
  if (usesTree(kinds)) {
    const CollectiveTree tree =
        collectiveTree(plan_, options_.rank, core_->model().size(), /*roundRing=*/ofRound);
    if (!ofRound) core_->setCollectiveTree(tree);
    waitRounds = std::max(1, tree.height);
  }
  membership_.beginCollectives();
  for (CollectiveKind kind : kinds) {
    if (Status st = waitPreviousSends("collective"); !st.isOk()) {
      membership_.leaveCollectives();
      return st;
    }
    core_->beginCollective(kind, initial);
    sendOutgoing();
    awaitNeighbours(true, waitRounds);
    core_->endCollective();
  }
  core_->finishCollectives();
  // What was deferred meanwhile, in the order it always ran: revivals, then rejoins.
  const Membership::Deferred deferred = membership_.endCollectives();
  for (int j : deferred.back) act(membership_.heartbeatsBack(j));
  for (const auto& [j, r] : deferred.rejoins) act(membership_.reconnected(r));
  return Status::ok();
}

void PeerSession::Impl::awaitNeighbours(bool collective, int waitRounds) {
  const auto waitStart = Clock::now();
  const auto fixedDeadline =
      waitStart + toDuration(plan_.config.algorithm.roundTimeout * waitRounds);
  // algorithm.adaptive_timeout: each awaited neighbour's deadline follows its own arrival times
  // (ArrivalDeadlines); the round waits until the latest deadline of those still missing.
  const bool adaptive = !collective && deadlines_.adaptive();
  std::vector<int> unheard;
  if (adaptive) unheard = core_->expectedFrom();
  auto deadlineNow = [&] {
    if (!adaptive) return fixedDeadline;
    return waitStart + toDuration(deadlines_.latest(core_->missingThisRound()));
  };
  // Overlap: the next gradient is computed here, while the round's messages are in flight, at the
  // model before mixing (x_half) — always, whatever has arrived yet, as the simulator does. (The
  // API's caller computes its own, between startRound() and completeRound().)
  if (!collective && plan_.config.algorithm.overlap && !options_.external &&
      core_->mixDelay() == 0) {
    const auto gradientStart = Clock::now();
    core_->precomputeGradient();
    throttle(secondsSince(gradientStart));
  }
  bool waitedPast = false;
  for (;;) {
    drainInbox();
    if (adaptive) {
      std::erase_if(unheard, [&](int j) {
        if (!core_->heardThisRound(j)) return false;
        deadlines_.arrived(j, secondsSince(waitStart));
        return true;
      });
    }
    const auto deadline = deadlineNow();
    if (!collective && core_->divergence()) break;  // a neighbour's notice
    if (collective ? core_->collectiveComplete() : core_->roundComplete()) break;
    // Every message still missing will never come: its sender sent a later round's already
    // (edges are in order). Typically after a pause, with the neighbours rounds ahead.
    if (!collective && core_->onlyLostMessagesMissing()) break;
    if (stopRequested()) break;
    if (Clock::now() >= deadline) {
      // A slow link is slow, not dead: past the deadline the round still waits for neighbours
      // whose message is arriving (bytes within kArrivalWindow), for as long as they keep coming.
      if (collective) break;
      // Bytes since the wait began: a stopped (paused) neighbour's earlier bytes do not count, nor
      // those of a neighbour whose messages are being refused (PeerCore::refusing).
      std::vector<int> missing = core_->missingThisRound();
      std::erase_if(missing, [this](int j) { return core_->refusing(j); });
      std::vector<int> arriving = links_.stillArriving(missing, waitStart);
      // Nor is a neighbour that is still starting late: in this process's first round, one from
      // which no round message came yet, and that is alive (its heartbeats; it would be dead
      // otherwise), is building its model or loading its data on a loaded machine (at 100M
      // parameters four peers on 2 cores began their rounds seconds apart). Waited for as the
      // bootstrap waits for it: up to peers.connect_timeout.
      if (outcome_.rounds == firstRound_ &&
          secondsSince(waitStart) < plan_.config.peers.connectTimeout) {
        for (int j : missing) {
          if (core_->lastRoundFrom(j) < 0 &&
              std::find(arriving.begin(), arriving.end(), j) == arriving.end()) {
            arriving.push_back(j);
          }
        }
      }
      if (arriving.empty()) break;
      if (!waitedPast) {
        waitedPast = true;
        ++output_.times.roundsWaitedPastTimeout;
        std::string list;
        for (int j : arriving) list += " " + std::to_string(j);
        log::debug("round ", core_->round(), ": waiting past round_timeout for neighbours still ",
                   "starting or whose messages are still arriving:", list);
      }
    }
    const auto wakeAt = Clock::now() + std::chrono::milliseconds(250);
    inbox_.waitForItem(Clock::now() >= deadline ? wakeAt : std::min(deadline, wakeAt),
                       [this] { return stopRequested(); });
  }
  // Who the round goes on without pushes its own deadline up (if that happens more than once in a
  // while); a neighbour that died meanwhile is no longer awaited and counts neither way.
  const std::vector<int> missing = adaptive ? core_->missingThisRound() : std::vector<int>{};
  for (int j : unheard) {
    if (std::find(missing.begin(), missing.end(), j) != missing.end()) deadlines_.missed(j);
  }
  output_.times.wait += secondsSince(waitStart);
}

std::vector<int> PeerSession::Impl::mixRound(std::int64_t round) {
  const auto mixStart = Clock::now();
  auto suspects = core_->endRound();
  output_.times.mix += secondsSince(mixStart);
  // Robust mixing may distrust a neighbour in the mix.
  for (auto& [j, why] : core_->takeQuarantined()) act(membership_.quarantined(j), why);
  if (!suspects.empty()) {
    std::string s;
    for (int j : suspects) s += " " + std::to_string(j);
    log::info("round ", round, ": suspect (no message within ",
              deadlines_.adaptive() ? "its adaptive deadline, at most " : "",
              plan_.config.algorithm.roundTimeout, " s):", s);
  }
  return suspects;
}

void PeerSession::Impl::linger(bool finished) {
  // Linger until every live neighbour has its last message from us (they send theirs in the same
  // round), so closing our connections does not cut their final round short. On a one-way edge
  // (directed graphs, one-peer-exponential) the receiver closes the edge as soon as the sender's
  // last message is in, and that close is the sender's sign that it arrived: nobody waits on a
  // message that never comes, so a directed cycle does not hold every peer until the deadline.
  const config::Config& c = plan_.config;
  if (core_->averagesEachRound()) {
    // allreduce, diloco: no round messages to linger for. The last round's ring ends with an ack
    // (every peer holds all its ring neighbours sent it); its tree ends with the broadcast, whose
    // children close once they have it.
    if (finished && core_->roundTree().ringSize == 0) lingerForChildren();
    waitSends(Clock::now() + std::chrono::seconds(5));
    return;
  }
  const auto lingerEnd = Clock::now() + toDuration(c.algorithm.roundTimeout + c.peers.deadAfter);
  while (finished && Clock::now() < lingerEnd) {
    drainInbox();
    bool all = true;
    for (int j : core_->neighbours()) {
      if (core_->isDead(j)) continue;
      const std::int64_t expected = core_->lastRoundExpectedFrom(j, c.run.rounds);
      const bool heardLast = expected >= 0 && core_->lastRoundFrom(j) >= expected;
      if (heardLast && !core_->sendsTo(j)) {
        markDead(j, "finished");  // only j sends on this edge, and its last message is here
        continue;
      }
      // Not heard yet, or j never sends to this peer: wait until it closes (or the deadline).
      if (!heardLast) all = false;
    }
    if (all) break;
    inbox_.waitForItem(Clock::now() + std::chrono::milliseconds(50));
  }
  waitSends(Clock::now() + std::chrono::seconds(5));
}

void PeerSession::Impl::lingerForChildren() {
  // A send is complete when the transport has the bytes, not when they arrived: over a slow or
  // emulated link the broadcast's model may still be on its way when waitSends() returns, and
  // closing now would cut it off. A child closes its connections once it has the average (and has
  // passed it on): wait for that, or until its transfers (height of them, one after another)
  // could not take longer.
  const CollectiveTree tree = collectiveTree(plan_, options_.rank);
  if (tree.height < 1) return;
  const config::Config& c = plan_.config;
  const auto end =
      Clock::now() + toDuration(c.algorithm.roundTimeout * tree.height + c.peers.deadAfter);
  while (Clock::now() < end && !stopRequested()) {
    drainInbox();
    bool all = true;
    for (int j : tree.children) all = all && core_->isDead(j);
    if (all) break;
    inbox_.waitForItem(Clock::now() + std::chrono::milliseconds(50));
  }
}

void PeerSession::Impl::sendDivergenceNotices() {
  SendList sends;
  for (int j : core_->neighbours()) {
    if (!core_->isDead(j)) sends.emplace_back(j, core_->divergenceNotice(j));
  }
  // The round's own sends may still be pending: their buffers are untouched (notices have their
  // own).
  postSends(std::move(sends));
  waitSends(Clock::now() + std::chrono::seconds(5));
}

Status PeerSession::Impl::finish(bool average) {
  if (finished_) return finishStatus_;
  RoundsOutcome outcome = outcome_;
  outcome.finished = outcome.rounds == plan_.config.run.rounds;
  outcome.stopped = !outcome.finished && stopRequested();
  if (!started_) {
    roundsStart_ = Clock::now();
    started_ = true;
  }
  if (outcome.diverged) {
    sendDivergenceNotices();
  } else {
    linger(outcome.finished);
    if (average && !outcome.finished) {
      // The neighbours are still training: they would not join the collectives.
      log::warn("finalize: not averaging, this peer ran ", outcome.rounds, " of its ",
                plan_.config.run.rounds, " rounds (every peer averages after all run.rounds)");
    } else if (average && !stopRequested()) {
      const auto averageStart = Clock::now();
      const std::size_t values = core_->model().size();
      // Around the ring only when no peer has lost a ring neighbour (every peer learns it from
      // the minimum of the flags); otherwise over the tree, which averages whoever is left.
      bool ring = ringAveraging(plan_, values);
      Status st = Status::ok();
      if (ring) {
        const CollectiveTree t = collectiveTree(plan_, options_.rank, values);
        const double intact = core_->isDead(t.ringPrev) || core_->isDead(t.ringNext) ? 0.0 : 1.0;
        st = runCollectives(ringAgreementCollectives(plan_), std::span<const double>(&intact, 1));
        ring = st.isOk() && core_->collectiveState().at(0) >= 1.0;
      }
      if (st.isOk()) st = runCollectives(averagingCollectives(plan_, values, ring));
      if (!st.isOk()) log::warn("finalize averaging: ", st.toString());
      // The ring's last step (kRingAck) already waited for the next peer to hold everything.
      if (st.isOk() && !ring) lingerForChildren();
      output_.times.averaged = st.isOk() && core_->treeAveraged();
      if (st.isOk() && !core_->treeAveraged()) {
        log::warn("finalize averaging: a tree neighbour was lost; this peer keeps its own model");
      } else if (st.isOk() && core_->treeCount() > 0 &&
                 core_->treeCount() < plan_.config.peers.count) {
        log::warn("finalize averaging: the average is over ", core_->treeCount(), " of ",
                  plan_.config.peers.count, " peers (the others were lost)");
      }
      output_.times.average = secondsSince(averageStart);
      waitSends(Clock::now() + std::chrono::seconds(5));
    }
  }
  finished_ = true;
  // After the averaging, disconnect first: a tree parent lingers until its children closed
  // (lingerForChildren), and the final evaluation and file writes would otherwise add up along
  // every path of the tree. (Otherwise the time they take lets our last sends drain.)
  if (output_.times.average >= 0) shutdown();
  // The last checkpoint on disk before this peer says it finished.
  checkpoints_.flush();
  finishStatus_ = output_.writeFinal(
      *core_, {outcome.rounds, outcome.finished, outcome.stopped, outcome.diverged, seconds()},
      checkpoints_);
  shutdown();
  output_.stopMetrics();  // the endpoint goes away with the run
  if (finishStatus_.isOk() && outcome.diverged) {
    finishStatus_ = aborted(divergenceMessage(*core_->divergence(), std::nan("")));
  }
  return finishStatus_;
}

void PeerSession::Impl::shutdown() {
  if (!loopThread_.joinable()) return;
  // Close on the loop thread, which owns the transports, and wait until that has run: stopping the
  // loop first could drop the close unrun.
  std::promise<void> closed;
  loop_.post([&] {
    if (bootstrap_) bootstrap_->close();
    links_.closeAll();
    if (context_) context_->close();
    closed.set_value();
  });
  closed.get_future().wait();
  loop_.stop();
  loopThread_.join();
  // Released on this thread, after the join: the loop thread, their only user, has exited, so
  // nothing touches them concurrently; they are closed already; and loop_, declared before them,
  // is still alive for destructors that deregister from it. Handlers that close() queued and the
  // loop never ran are dropped with loop_ without running.
  links_.release();
  bootstrap_.reset();
  context_.reset();
}

PeerSession::PeerSession(const RunPlan& plan, const PeerRunOptions& options,
                         std::unique_ptr<PeerCore> core)
    : impl_(std::make_unique<Impl>(plan, options, std::move(core))) {}
PeerSession::~PeerSession() = default;
Status PeerSession::open() { return impl_->open(); }
Status PeerSession::runCollectives(const std::vector<CollectiveKind>& kinds) {
  return impl_->runCollectives(kinds);
}
Status PeerSession::startRound(const RoundInput& input) { return impl_->startRound(input); }
Status PeerSession::completeRound() { return impl_->completeRound(); }
std::int64_t PeerSession::roundsDone() const { return impl_->roundsDone(); }
std::int64_t PeerSession::resumedFrom() const { return impl_->resumedFrom(); }
std::int64_t PeerSession::lastCheckpointRound() const { return impl_->lastCheckpointRound(); }
bool PeerSession::joinedRunning() const { return impl_->joinedRunning(); }
bool PeerSession::stopRequested() const { return impl_->stopRequested(); }
Status PeerSession::finish(bool average) { return impl_->finish(average); }
PeerCore& PeerSession::core() { return impl_->core(); }
std::vector<SessionEvent> PeerSession::takeEvents() { return impl_->takeEvents(); }
void PeerSession::addMetrics(const nlohmann::json& metrics) { impl_->addMetrics(metrics); }

std::uint32_t freshIncarnation() {
  const auto us = std::chrono::duration_cast<std::chrono::microseconds>(
                      std::chrono::system_clock::now().time_since_epoch())
                      .count();
  return std::max<std::uint32_t>(1, static_cast<std::uint32_t>(us));
}

Status runPeerProcess(const RunPlan& plan, const PeerRunOptions& options) {
  GV_ASSIGN_OR_RETURN(auto core, makePeer(plan, options.rank, options.incarnation));
  PeerSession session(plan, options, std::move(core));
  GV_RETURN_IF_ERROR(session.open());
  while (session.roundsDone() < plan.config.run.rounds && !session.stopRequested()) {
    if (Status st = session.startRound(); !st.isOk()) {
      if (st.code() == ErrorCode::kCancelled && session.stopRequested()) break;
      return st;
    }
    const Status st = session.completeRound();
    if (st.code() == ErrorCode::kAborted) break;
    GV_RETURN_IF_ERROR(st);
  }
  return session.finish(plan.config.run.finalAverage);
}

}  // namespace grapevine::engine
