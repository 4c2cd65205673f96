// What a tagged backend holds for messages that arrived before any receive was posted for their
// (sender rank, tag): the library keeps such a message in its own "unexpected" queue, which it
// neither bounds nor ages, so anyone who reaches the worker could make it hold any number of
// messages for tags nobody will ever receive. The backend takes every unexpected message out of the
// library's queue as soon as a progress pass has seen it (keeping only the library's handle: the
// bytes stay where the library put them) and records it here, where the bounds are ours
// (docs/security.md, "Bounds"):
//   - per sender rank at most Limits::perSender messages (the sender's oldest goes first);
//   - in all at most Limits::total messages and Limits::totalBytes of held bytes (the oldest of a
//     sender without a live connection goes first, then the oldest of any);
//   - a sender without a live connection (a stranger, or a peer whose connection is not made yet
//     or is gone) has its messages held at most Limits::strangerAge.
// A receive posted later takes the oldest held message of its exact wire tag (take()) before it
// goes to the library, so messages of one tag are still received in the order they were sent.
// Evicted messages are the caller's to discard (the library must still be told); each counts as
// dropped. Pure bookkeeping on the loop thread: no library calls, testable on its own.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "runtime/transport/tagged/tag_layout.h"

namespace grapevine::transport::tagged {

template <class Handle>
class EarlyQueue {
 public:
  using Clock = std::chrono::steady_clock;
  struct Limits {
    std::size_t perSender = 4096;
    std::size_t total = 16384;
    std::size_t totalBytes = std::size_t{256} << 20;
    Clock::duration strangerAge = std::chrono::seconds(30);
  };
  struct Entry {
    Handle handle{};
    std::uint64_t wireTag = 0;
    std::size_t length = 0;     // the message's length
    std::size_t heldBytes = 0;  // what holding it costs (the backend's estimate)
    Clock::time_point at{};
    std::uint64_t id = 0;  // arrival order
  };
  // Whether a sender rank has a live connection.
  using LiveFn = std::function<bool(std::uint64_t sender)>;

  explicit EarlyQueue(Limits limits = {}) : limits_(limits) {}

  // A message taken from the library's unexpected queue. Returns the handles to discard now: the
  // evicted entries (the new one among them if it is the one to go).
  std::vector<Handle> add(std::uint64_t wireTag, Handle handle, std::size_t length,
                          std::size_t heldBytes, Clock::time_point now, const LiveFn& live) {
    const std::uint64_t sender = senderOf(wireTag);
    const std::uint64_t id = nextId_++;
    byTag_[wireTag].push_back(Entry{handle, wireTag, length, heldBytes, now, id});
    all_.push_back({id, wireTag});
    bySender_[sender].push_back({id, wireTag});
    ++senderCount_[sender];
    ++held_;
    heldBytes_ += heldBytes;
    std::vector<Handle> out;
    while (senderCount_[sender] > limits_.perSender) evictOldestOf(sender, out);
    while (held_ > limits_.total || heldBytes_ > limits_.totalBytes) {
      if (!evictOldestStranger(live, out)) evictOldest(out);
    }
    return out;
  }

  // The oldest held message with exactly `wireTag`, removed; nullopt when none is held.
  std::optional<Entry> take(std::uint64_t wireTag) {
    auto it = byTag_.find(wireTag);
    if (it == byTag_.end()) return std::nullopt;
    Entry e = it->second.front();
    removeFront(it);
    // The records of taken messages go once they reach the front (and in expire()).
    oldestHeld(all_);
    if (auto s = bySender_.find(senderOf(wireTag)); s != bySender_.end()) oldestHeld(s->second);
    return e;
  }

  // Evicts the messages of senders without a live connection held longer than strangerAge, and
  // drops the bookkeeping of messages taken since the last call. Call it now and then (every
  // second): what it keeps is bounded by the held messages.
  std::vector<Handle> expire(Clock::time_point now, const LiveFn& live) {
    std::vector<Handle> out;
    std::vector<std::uint64_t> tags;
    for (const auto& [tag, entries] : byTag_) {
      if (now - entries.front().at >= limits_.strangerAge) tags.push_back(tag);
    }
    for (std::uint64_t tag : tags) {
      if (live(senderOf(tag))) continue;
      // One tag's messages share a sender and are in arrival order: the oldest first.
      for (auto it = byTag_.find(tag);
           it != byTag_.end() && now - it->second.front().at >= limits_.strangerAge;
           it = byTag_.find(tag)) {
        out.push_back(it->second.front().handle);
        ++dropped_;
        removeFront(it);
      }
    }
    compact(all_);
    for (auto& [sender, records] : bySender_) compact(records);
    return out;
  }

