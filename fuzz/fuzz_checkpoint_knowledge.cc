// libFuzzer target: CheckpointKnowledge::merge (runtime/engine/checkpoint.h), which the process
// driver runs on every checkpoint-rounds control message a neighbour sends (driver.cc: the user
// message of kind 1 on the control link; fuzz_control_link covers the frames around it).
//
// Input: u8 peers (1 + the value mod 64) | u8 maxBytes selector | messages, each u8 length then
// that many bytes (the last one takes what is left). The knowledge starts as a fresh peer's (every
// round -1) and merges the messages in order.
// Properties beyond "no crash, no sanitizer report": a refused message changes nothing (the same
// everyoneHas() and the same pending updates as a copy taken before it) and says why; an accepted
// one never lowers everyoneHas(), and merging it a second time changes nothing (news only grow);
// at the end, takeUpdates(maxBytes) gives messages of at most max(12, maxBytes) bytes, each a whole
// number of entries, that a fresh peer accepts and that bring it to the same everyoneHas().
#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <span>
#include <vector>

#include "runtime/engine/checkpoint.h"

using namespace grapevine;

namespace {

constexpr std::size_t kEntryBytes = 12;  // u32 rank, i64 round

// What a CheckpointKnowledge would tell its neighbours now, taken from a copy (the original keeps
// its pending updates): a view of its whole observable state.
std::vector<std::vector<std::uint8_t>> pending(const engine::CheckpointKnowledge& k) {
  engine::CheckpointKnowledge copy = k;
  return copy.takeUpdates(SIZE_MAX);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 2) return 0;
  static const std::size_t kMaxBytes[] = {0, 1, 12, 13, 24, 100, 65536 - 64, SIZE_MAX};
  const int peers = 1 + data[0] % 64;
  const std::size_t maxBytes = kMaxBytes[data[1] & 7];
  engine::CheckpointKnowledge k(peers);

  std::size_t pos = 2;
  while (pos < size) {
    const std::size_t n = std::min<std::size_t>(data[pos], size - pos - 1);
    const std::span<const std::uint8_t> message(data + pos + 1, n);
    pos += 1 + n;

    const engine::CheckpointKnowledge before = k;
    const Status st = k.merge(message);
    if (!st.isOk()) {
      if (st.message().empty()) std::abort();
      if (k.everyoneHas() != before.everyoneHas() || pending(k) != pending(before)) std::abort();
      continue;
    }
    if (message.size() % kEntryBytes != 0) std::abort();
    if (k.everyoneHas() < before.everyoneHas()) std::abort();
    const engine::CheckpointKnowledge once = k;
    if (!k.merge(message).isOk()) std::abort();
    if (k.everyoneHas() != once.everyoneHas() || pending(k) != pending(once)) std::abort();
  }

  const std::int64_t everyone = k.everyoneHas();
  const auto updates = k.takeUpdates(maxBytes);
  if (!k.takeUpdates(maxBytes).empty()) std::abort();  // taken: nothing pending any more
  const std::size_t cap = std::max(kEntryBytes, maxBytes / kEntryBytes * kEntryBytes);
  engine::CheckpointKnowledge fresh(peers);
  for (const auto& u : updates) {
    if (u.empty() || u.size() > cap || u.size() % kEntryBytes != 0) std::abort();
    if (!fresh.merge(u).isOk()) std::abort();
  }
  if (fresh.everyoneHas() != everyone) std::abort();
  return 0;
}
