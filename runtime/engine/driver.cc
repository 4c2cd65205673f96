#include "runtime/engine/driver.h"

#include <chrono>
#include <cmath>
#include <condition_variable>
#include <deque>
#include <filesystem>
#include <fstream>
#include <future>
#include <mutex>
#include <thread>

#include "runtime/common/log.h"
#include "runtime/engine/records.h"
#include "runtime/engine/summary.h"
#include "runtime/transport/bootstrap.h"
#include "runtime/transport/loop.h"

namespace grapevine::engine {
namespace {

using Clock = std::chrono::steady_clock;
constexpr transport::Tag kDataTag = 1;
constexpr int kRecvBuffersPerNeighbour = 3;

// What the loop thread hands the training thread, in arrival order per neighbour.
struct InboxItem {
  enum Kind { kMessage, kDead } kind = kMessage;
  int peer = -1;
  int buffer = -1;
  std::size_t bytes = 0;
  std::string why;
};

// Everything one peer process shares between its loop thread and its training thread.
class PeerProcess {
 public:
  PeerProcess(const RunPlan& plan, const PeerRunOptions& options)
      : plan_(plan), options_(options) {}

  Status run();

 private:
  // ---- loop thread ----
  void postRecv(int j, int buffer);
  void sendRound(std::vector<std::pair<int, std::span<const std::uint8_t>>> sends);
  void closeNeighbour(int j);
  // ---- training thread ----
  void push(InboxItem item);
  // Applies everything in the inbox; returns false if nothing was there.
  bool drainInbox();
  bool waitSends(Clock::time_point deadline);
  void markDead(int j, const std::string& why);

  const RunPlan& plan_;
  PeerRunOptions options_;
  transport::Loop loop_;
  std::unique_ptr<transport::Context> context_;
  std::shared_ptr<transport::Bootstrap> bootstrap_;
  std::map<int, transport::Neighbour> neighbours_;                 // loop thread after bootstrap
  std::map<int, std::vector<std::vector<std::uint8_t>>> buffers_;  // per neighbour, fixed
  std::unique_ptr<PeerCore> core_;

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<InboxItem> inbox_;  // guarded by mu_
  int pendingSends_ = 0;         // guarded by mu_
  std::vector<int> deadThisRound_;
  std::map<int, bool> finished_;  // neighbours that completed their last round
};

void PeerProcess::push(InboxItem item) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    inbox_.push_back(std::move(item));
  }
  cv_.notify_one();
}

void PeerProcess::postRecv(int j, int buffer) {
  auto it = neighbours_.find(j);
  if (it == neighbours_.end() || !it->second.data) return;
  auto& buf = buffers_[j][buffer];
  it->second.data->recv(kDataTag, buf, [this, j, buffer](Status st, std::size_t n) {
    if (st.isOk()) {
      push({InboxItem::kMessage, j, buffer, n, ""});
    } else if (st.code() == ErrorCode::kResourceExhausted) {
      log::warn("peer ", j, " sent a message above the maximum; dropped");
      postRecv(j, buffer);
    } else if (st.code() != ErrorCode::kCancelled) {
      push({InboxItem::kDead, j, -1, 0, "data connection: " + st.toString()});
    }
  });
}

void PeerProcess::sendRound(std::vector<std::pair<int, std::span<const std::uint8_t>>> sends) {
  for (auto& [j, bytes] : sends) {
    auto it = neighbours_.find(j);
    if (it == neighbours_.end() || !it->second.data) {
      std::lock_guard<std::mutex> lock(mu_);
      --pendingSends_;
      continue;
    }
    it->second.data->send(kDataTag, bytes, [this, j = j](Status st) {
      {
        std::lock_guard<std::mutex> lock(mu_);
        --pendingSends_;
      }
      cv_.notify_one();
      if (!st.isOk() && st.code() != ErrorCode::kCancelled) {
        push({InboxItem::kDead, j, -1, 0, "send failed: " + st.toString()});
      }
    });
  }
}

