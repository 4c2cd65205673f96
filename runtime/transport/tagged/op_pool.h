// The operation bookkeeping of the tagged backends: each connection's list of pending operations
// and the worker/endpoint's pool of recycled operations, including "orphans" (their callback
// already ran, but the library may still hand them back). Loop thread only, like the objects that
// own them.
#pragma once

#include <algorithm>
#include <vector>

namespace grapevine::transport::tagged {

// A connection's pending operations: an intrusive doubly linked list through Op::prev / Op::next.
template <class Op>
class PendingOps {
 public:
  Op* head() const { return head_; }
  bool empty() const { return head_ == nullptr; }
  void link(Op* op) {
    op->prev = nullptr;
    op->next = head_;
    if (head_ != nullptr) head_->prev = op;
    head_ = op;
  }
  void unlink(Op* op) {
    if (op->prev != nullptr) op->prev->next = op->next;
    if (op->next != nullptr) op->next->prev = op->prev;
    if (head_ == op) head_ = op->next;
    op->prev = op->next = nullptr;
  }
  // The pending ops for which `keep(op)` holds, newest first: a snapshot to walk while completing
  // or cancelling them unlinks them.
  template <class Pred>
  std::vector<Op*> snapshot(Pred keep) const {
    std::vector<Op*> out;
    for (Op* op = head_; op != nullptr; op = op->next) {
      if (keep(op)) out.push_back(op);
    }
    return out;
  }

 private:
  Op* head_ = nullptr;
};

// Recycled operations and the orphans. Op must have `bool orphaned`, a `conn` pointer and
// `void reset()` that clears it for reuse. Owns every op it handed out that came back through
// release()/adoptOrphan(); deletes them when destroyed.
template <class Op>
class OpPool {
 public:
  OpPool() = default;
  OpPool(const OpPool&) = delete;
  OpPool& operator=(const OpPool&) = delete;
  ~OpPool() {
    for (Op* op : orphans_) delete op;
    for (Op* op : free_) delete op;
  }

  Op* alloc() {
    if (free_.empty()) return new Op();
    Op* op = free_.back();
    free_.pop_back();
    return op;
  }
  void release(Op* op) {
    op->reset();
    free_.push_back(op);
  }
  // Marks `op` orphaned (it drops its connection) and keeps it until
  // releaseOrphan()/releaseOrphans().
  void adoptOrphan(Op* op) {
    op->orphaned = true;
    op->conn.reset();
    orphans_.push_back(op);
  }
  void releaseOrphan(Op* op) {
    orphans_.erase(std::find(orphans_.begin(), orphans_.end(), op));
    release(op);
  }
  // The library let go of every op (its endpoint or worker is gone): recycle all orphans.
  void releaseOrphans() {
    for (Op* op : orphans_) release(op);
    orphans_.clear();
  }

 private:
  std::vector<Op*> free_;
  std::vector<Op*> orphans_;
};

}  // namespace grapevine::transport::tagged
