// Collective rounds over a peer's edges, outside the training rounds: the API's start-up model sync
// (kAdoptLowest), --resume's agreement on a round (kMinimum) and finalize averaging (tree, ring or
// gossip averaging). Two parts:
//   - planning (free functions): which collectives a run does, over which spanning tree or ring,
//     in how many chunks: the same answer at every peer, computed from the plan alone;
//   - `Collectives`: one peer's state through a sequence of them (what it sends in a step, to whom,
//     from whom it waits, how it combines what came). No I/O and no envelopes: PeerCore frames,
//     sequences and seals the payloads, queues what arrives per edge and hands each step's
//     messages here in increasing neighbour rank.
// Single-threaded: the owner's (PeerCore's) thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>
#include <utility>
#include <vector>

namespace grapevine::engine {

struct RunPlan;

// Every peer runs the same sequence of collectives; each sends its state (in double) to every
// live neighbour and combines what arrived.
enum class CollectiveKind {
  kAverage,      // y <- y + sum_j w_ij (y_j - y), Metropolis weights of the live degrees
  kAdoptLowest,  // y <- the state of the lowest origin rank seen (self or a neighbour's)
  kMinimum,      // y <- min(y, y_j) element by element (a small state: see Collectives::begin)
  // Exact averaging over a spanning tree (CollectiveTree), `height` steps of each:
  // kTreeSum step s (unchunked): the peers at depth height - s + 1 send (the sum of their subtree's
  // states, its peer count) to their parent, which adds its children's (in increasing rank); the
  // root then divides by the count. kTreeBroadcast step s: the peers at depth s - 1 send the
  // average to their children, which adopt it. With CollectiveTree::chunks the same runs per chunk,
  // pipelined (height + chunks - 1 steps of each); a peer lost midway is left out of the chunks it
  // had not sent (each chunk is the average over the peers it holds). A peer cut off by a lost
  // tree neighbour keeps its own model.
  kTreeSum,
  kTreeBroadcast,
  // Exact averaging around the ring 0 -> 1 -> ... -> n-1 -> 0 (CollectiveTree::ringSize n), the
  // state in n chunks: n - 1 kRingSum steps (reduce-scatter: in step s a peer sends its partial sum
  // of chunk p - s + 1 to the next peer and adds the previous peer's of chunk p - s, with the peer
  // counts; after the last it divides chunk p + 1, complete at it), n - 1 kRingGather steps
  // (all-gather: it passes the finished chunk p - s + 2 on and adopts chunk p - s + 1) and one
  // kRingAck (a one-value message to the previous peer, so that a peer closes only once the next
  // one holds all it sent). Each peer sends 2 (n - 1) / n of the model: no peer carries more.
  // Chunk counts as in the tree kinds; a peer lacking a chunk at the end keeps its own model.
  kRingSum,
  kRingGather,
  kRingAck,
};

inline bool isTreeKind(CollectiveKind k) {
  return k == CollectiveKind::kTreeSum || k == CollectiveKind::kTreeBroadcast;
}
inline bool isRingKind(CollectiveKind k) {
  return k == CollectiveKind::kRingSum || k == CollectiveKind::kRingGather ||
         k == CollectiveKind::kRingAck;
}

// A peer's place in the spanning tree of the tree collectives (the same tree at every peer:
// collectiveTree()).
struct CollectiveTree {
  int parent = -1;            // -1 at the root
  std::vector<int> children;  // increasing rank
  int depth = 0;              // 0 at the root
  int height = 0;             // the tree's largest depth
  // The state travels in this many chunks, pipelined: a peer passes chunk c on while chunk c + 1
  // is on its way to it, so each phase takes height + chunks - 1 steps (instead of height steps
  // of the whole state) and a slow link carries the model about once, not height times in a row.
  int chunks = 1;
  // The ring kinds: the graph has every edge (r, r + 1 mod n) and n >= 3 (else ringSize 0); this
  // peer sends to ringNext and hears from ringPrev.
  int ringSize = 0;
  int ringPrev = -1, ringNext = -1;
};

// ---- Planning: the same answer at every peer ----

// The collectives of finalize averaging over the plan's graph (the union of a time-varying one),
// for a model of `modelValues` values. Connected, with a spanning tree (collectiveTree) at most
// `roundWindow` / 4 high: height + chunks - 1 kTreeSum steps then as many kTreeBroadcast steps, the
// exact average (summed in double along the tree, sent back in f32) at every peer, each peer
// sending its model to its parent once and to each child once, in pipelined chunks. Otherwise
// enough kAverage rounds to bring the spread of the models below 1e-7 of its start (from the
// second-largest eigenvalue modulus of its Metropolis matrix), then n - 1 kAdoptLowest rounds so
// every connected live peer holds the same values.
// With `ring` (and ringAveraging()): the ring kinds instead, (n - 1) kRingSum, (n - 1) kRingGather
// and a kRingAck.
std::vector<CollectiveKind> averagingCollectives(const RunPlan& plan, std::size_t modelValues,
                                                 bool ring = false);
// Whether finalize averaging can go around the ring 0 -> 1 -> ... -> n-1 -> 0: n >= 3, the union
// graph has every edge (r, r + 1 mod n), and the model is over one tree chunk (treeChunks() >= 2).
// Then each peer sends 2 (n - 1) / n of the model in 2 n - 1 steps, where the tree has its root
// take the whole model from each child and send it back to each; for a smaller model the tree's
// fewer steps win. The peers run it only when none has lost a ring neighbour: each runs
// ringAgreementCollectives() (n - 1 kMinimum rounds, enough for any connected part) over the
// flag "both my ring neighbours are alive" first, and the tree when the minimum is 0.
bool ringAveraging(const RunPlan& plan, std::size_t modelValues);
std::vector<CollectiveKind> ringAgreementCollectives(const RunPlan& plan);
// `rank`'s place in the breadth-first spanning tree of the union graph from rank 0
// (topology::breadthFirstTree): the same tree at every peer, with treeChunks(modelValues) chunks.
// height -1 when the graph is disconnected.
// `roundRing`: the ring fields whenever roundRing() holds (the rounds of allreduce and diloco),
// whatever the model's size.
CollectiveTree collectiveTree(const RunPlan& plan, int rank, std::size_t modelValues = 0,
                              bool roundRing = false);
// The averaging that ends every round of allreduce and diloco (algorithms::averagesEachRound):
// around the ring (as finalize's ring kinds, the partial sums in f32: Collectives::setRoundUse)
// when roundRing(), else the tree kinds; empty for one peer or a graph neither can run over
// (validate refuses those).
bool roundRing(const RunPlan& plan, std::size_t modelValues);
std::vector<CollectiveKind> roundAveragingCollectives(const RunPlan& plan, std::size_t modelValues);
// Chunks of a tree collective over `modelValues` values: one per kTreeChunkBytes of f64 state
// (at least 1, at most kMaxTreeChunks). 0 values: 1.
inline constexpr std::size_t kTreeChunkBytes = std::size_t{1} << 20;
inline constexpr int kMaxTreeChunks = 16;
int treeChunks(std::size_t modelValues);
// Whether a sequence of collectives has tree or ring steps (then every peer needs its
// collectiveTree set).
bool usesTree(const std::vector<CollectiveKind>& kinds);
// The start-up sync: diameter-many kAdoptLowest rounds (every peer gets the lowest rank's model).
std::vector<CollectiveKind> adoptLowestCollectives(const RunPlan& plan);

// ---- One peer's state through a sequence of collectives ----

// Payload of a collective message (after the envelope): origin u32 (tree and ring kinds: the
// peer count), then the state as f64 (host order, as snapshots are), or one chunk of it; a tree
// broadcast or ring gather of the model carries f32.
inline constexpr std::size_t kCollectiveHeaderBytes = 4;
// The largest state of a small collective (begin() with an initial state).
inline constexpr std::size_t kMaxSmallCollective = 16;

class Collectives {
 public:
  explicit Collectives(int rank) : rank_(rank) {}