void PeerProcess::closeNeighbour(int j) {
  auto it = neighbours_.find(j);
  if (it == neighbours_.end()) return;
  if (it->second.data) it->second.data->close();
  if (it->second.control) it->second.control->close();
}

void PeerProcess::markDead(int j, const std::string& why) {
  if (core_->isDead(j)) return;
  const bool finished = core_->lastRoundFrom(j) >= plan_.config.run.rounds - 1;
  core_->markDead(j);
  loop_.post([this, j] { closeNeighbour(j); });
  if (finished) {
    finished_[j] = true;
    log::debug("neighbour ", j, " finished its rounds");
    return;
  }
  deadThisRound_.push_back(j);
  log::warn("neighbour ", j, " is dead (", why, "); dropping the edge, ", core_->liveDegree(),
            " live neighbours left");
  if (core_->isolated()) log::warn("isolated: every neighbour is dead; training alone");
}

bool PeerProcess::drainInbox() {
  std::deque<InboxItem> items;
  {
    std::lock_guard<std::mutex> lock(mu_);
    items.swap(inbox_);
  }
  for (auto& item : items) {
    if (item.kind == InboxItem::kDead) {
      markDead(item.peer, item.why);
      continue;
    }
    auto& buf = buffers_[item.peer][item.buffer];
    core_->onMessage(item.peer, std::span<const std::uint8_t>(buf.data(), item.bytes));
    loop_.post([this, j = item.peer, b = item.buffer] { postRecv(j, b); });
  }
  return !items.empty();
}

bool PeerProcess::waitSends(Clock::time_point deadline) {
  std::unique_lock<std::mutex> lock(mu_);
  return cv_.wait_until(lock, deadline, [this] { return pendingSends_ <= 0; });
}