  // Every held handle, removed (the backend is shutting down); not counted as dropped.
  std::vector<Handle> clear() {
    std::vector<Handle> out;
    for (auto& [tag, entries] : byTag_) {
      for (const Entry& e : entries) out.push_back(e.handle);
    }
    byTag_.clear();
    bySender_.clear();
    senderCount_.clear();
    all_.clear();
    held_ = heldBytes_ = 0;
    return out;
  }

  // A warning about the messages dropped since the last call, or nullopt: the first drop, then one
  // line per thousand (a flood must not flood the log too).
  std::optional<std::string> dropWarning(std::string_view backend) {
    if (dropped_ <= warnedDrops_) return std::nullopt;
    const bool say = warnedDrops_ == 0 || dropped_ / 1000 > warnedDrops_ / 1000;
    warnedDrops_ = dropped_;
    if (!say) return std::nullopt;
    return std::string(backend) + ": dropped " + std::to_string(dropped_) +
           " message(s) that no receive took (over the bound on what waits for a receive, or "
           "from a sender without a connection for " +
           std::to_string(
               std::chrono::duration_cast<std::chrono::seconds>(limits_.strangerAge).count()) +
           " s; docs/security.md)";
  }

  std::size_t held() const { return held_; }
  std::size_t heldBytes() const { return heldBytes_; }
  std::uint64_t dropped() const { return dropped_; }
  const Limits& limits() const { return limits_; }

 private:
  struct Record {
    std::uint64_t id;
    std::uint64_t wireTag;
  };

  // Whether record `r`'s message is still held. Entries leave their tag's deque only at its front
  // (a take, or an eviction of a sender's or of the global oldest, which is the front of its tag),
  // so a record is still held exactly when its id is not below the front's.
  bool isHeld(const Record& r) const {
    auto it = byTag_.find(r.wireTag);
    return it != byTag_.end() && it->second.front().id <= r.id;
  }

  void removeFront(typename std::map<std::uint64_t, std::deque<Entry>>::iterator it) {
    const Entry& e = it->second.front();
    const std::uint64_t sender = senderOf(e.wireTag);
    --held_;
    heldBytes_ -= e.heldBytes;
    if (--senderCount_[sender] == 0) {
      senderCount_.erase(sender);
      bySender_.erase(sender);
    }
    it->second.pop_front();
    if (it->second.empty()) byTag_.erase(it);
  }

  void evictFront(std::uint64_t wireTag, std::vector<Handle>& out) {
    auto it = byTag_.find(wireTag);
    out.push_back(it->second.front().handle);
    ++dropped_;
    removeFront(it);
  }

  void compact(std::deque<Record>& records) const {
    std::erase_if(records, [this](const Record& r) { return !isHeld(r); });
  }

  // Pops stale records off the front of `records`; the first held one, or nullopt.
  std::optional<Record> oldestHeld(std::deque<Record>& records) {
    while (!records.empty() && !isHeld(records.front())) records.pop_front();
    if (records.empty()) return std::nullopt;
    return records.front();
  }

  void evictOldestOf(std::uint64_t sender, std::vector<Handle>& out) {
    auto rec = oldestHeld(bySender_[sender]);
    bySender_[sender].pop_front();
    evictFront(rec->wireTag, out);
  }

  void evictOldest(std::vector<Handle>& out) {
    auto rec = oldestHeld(all_);
    all_.pop_front();
    evictFront(rec->wireTag, out);
  }

  // The oldest message of a sender without a live connection; false when every held message has
  // a live sender.
  bool evictOldestStranger(const LiveFn& live, std::vector<Handle>& out) {
    for (std::size_t i = 0; i < all_.size();) {
      const Record r = all_[i];
      if (!isHeld(r)) {
        all_.erase(all_.begin() + static_cast<std::ptrdiff_t>(i));
        continue;
      }
      if (!live(senderOf(r.wireTag))) {
        all_.erase(all_.begin() + static_cast<std::ptrdiff_t>(i));
        evictFront(r.wireTag, out);
        return true;
      }
      ++i;
    }
    return false;
  }

  Limits limits_;
  std::map<std::uint64_t, std::deque<Entry>> byTag_;
  std::map<std::uint64_t, std::deque<Record>> bySender_;
  std::map<std::uint64_t, std::size_t> senderCount_;
  std::deque<Record> all_;
  std::size_t held_ = 0;
  std::size_t heldBytes_ = 0;
  std::uint64_t dropped_ = 0;
  std::uint64_t warnedDrops_ = 0;
  std::uint64_t nextId_ = 0;
};

}  // namespace grapevine::transport::tagged