  // This peer's place in the tree of kTreeSum / kTreeBroadcast and the ring of kRingSum /
  // kRingGather / kRingAck (set before the first of them).
  void setTree(const CollectiveTree& tree) { tree_ = tree; }
  // The collectives of a training round (allreduce, diloco: PeerCore::setRoundCollectives): the
  // model's partial sums travel in f32 as well (the wire of a data-parallel all-reduce; the sums
  // still accumulate in f64 here), and the f64 state is kept between rounds rather than touched
  // fresh each round.
  void setRoundUse(bool on) { roundUse_ = on; }

  // Starts the next collective: the first of a sequence from `model` (or from `initial`, at most
  // kMaxSmallCollective values, when not empty), later ones from the previous one's state.
  // `neighbours`: every neighbour (sorted); `live(j)`: whether j's edge is live; `liveDegree`:
  // this peer's live degree now (in its envelopes, and the kAverage weights). Fills `sendTo` (who
  // gets this step's payload()) and `expected` (whose messages combine() waits for).
  void begin(CollectiveKind kind, std::span<const float> model, std::span<const double> initial,
             const std::vector<int>& neighbours, const std::function<bool(int)>& live,
             std::uint32_t liveDegree, std::vector<int>& sendTo, std::vector<int>& expected);
  // The payload this step sends (the same to every receiver): its size, and writing it to `out`
  // (at least payloadBytes() long).
  std::size_t payloadBytes() const;
  void writePayload(std::uint8_t* out) const;