Status PeerProcess::run() {
  const config::Config& c = plan_.config;
  const int rank = options_.rank;
  const std::string outDir = options_.outDir.empty() ? c.output.dir : options_.outDir;
  std::error_code ec;
  std::filesystem::create_directories(outDir, ec);
  RecordWriter records;
  GV_RETURN_IF_ERROR(records.open(outDir + "/peer-" + std::to_string(rank) + ".jsonl"));

  GV_ASSIGN_OR_RETURN(core_, makePeer(plan_, rank, options_.incarnation));
  std::thread loopThread([this, busy = c.transport.busyPoll] { loop_.run(busy); });
  struct Joiner {
    transport::Loop& loop;
    std::thread& t;
    ~Joiner() {
      loop.stop();
      if (t.joinable()) t.join();
    }
  } joiner{loop_, loopThread};

  // ---- bootstrap, on the loop thread ----
  transport::Options to;
  to.backend = c.transport.backend;
  to.rank = rank;
  const auto addrs = c.peers.addresses();
  to.host = addrs[rank].host;
  to.busyPoll = c.transport.busyPoll;
  to.ucxTls = c.transport.ucxTls;
  to.libfabricProvider = c.transport.libfabricProvider;
  to.maxMessageBytes = std::max<std::size_t>(core_->maxWireBytes(), 4096);
  to.ioTimeoutSeconds = c.transport.ioTimeout;

  transport::BootstrapOptions bo;
  bo.rank = rank;
  for (const auto& a : addrs) bo.peers.push_back(a.host + ":" + std::to_string(a.port));
  bo.neighbours = core_->neighbours();
  bo.incarnation = options_.incarnation;
  for (const auto& [name, hash] : configParts(plan_)) bo.configParts.push_back({name, hash});
  bo.connectTimeoutSeconds = c.peers.connectTimeout;
  bo.heartbeatIntervalSeconds = c.peers.heartbeatInterval;
  bo.missedHeartbeats =
      std::max(1, static_cast<int>(std::lround(c.peers.deadAfter / c.peers.heartbeatInterval)));
  bo.onEvent = [this](const transport::ControlEvent& ev) {
    if (ev.kind == transport::ControlEventKind::kHeartbeatsResumed) return;
    push({InboxItem::kDead, ev.peer, -1, 0, ev.message});
  };

  std::promise<Status> booted;
  loop_.post([&] {
    auto ctx = transport::makeContext(loop_, to);
    if (!ctx.isOk()) {
      booted.set_value(ctx.status());
      return;
    }
    context_ = std::move(*ctx);
    auto bs = transport::Bootstrap::start(
        loop_, bo, *context_, [this, &booted](Result<std::vector<transport::Neighbour>> r) {
          if (!r.isOk()) {
            booted.set_value(r.status());
            return;
          }
          for (auto& n : *r) {
            const int j = n.peer;
            neighbours_[j] = std::move(n);
            auto& bufs = buffers_[j];
            bufs.resize(kRecvBuffersPerNeighbour);
            for (int b = 0; b < kRecvBuffersPerNeighbour; ++b) {
              bufs[b].resize(core_->maxWireBytes());
              postRecv(j, b);
            }
          }
          booted.set_value(Status::ok());
        });
    if (!bs.isOk())
      booted.set_value(bs.status());
    else
      bootstrap_ = *bs;
  });
  const auto bootStart = Clock::now();
  Status bootStatus = booted.get_future().get();
  if (!bootStatus.isOk()) {
    loop_.post([this] {
      if (context_) context_->close();
    });
    return bootStatus;
  }
  log::info("connected to ", core_->neighbours().size(), " neighbours over ", c.transport.backend,
            " in ", std::chrono::duration<double>(Clock::now() - bootStart).count(), " s");

  // ---- rounds, on this (the training) thread ----
  const auto start = Clock::now();
  const auto roundTimeout = std::chrono::duration<double>(c.algorithm.roundTimeout);
  const auto deadAfter = std::chrono::duration<double>(c.peers.deadAfter);
  auto seconds = [&] { return std::chrono::duration<double>(Clock::now() - start).count(); };
  bool stopped = false;
  std::int64_t round = 0;
  double evalSeconds = 0.0;  // cumulative time spent in evaluateTest
  // Where a round's time goes (cumulative, in the records): local steps + compression, waiting for
  // the neighbours' messages, and mixing them in.
  double stepSeconds = 0.0, waitSeconds = 0.0, mixSeconds = 0.0;
  auto since = [](Clock::time_point t) {
    return std::chrono::duration<double>(Clock::now() - t).count();
  };
  for (; round < c.run.rounds; ++round) {
    if (options_.stop && options_.stop->load()) {
      stopped = true;
      break;
    }
    // The previous round's sends must be done before their buffers are rewritten.
    if (!waitSends(Clock::now() + std::chrono::duration_cast<Clock::duration>(deadAfter))) {
      log::warn("sends of round ", round - 1, " still pending after ", c.peers.deadAfter, " s");
      waitSends(Clock::now() + std::chrono::seconds(30));
    }
    const auto stepStart = Clock::now();
    GV_RETURN_IF_ERROR(core_->beginRound(round));
    stepSeconds += since(stepStart);
    std::vector<std::pair<int, std::span<const std::uint8_t>>> sends;
    for (int j : core_->sendTo()) sends.emplace_back(j, core_->outgoing(j));
    {
      std::lock_guard<std::mutex> lock(mu_);
      pendingSends_ += static_cast<int>(sends.size());
    }
    loop_.post([this, s = std::move(sends)]() mutable { sendRound(std::move(s)); });

    const auto waitStart = Clock::now();
    const auto deadline = waitStart + std::chrono::duration_cast<Clock::duration>(roundTimeout);
    for (;;) {
      drainInbox();
      if (core_->roundComplete()) break;
      if (options_.stop && options_.stop->load()) break;
      if (Clock::now() >= deadline) break;
      if (c.algorithm.overlap) {
        core_->precomputeGradient();  // no-op once done
      }
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait_until(
          lock, std::min(deadline, Clock::now() + std::chrono::milliseconds(250)),
          [this] { return !inbox_.empty() || (options_.stop && options_.stop->load()); });
    }
    const auto mixStart = Clock::now();
    waitSeconds += std::chrono::duration<double>(mixStart - waitStart).count();
    const auto suspects = core_->endRound();
    mixSeconds += since(mixStart);
    if (!suspects.empty()) {
      std::string s;
      for (int j : suspects) s += " " + std::to_string(j);
      log::info("round ", round, ": suspect (no message within ", c.algorithm.roundTimeout,
                " s):", s);
    }
    const bool logNow = (round + 1) % c.output.logEvery == 0 || round + 1 == c.run.rounds;
    const bool evalNow = c.workload.evalEvery > 0 && ((round + 1) % c.workload.evalEvery == 0);
    if (logNow || evalNow || !suspects.empty() || !deadThisRound_.empty()) {
      auto rec = roundRecord(*core_, seconds(), suspects, deadThisRound_);
      rec["lr"] = core_->lastLr();
      if (evalNow) {
        const auto evalStart = Clock::now();
        const auto ev = core_->workload().evaluateTest(core_->model());
        evalSeconds += since(evalStart);
        if (std::isfinite(ev.accuracy)) rec["test_accuracy"] = ev.accuracy;
        rec["test_loss"] = ev.loss;
      }
      // Evaluation runs inline (and holds up the neighbours' round): time-to-accuracy subtracts it.
      rec["eval_seconds"] = evalSeconds;
      rec["step_seconds"] = stepSeconds;
      rec["wait_seconds"] = waitSeconds;
      rec["mix_seconds"] = mixSeconds;
      records.write(rec);
      deadThisRound_.clear();
    }
  }
  const bool finished = round == c.run.rounds;

  // Linger until every live neighbour has its last message from us (they send theirs in the same
  // round), so closing our connections does not cut their final round short.
  const auto lingerEnd =
      Clock::now() + std::chrono::duration_cast<Clock::duration>(roundTimeout + deadAfter);
  while (finished && Clock::now() < lingerEnd) {
    drainInbox();
    bool all = true;
    for (int j : core_->neighbours()) {
      if (!core_->isDead(j) && core_->lastRoundFrom(j) < c.run.rounds - 1) all = false;
    }
    if (all) break;
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait_for(lock, std::chrono::milliseconds(50), [this] { return !inbox_.empty(); });
  }
  waitSends(Clock::now() + std::chrono::seconds(5));

  // Final evaluation on the whole test set, the model, and the final record.
  PeerResult result = collectResult(*core_, finished && !stopped);
  {
    auto rec = roundRecord(*core_, seconds(), {}, {});
    rec["final"] = true;
    if (std::isfinite(result.testAccuracy)) rec["test_accuracy"] = result.testAccuracy;
    rec["test_loss"] = result.testLoss;
    records.write(rec);
  }
  GV_RETURN_IF_ERROR(writeModel(outDir + "/model-" + std::to_string(rank) + ".bin", result.model));
  {
    std::ofstream f(outDir + "/peer-" + std::to_string(rank) + ".final.json");
    auto j = peerResultToJson(result);
    j["wall_seconds"] = seconds();
    f << j.dump(2) << "\n";
  }
  log::info(stopped ? "stopped at round " : "finished ",
            stopped ? std::to_string(round) : "all rounds", " in ", seconds(), " s");
  std::promise<void> closed;
  loop_.post([&] {
    for (auto& [j, n] : neighbours_) closeNeighbour(j);
    if (context_) context_->close();
    closed.set_value();
  });
  closed.get_future().wait();
  return Status::ok();
}

}  // namespace

Status runPeerProcess(const RunPlan& plan, const PeerRunOptions& options) {
  PeerProcess p(plan, options);
  return p.run();
}

}  // namespace grapevine::engine
