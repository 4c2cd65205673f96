#include "runtime/engine/session_checkpoints.h"

#include <chrono>

#include "runtime/common/elapsed.h"
#include "runtime/engine/peer_core.h"

namespace grapevine::engine {

SessionCheckpoints::SessionCheckpoints(const config::Config& config, int rank,
                                       std::uint32_t incarnation)
    : config_(config), rank_(rank), incarnation_(incarnation), knowledge_(config.peers.count) {}

void SessionCheckpoints::open(const std::string& outDir) {
  folder_ = checkpointFolder(config_, outDir, rank_);
}

std::optional<LoadedCheckpoint> SessionCheckpoints::latest(const PeerCore& core,
                                                           std::int64_t maxRound) const {
  return latestCheckpoint(folder_, checkpointIdentity(config_, core), maxRound);
}

void SessionCheckpoints::restored(std::int64_t round) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    knowledge_.learn(rank_, round);
  }
  resumedFrom_ = round;
}

void SessionCheckpoints::writeIfDue(const PeerCore& core, std::int64_t round) {
  const int every = config_.checkpoint.every;
  if (every <= 0 || (round + 1) % every != 0) return;
  const auto start = std::chrono::steady_clock::now();
  if (!writer_) {
    writer_ = std::make_unique<CheckpointWriter>(
        folder_, checkpointIdentity(config_, core), incarnation_, config_.checkpoint.keep,
        [this] {
          std::lock_guard<std::mutex> lock(mu_);
          return knowledge_.everyoneHas();
        },
        [this](std::int64_t written) {
          std::lock_guard<std::mutex> lock(mu_);
          knowledge_.learn(rank_, written);
        });
  }
  // The training thread copies the state (and waits if the previous write is still going); the
  // writer's thread writes and syncs it.
  writer_->write(core);
  lastRound_ = round;
  if (!config_.checkpoint.background) writer_->flush();  // on disk before the next round
  seconds_ += secondsSince(start);
}

void SessionCheckpoints::flush() {
  if (writer_) writer_->flush();
}

void SessionCheckpoints::merge(int from, std::span<const std::uint8_t> bytes) {
  std::lock_guard<std::mutex> lock(mu_);
  if (Status st = knowledge_.merge(bytes); !st.isOk() && malformedLog_.due())
    log::warn("neighbour ", from, ": ", st.message(), "; ignored", malformedLog_.skipped());
}

std::vector<std::vector<std::uint8_t>> SessionCheckpoints::takeUpdates(std::size_t maxBytes) {
  std::lock_guard<std::mutex> lock(mu_);
  return knowledge_.takeUpdates(maxBytes);
}

}  // namespace grapevine::engine