  // Combining this step's messages: beginCombine(), then combine() for each expected neighbour's
  // message that came (in increasing rank; a missing one is left out), then endCombine().
  // combine() returns false, changing nothing, for a payload of another size than this step's
  // (a peer out of step: the caller drops it as `bad_collective`). `theirDegree`: the live degree
  // in the sender's envelope.
  void beginCombine();
  bool combine(std::span<const std::uint8_t> payload, std::uint32_t theirDegree);
  void endCombine();

  // Ends the sequence: the state goes into `model` when the sequence ran on the model and (after
  // tree or ring steps) this peer got the average; a cut-off peer keeps its model. No-op when no
  // sequence is active.
  void finish(std::span<float> model);

  bool active() const { return active_; }
  // The index of the current collective (-1 before the first), in the envelopes' round field.
  std::int64_t index() const { return index_; }
  const std::vector<double>& state() const { return state_; }
  // After tree collectives: whether this peer got the average (false when a tree neighbour was
  // lost on its path to the root; true after other kinds), and over how many peers the root
  // averaged.
  bool treeAveraged() const { return !treeUsed_ || treeReceived_; }
  int treeCount() const { return treeUsed_ ? static_cast<int>(treeCount_) : 0; }
  // The lowest origin rank the last kAdoptLowest collective adopted.
  int adoptedOrigin() const { return origin_; }

 private:
  void planTree(const std::function<bool(int)>& live, std::vector<int>& sendTo,
                std::vector<int>& expected);
  void planRing(const std::function<bool(int)>& live, std::vector<int>& sendTo,
                std::vector<int>& expected);
  // The kinds whose messages carry one chunk of the state (a ring's ack carries one value).
  bool chunked() const {
    return isTreeKind(kind_) || (isRingKind(kind_) && kind_ != CollectiveKind::kRingAck);
  }
  // This peer holds every chunk of the average: treeReceived_, over the fewest peers of a chunk.
  void holdAverage();
  // Ring kinds: chunk c mod the ring's size.
  int ringChunk(int c) const { return ((c % chunks_) + chunks_) % chunks_; }
  // The values of chunk c of the state: [lo, hi).
  std::pair<std::size_t, std::size_t> chunkRange(int c) const {
    const std::size_t n = state_.size(), k = static_cast<std::size_t>(chunks_);
    return {n * static_cast<std::size_t>(c) / k, n * static_cast<std::size_t>(c + 1) / k};
  }
  // The values a message of this step carries (sending chunk `c`): [lo, hi).
  std::pair<std::size_t, std::size_t> messageRange(int c) const;
  // A tree broadcast or ring gather of the model carries f32 (the model's precision: every peer
  // ends with the same float bits either way); everything else f64.
  // In a training round (setRoundUse) the sums too.
  std::size_t elementBytes() const {
    const bool spread =
        kind_ == CollectiveKind::kTreeBroadcast || kind_ == CollectiveKind::kRingGather;
    const bool sum = kind_ == CollectiveKind::kTreeSum || kind_ == CollectiveKind::kRingSum;
    return onModel_ && (spread || (sum && roundUse_)) ? sizeof(float) : sizeof(double);
  }

  const int rank_;
  std::int64_t index_ = -1;  // of the current collective
  CollectiveKind kind_ = CollectiveKind::kAverage;
  bool active_ = false;
  bool onModel_ = true;        // the state is the model (else the caller's small state)
  bool roundUse_ = false;      // setRoundUse
  std::vector<double> state_;  // the collective state
  std::vector<double> next_;   // kAverage: the state being combined
  std::uint32_t degree_ = 0;   // this peer's live degree in this step
  int origin_ = 0;
  CollectiveTree tree_;
  int step_ = 0;    // the step of the current tree or ring phase (1-based)
  int chunks_ = 1;  // tree_.chunks (ring kinds: tree_.ringSize), at most the state's size
  int sendChunk_ = -1, recvChunk_ = -1;    // this step's chunks (-1: none)
  std::vector<std::uint32_t> chunkCount_;  // peers summed into each chunk (after: averaged over)
  std::vector<char> chunkHave_;            // the chunks of the average this peer holds
  bool treeUsed_ = false;                  // this sequence ran tree (or ring) collectives
  bool treeReceived_ = false;              // ... and this peer holds their average
  std::uint32_t treeCount_ = 0;  // peers summed into the state (kTreeSum), or averaged (after)
};

}  // namespace grapevine::engine
