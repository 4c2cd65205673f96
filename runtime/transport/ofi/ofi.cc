// libfabric backend: Context and Connection over one RDM endpoint with tagged messages.
//
// Object graph and lifetimes (all on the loop thread), as in the UCX backend:
//   OfiContext --shared_ptr--> OfiEndpoint <--shared_ptr-- OfiConnection <--shared_ptr-- Op (while
//   pending)
// The OfiEndpoint owns the fabric, domain, address vector, completion queue and endpoint plus the
// queue of ready user callbacks; it outlives the Context while a connection or posted task refers
// to it.
//
// Progress: the providers we use (tcp;ofi_rxm, shm) have manual data progress, i.e. data moves only
// inside fi_cq_read. The loop watches the CQ's wait fd; before going back to sleep we ask
// fi_trywait whether sleeping is safe, and progress again if not. A 200 ms tick keeps connection
// management going while a peer is silent. User callbacks run after fi_cq_read returns, never
// inline.
//
// Completions: every operation passes its Op (which starts with the provider's fi_context2) as the
// completion context; errors come back through fi_cq_readerr with the same context.
#include "runtime/transport/ofi/ofi.h"

#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_eq.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_tagged.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "runtime/common/log.h"
#include "runtime/transport/loop.h"
#include "runtime/transport/ofi/libfabric_api.h"
#include "runtime/transport/registry.h"
#include "runtime/transport/tagged/address_blob.h"
#include "runtime/transport/tagged/checks.h"
#include "runtime/transport/tagged/early_queue.h"
#include "runtime/transport/tagged/goodbye.h"
#include "runtime/transport/tagged/loop_driver.h"
#include "runtime/transport/tagged/op_pool.h"
#include "runtime/transport/tagged/pidfd_watch.h"
#include "runtime/transport/tagged/tag_layout.h"

namespace grapevine::transport::ofi {
namespace {

// Tag layout shared with the UCX backend (tagged/tag_layout.h): sender rank in the high 24
// bits, user tag in the low 40. Receives match the full 64 bits, so a receive posted for peer p
// only takes p's messages although the endpoint (and its matching) is shared by all peers.
// kControlTag carries the "goodbye": close() sends it so the peer fails its pending operations with
// kUnavailable at once instead of waiting for a send to fail.
using tagged::kControlTag;
using tagged::kGoodbyeGrace;
using tagged::wireTag;
constexpr auto kGoodbyeFlush = std::chrono::milliseconds(50);

// Address blob: tagged::AddressHeader, then the endpoint name.
constexpr tagged::AddressFormat kAddressFormat{0x464f5647 /* "GVOF" */, 1, "libfabric",
                                               "libfabric"};

constexpr auto kTickInterval = std::chrono::milliseconds(200);
constexpr int kMaxRoundsPerWake = 32;
constexpr std::size_t kCqBatch = 16;

// ofi_rxm over tcp lets the tcp provider receive straight into the posted buffer ("dynamic receive
// buffers"); a message larger than that buffer then breaks the whole connection to the sender
// instead of failing one receive. Turn it off (rxm then truncates in its own bounce-buffer copy,
// and the link survives) unless the user set it. Must run before the first fi_getinfo() in the
// process, which reads provider parameters once.
//
// ofi_rxm sends a message between its eager size (16 KiB) and its "SAR" limit as segments that its
// unexpected queue holds one by one, each like a message of its own: the backend could then claim
// a segment as if it were a message (drainUnexpected). With the limit at 0 such messages go by
// rendezvous, one entry each, as those above the limit already did. A user who sets the limit
// keeps it, and the unexpected queue is then not drained (a warning says so).
constexpr const char* kSarLimitVar = "FI_OFI_RXM_SAR_LIMIT";
void configureProviderDefaults() {
  static const bool once = [] {
    ::setenv("FI_OFI_RXM_ENABLE_DYN_RBUF", "0", /*overwrite=*/0);
    ::setenv(kSarLimitVar, "0", /*overwrite=*/0);
    return true;
  }();
  (void)once;
}

// What rxm keeps for an unexpected message until it is received: one receive buffer of its eager
// size (FI_OFI_RXM_BUFFER_SIZE, 16 KiB) plus its header, whatever the message's length (a
// rendezvous message's data stays with its sender). The byte bound counts this for each message.
constexpr std::size_t kRxmHeldBytes = 16384 + 64;
constexpr auto kEarlyExpireInterval = std::chrono::seconds(1);
constexpr int kMaxPeeksPerPass = 256;
// After a peek that found nothing, the next waits this long (a peek costs rxm a progress pass and
// a signal on the CQ's wait fd: about 2 us, on every message of a ping-pong otherwise). What can
// arrive meanwhile is bounded by the link's rate times this; the 200 ms tick comes back for it.
constexpr auto kEmptyPeekPause = std::chrono::milliseconds(1);

std::string fiError(ssize_t rc) {
  return loadedLibfabric().strerror(static_cast<int>(rc < 0 ? -rc : rc));
}

class OfiEndpoint;
class OfiConnection;

struct Op {
  fi_context2 context;  // first: the provider's scratch space, and what completions hand back
  // kControlRecv, kAnnounce and kGoodbye are the backend's own (see kControlTag, goodbye.h); they
  // are never in the connection's list of user operations. kPeek, kEarly and kDiscard are the
  // endpoint's (drainUnexpected): a peek that claims the provider's oldest unexpected message, that
  // message while it waits for a receive (its context is what the provider claimed it with), and
  // its discard; they have no connection.
  enum class Kind { kSend, kRecv, kControlRecv, kAnnounce, kGoodbye, kPeek, kEarly, kDiscard };
  Kind kind = Kind::kSend;
  std::shared_ptr<OfiConnection> conn;
  SendCallback sendCb;
  RecvCallback recvCb;
  std::uint64_t wireTag = 0;
  void* buffer = nullptr;
  std::size_t length = 0;
  bool posted = false;    // handed to the provider (false while waiting in the EAGAIN backlog)
  bool claim = false;     // a receive of a message this op's context claimed (fi_trecvmsg FI_CLAIM)
  bool orphaned = false;  // callback already delivered; the provider may still return the context
  Op* prev = nullptr;     // intrusive list of the connection's pending ops
  Op* next = nullptr;

  // Clears it for reuse (tagged::OpPool).
  void reset() {
    conn.reset();
    sendCb = nullptr;
    recvCb = nullptr;
    posted = orphaned = claim = false;
    prev = next = nullptr;
  }
};

class OfiEndpoint : public std::enable_shared_from_this<OfiEndpoint> {
 public:
  OfiEndpoint(Loop& loop, const Options& options) : loop_(loop), options_(options) {}
  ~OfiEndpoint();

  Status init();
  void shutdown();

  Loop& loop() { return loop_; }
  bool open() const { return ep_ != nullptr; }
  int rank() const { return options_.rank; }
  std::size_t maxMessageBytes() const { return options_.maxMessageBytes; }
  const std::vector<std::uint8_t>& address() const { return address_; }
  fid_ep* ep() const { return ep_; }
  fid_av* av() const { return av_; }

  void defer(std::function<void()> fn) {
    ready_.push(std::move(fn));
    schedule();
  }
  void schedule();

  Op* allocOp() { return ops_.alloc(); }
  void releaseOp(Op* op) { ops_.release(op); }
  void adoptOrphan(Op* op) { ops_.adoptOrphan(op); }

  // Hands `op` to the provider, or queues it behind earlier ops that met -FI_EAGAIN (queueing keeps
  // the per-tag order). Returns an error status for a hard failure.
  Status submit(Op* op);
  void dropFromBacklog(Op* op) {
    backlog_.erase(std::remove(backlog_.begin(), backlog_.end(), op), backlog_.end());
  }

  void addConnection(const std::shared_ptr<OfiConnection>& c) { connections_.push_back(c); }

  // The op for a receive of `wireTag`: when a message with that tag came before its receive and is
  // held (drainUnexpected), the op that claimed the oldest of them, set to receive it (claim);
  // otherwise a new op. So a tag's messages are still received in the order they were sent.
  Op* claimedOrNew(std::uint64_t wireTag) {
    Op* op = nullptr;
    if (auto early = early_.take(wireTag)) {
      op = early->handle;
      op->claim = true;
    } else {
      op = allocOp();
    }
    op->wireTag = wireTag;
    return op;
  }
  std::map<std::string, std::uint64_t> counters() const {
    return {{"unexpected_held", early_.held()},
            {"unexpected_held_bytes", early_.heldBytes()},
            {"unexpected_dropped", early_.dropped()}};
  }

  void progressAll();
  bool pollOnce();

 private:
  using EarlyQueue = tagged::EarlyQueue<Op*>;

  ssize_t post(Op* op);
  bool drainCq();  // true if it saw any completion
  // After a progress pass: every message the provider now holds as unexpected is claimed (a peek
  // with FI_PEEK | FI_CLAIM, oldest first) into early_, and what early_ evicts is discarded; once
  // a second, a stranger's old messages too. Only for ofi_rxm, whose peek completes at once and
  // whose unexpected entries are whole messages (see kSarLimitVar); the backend's bounds on what a
  // remote can make it hold (docs/security.md, "Bounds"). True if it claimed any.
  bool drainUnexpected();
  void onPeek(Op* op, bool found, std::uint64_t tag, std::size_t length);
  void discard(const std::vector<Op*>& claimed);
  bool liveSender(std::uint64_t rank) const;
  void retryBacklog();
  void complete(Op* op, Status st, std::size_t bytes);
  // The steps of init(): choose the provider (fi_getinfo), open fabric, domain, address vector,
  // completion queue and endpoint, then this endpoint's address blob and the progress driver (busy
  // polling or the CQ's wait fd, plus the tick). failInit() undoes what was opened.
  Status findProvider();
  Status openEndpoint();
  Status publishAddress();
  Status startProgress();
  Status failInit(const char* what, int code);
  void destroyFabric();

  Loop& loop_;
  Options options_;
  fi_info* info_ = nullptr;
  fid_fabric* fabric_ = nullptr;
  fid_domain* domain_ = nullptr;
  fid_av* av_ = nullptr;
  fid_cq* cq_ = nullptr;
  fid_ep* ep_ = nullptr;
  int waitFd_ = -1;
  tagged::LoopDriver<OfiEndpoint> driver_{loop_};
  std::vector<std::uint8_t> address_;
  tagged::ReadyQueue ready_;
  std::deque<Op*> backlog_;
  tagged::OpPool<Op> ops_;
  std::vector<std::weak_ptr<OfiConnection>> connections_;
  bool drainsUnexpected_ = false;
  EarlyQueue early_;
  Op* peek_ = nullptr;      // the peek the provider has not answered yet
  bool peekFound_ = false;  // what the last answered peek found
  std::chrono::steady_clock::time_point lastExpire_{};
  std::chrono::steady_clock::time_point lastEmptyPeek_{};

  friend class OfiConnection;
};

class OfiConnection : public Connection, public std::enable_shared_from_this<OfiConnection> {
 public:
  OfiConnection(std::shared_ptr<OfiEndpoint> endpoint, int peer, fi_addr_t addr,
                std::uint64_t sendMask = 0, std::uint64_t recvMask = 0)
      : endpoint_(std::move(endpoint)),
        peer_(peer),
        addr_(addr),
        sendMask_(sendMask),
        recvMask_(recvMask) {}
  ~OfiConnection() override;

  void send(Tag tag, std::span<const std::uint8_t> bytes, SendCallback cb) override;
  void recv(Tag tag, std::span<std::uint8_t> buffer, RecvCallback cb) override;
  void close() override;
  int peer() const override { return peer_; }
  Status error() const override {
    GV_CHECK_LOOP_THREAD(endpoint_->loop());
    return error_;
  }
  // Whole messages only: the provider reports a message when it completed a receive.
  std::uint64_t bytesArrived() const override { return bytesArrived_; }
  void noteArrived(std::size_t bytes) { bytesArrived_ += bytes; }

  fi_addr_t fiAddr() const { return addr_; }
  bool alive() const { return error_.isOk() && !closed_; }
  Status watchPeerProcess(pid_t pid);
  // Posts the receive for the peer's control messages and announces this connection's id
  // (goodbye.h). Called once by connect().
  void start();
  // Sticky error, then: cancel posted receives and, after telling the peer (sayGoodbye) or at once,
  // tear down the provider's link to the peer and complete whatever it still holds with error_.
  // Every pending op completes exactly once.
  void fail(Status st, bool sayGoodbye = false);
  // A control op finished: a control message came (`bytes` of it), or ours left.
  void onControl(Op::Kind kind, const Status& st, std::size_t bytes);
  bool goodbyePending() const { return goodbye_ != nullptr; }
  // Right before the endpoint is closed: completes (with error_) every op the provider still holds.
  void abandonPending();
  void link(Op* op) { pending_.link(op); }
  void unlink(Op* op) { pending_.unlink(op); }
  // Status for an op the provider finished with libfabric error `err` (0 = success).
  Status statusFor(int err, const std::string& detail);

 private:
  void stopWatchingPeer() { peerWatch_.stop(); }
  void finishTeardown();
  void postControlRecv();
  // Submits `kind` with this connection's id on kControlTag: the op, or nullptr (not submitted).
  Op* sendControl(tagged::ControlKind kind);

  std::shared_ptr<OfiEndpoint> endpoint_;
  int peer_;
  fi_addr_t addr_;
  const std::uint64_t sendMask_;  // tagged::tagMask of our binding token (0: unbound)
  const std::uint64_t recvMask_;  // of the peer's
  Op* controlRecv_ = nullptr;
  Op* announce_ = nullptr;
  Op* goodbye_ = nullptr;
  std::uint8_t controlIn_[tagged::kControlBytes] = {};
  std::uint8_t announceOut_[tagged::kControlBytes] = {};
  std::uint8_t goodbyeOut_[tagged::kControlBytes] = {};
  const std::uint64_t id_ = tagged::newConnectionId();
  tagged::GoodbyeFilter goodbyes_;
  bool tornDown_ = false;
  std::shared_ptr<Loop::TimerHandle> goodbyeTimer_;
  Status error_;
  bool closed_ = false;
  tagged::PeerProcessWatch peerWatch_;  // the peer's process (same host), watched for exit
  tagged::PendingOps<Op> pending_;
  std::uint64_t bytesArrived_ = 0;  // of the data receives completed (loop thread)
};

// ---- OfiEndpoint --------------------------------------------------------------------------------

Status OfiEndpoint::init() {
  GV_CHECK_LOOP_THREAD(loop_);
  configureProviderDefaults();
  GV_RETURN_IF_ERROR(findProvider());
  GV_RETURN_IF_ERROR(openEndpoint());
  GV_RETURN_IF_ERROR(publishAddress());
  return startProgress();
}

Status OfiEndpoint::findProvider() {
  GV_ASSIGN_OR_RETURN(const LibfabricApi* fi, libfabricApi());
  fi_info* hints = fi->allocinfo();
  if (hints == nullptr) return unavailable("libfabric: fi_allocinfo failed");
  hints->ep_attr->type = FI_EP_RDM;
  hints->caps = FI_TAGGED;
  hints->mode = FI_CONTEXT | FI_CONTEXT2;
  hints->domain_attr->mr_mode = 0;  // we register no memory: providers that need it are skipped
  hints->domain_attr->threading = FI_THREAD_DOMAIN;  // one loop thread drives everything
  hints->domain_attr->data_progress = FI_PROGRESS_MANUAL;
  hints->tx_attr->msg_order = FI_ORDER_SAS;  // same-tag messages arrive in send order
  hints->rx_attr->msg_order = FI_ORDER_SAS;
  hints->fabric_attr->prov_name = strdup(options_.libfabricProvider.c_str());
  const bool isTcp = options_.libfabricProvider.find("tcp") != std::string::npos;
  const char* node = isTcp && !options_.host.empty() ? options_.host.c_str() : nullptr;
  const int rc =
      fi->getinfo(FI_VERSION(1, 11), node, nullptr, node != nullptr ? FI_SOURCE : 0, hints, &info_);
  fi->freeinfo(hints);
  if (rc != 0 || info_ == nullptr) {
    info_ = nullptr;
    return unavailable("libfabric: no RDM tagged endpoint from provider '" +
                       options_.libfabricProvider + "': " + fiError(rc));
  }
  const std::string provider =
      info_->fabric_attr->prov_name != nullptr ? info_->fabric_attr->prov_name : "";
  if (provider.find("ofi_rxm") != std::string::npos) {
    const char* sar = std::getenv(kSarLimitVar);
    drainsUnexpected_ = sar == nullptr || std::string_view(sar) == "0";
    if (!drainsUnexpected_) {
      log::warn("libfabric: ", kSarLimitVar, "=", sar,
                " is set, so messages that come before their receive are held by the provider "
                "without the backend's bounds (docs/security.md)");
    }
  }
  return Status::ok();
}

Status OfiEndpoint::failInit(const char* what, int code) {
  destroyFabric();
  return unavailable(std::string("libfabric: ") + what + ": " + fiError(code));
}

Status OfiEndpoint::openEndpoint() {
  int rc = 0;
  if ((rc = loadedLibfabric().fabric(info_->fabric_attr, &fabric_, nullptr)) != 0)
    return failInit("fi_fabric", rc);
  if ((rc = fi_domain(fabric_, info_, &domain_, nullptr)) != 0) return failInit("fi_domain", rc);

  fi_av_attr avAttr{};
  avAttr.type = FI_AV_TABLE;
  if ((rc = fi_av_open(domain_, &avAttr, &av_, nullptr)) != 0) return failInit("fi_av_open", rc);

  fi_cq_attr cqAttr{};
  cqAttr.format = FI_CQ_FORMAT_TAGGED;
  cqAttr.wait_obj = options_.busyPoll ? FI_WAIT_NONE : FI_WAIT_FD;
  cqAttr.size = 0;
  if ((rc = fi_cq_open(domain_, &cqAttr, &cq_, nullptr)) != 0) return failInit("fi_cq_open", rc);

  if ((rc = fi_endpoint(domain_, info_, &ep_, nullptr)) != 0) return failInit("fi_endpoint", rc);
  if ((rc = fi_ep_bind(ep_, &av_->fid, 0)) != 0) return failInit("fi_ep_bind(av)", rc);
  if ((rc = fi_ep_bind(ep_, &cq_->fid, FI_TRANSMIT | FI_RECV)) != 0)
    return failInit("fi_ep_bind(cq)", rc);
  if ((rc = fi_enable(ep_)) != 0) return failInit("fi_enable", rc);
  return Status::ok();
}

Status OfiEndpoint::publishAddress() {
  std::vector<std::uint8_t> name(256);
  std::size_t nameLen = name.size();
  int rc = fi_getname(&ep_->fid, name.data(), &nameLen);
  if (rc == -FI_ETOOSMALL) {
    name.resize(nameLen);
    rc = fi_getname(&ep_->fid, name.data(), &nameLen);
  }
  if (rc != 0) return failInit("fi_getname", rc);
  address_ = tagged::encodeAddress(kAddressFormat, options_.rank,
                                   std::span<const std::uint8_t>(name.data(), nameLen));
  return Status::ok();
}

Status OfiEndpoint::startProgress() {
  std::weak_ptr<OfiEndpoint> weak = weak_from_this();
  if (options_.busyPoll) {
    driver_.poll(weak);
  } else {
    if (const int rc = fi_control(&cq_->fid, FI_GETWAIT, &waitFd_); rc != 0)
      return failInit("FI_GETWAIT", rc);
    driver_.watch(waitFd_, weak);
  }
  driver_.tick(*this, kTickInterval);
  return Status::ok();
}

void OfiEndpoint::schedule() { driver_.schedule(shared_from_this()); }

ssize_t OfiEndpoint::post(Op* op) {
  if (op->kind == Op::Kind::kSend || op->kind == Op::Kind::kGoodbye ||
      op->kind == Op::Kind::kAnnounce) {
    return fi_tsend(ep_, op->buffer, op->length, nullptr, op->conn->fiAddr(), op->wireTag,
                    &op->context);
  }
  if (op->kind == Op::Kind::kDiscard || op->claim) {
    iovec iov{op->buffer, op->length};
    fi_msg_tagged msg{};
    msg.msg_iov = op->kind == Op::Kind::kDiscard ? nullptr : &iov;
    msg.iov_count = op->kind == Op::Kind::kDiscard ? 0 : 1;
    msg.addr = FI_ADDR_UNSPEC;
    msg.tag = op->wireTag;
    msg.context = &op->context;
    return fi_trecvmsg(ep_, &msg,
                       op->kind == Op::Kind::kDiscard ? FI_CLAIM | FI_DISCARD : FI_CLAIM);
  }
  return fi_trecv(ep_, op->buffer, op->length, nullptr, FI_ADDR_UNSPEC, op->wireTag, 0,
                  &op->context);
}

Status OfiEndpoint::submit(Op* op) {
  if (backlog_.empty()) {
    const ssize_t rc = post(op);
    if (rc == 0) {
      op->posted = true;
      return Status::ok();
    }
    if (rc != -FI_EAGAIN) return unavailable("libfabric: post failed: " + fiError(rc));
  }
  backlog_.push_back(op);
  return Status::ok();
}

void OfiEndpoint::retryBacklog() {
  while (!backlog_.empty() && ep_ != nullptr) {
    Op* op = backlog_.front();
    const ssize_t rc = post(op);
    if (rc == -FI_EAGAIN) return;
    backlog_.pop_front();
    if (rc == 0) {
      op->posted = true;
    } else if (op->kind == Op::Kind::kDiscard) {
      releaseOp(op);  // no connection to tell; the provider keeps the message until it closes
    } else {
      auto conn = op->conn;
      conn->unlink(op);
      complete(op, conn->statusFor(static_cast<int>(-rc), "post"), 0);
    }
  }
}

void OfiEndpoint::complete(Op* op, Status st, std::size_t bytes) {
  if (op->kind == Op::Kind::kControlRecv || op->kind == Op::Kind::kGoodbye ||
      op->kind == Op::Kind::kAnnounce) {
    auto conn = op->conn;
    const Op::Kind kind = op->kind;
    releaseOp(op);
    conn->onControl(kind, st, bytes);
    return;
  }
  if (op->kind == Op::Kind::kSend) {
    defer([cb = std::move(op->sendCb), st = std::move(st)] { cb(st); });
  } else {
    if (st.isOk() && op->conn) op->conn->noteArrived(bytes);
    defer([cb = std::move(op->recvCb), st = std::move(st), bytes] { cb(st, bytes); });
  }
  releaseOp(op);
}

bool OfiEndpoint::drainCq() {
  bool any = false;
  fi_cq_tagged_entry entries[kCqBatch];
  while (cq_ != nullptr) {
    const ssize_t n = fi_cq_read(cq_, entries, kCqBatch);
    if (n > 0) {
      any = true;
      for (ssize_t i = 0; i < n; ++i) {
        Op* op = reinterpret_cast<Op*>(entries[i].op_context);
        if (op->orphaned) {
          ops_.releaseOrphan(op);
          continue;
        }
        if (op->kind == Op::Kind::kPeek) {
          onPeek(op, true, entries[i].tag, entries[i].len);
          continue;
        }
        if (op->kind == Op::Kind::kDiscard) {
          releaseOp(op);
          continue;
        }
        auto conn = op->conn;
        conn->unlink(op);
        complete(op, conn->statusFor(0, ""), entries[i].len);
      }
      continue;
    }
    if (n == -FI_EAVAIL) {
      any = true;
      fi_cq_err_entry err{};
      if (fi_cq_readerr(cq_, &err, 0) != 1) break;
      Op* op = reinterpret_cast<Op*>(err.op_context);
      if (op == nullptr) continue;
      if (op->orphaned) {
        ops_.releaseOrphan(op);
        continue;
      }
      if (op->kind == Op::Kind::kPeek) {  // FI_ENOMSG: nothing unexpected (or the peek failed)
        onPeek(op, false, 0, 0);
        continue;
      }
      if (op->kind == Op::Kind::kDiscard) {
        releaseOp(op);
        continue;
      }
      auto conn = op->conn;
      conn->unlink(op);
      const char* detail = fi_cq_strerror(cq_, err.prov_errno, err.err_data, nullptr, 0);
      complete(op, conn->statusFor(err.err, detail != nullptr ? detail : ""), 0);
      continue;
    }
    break;  // -FI_EAGAIN: empty
  }
  return any;
}

bool OfiEndpoint::drainUnexpected() {
  if (!drainsUnexpected_ || ep_ == nullptr) return false;
  const auto now = std::chrono::steady_clock::now();
  bool took = false;
  // One peek at a time, and none while receives wait in the backlog (they must match first).
  const bool rested = peekFound_ || now - lastEmptyPeek_ >= kEmptyPeekPause;
  for (int i = 0; rested && i < kMaxPeeksPerPass && peek_ == nullptr && backlog_.empty(); ++i) {
    Op* op = allocOp();
    op->kind = Op::Kind::kPeek;
    fi_msg_tagged msg{};
    msg.addr = FI_ADDR_UNSPEC;
    msg.tag = 0;
    msg.ignore = ~std::uint64_t{0};  // any tag: the oldest unexpected message
    msg.context = &op->context;
    const ssize_t rc = fi_trecvmsg(ep_, &msg, FI_PEEK | FI_CLAIM);
    if (rc != 0) {
      releaseOp(op);
      if (rc != -FI_EAGAIN) {
        drainsUnexpected_ = false;
        log::warn("libfabric: the provider refused a peek (", fiError(rc),
                  "): messages that come before their receive are held without the backend's "
                  "bounds from now on");
      }
      break;
    }
    peek_ = op;
    op->posted = true;
    drainCq();  // rxm answers a peek at once; an answer still to come ends this pass
    if (peek_ != nullptr || !peekFound_) break;
    took = true;
  }
  if (now - lastExpire_ >= kEarlyExpireInterval) {
    lastExpire_ = now;
    discard(early_.expire(now, [this](std::uint64_t rank) { return liveSender(rank); }));
  }
  if (auto warning = early_.dropWarning("libfabric")) log::warn(*warning);
  return took;
}

void OfiEndpoint::onPeek(Op* op, bool found, std::uint64_t tag, std::size_t length) {
  peek_ = nullptr;
  peekFound_ = found;
  if (!found) {
    lastEmptyPeek_ = std::chrono::steady_clock::now();
    releaseOp(op);
    return;
  }
  // The op's context now holds the provider's claim on the message: it waits in early_ as is.
  op->kind = Op::Kind::kEarly;
  op->posted = false;
  op->wireTag = tag;
  op->length = length;
  discard(early_.add(tag, op, length, kRxmHeldBytes, std::chrono::steady_clock::now(),
                     [this](std::uint64_t rank) { return liveSender(rank); }));
}

void OfiEndpoint::discard(const std::vector<Op*>& claimed) {
  for (Op* op : claimed) {
    op->kind = Op::Kind::kDiscard;
    op->buffer = nullptr;
    op->length = 0;
    // A discard is a claim like a receive: behind the backlog's receives when there are any. It
    // completes through the CQ, which releases the op.
    if (!submit(op).isOk()) {
      releaseOp(op);  // the provider keeps the message until the endpoint closes
    }
  }
}

bool OfiEndpoint::liveSender(std::uint64_t rank) const {
  for (const auto& weak : connections_) {
    if (auto c = weak.lock(); c && static_cast<std::uint64_t>(c->peer()) == rank && c->alive())
      return true;
  }
  return false;
}

void OfiEndpoint::progressAll() {
  GV_CHECK_LOOP_THREAD(loop_);
  auto keepAlive = shared_from_this();
  for (int round = 0; round < kMaxRoundsPerWake; ++round) {
    drainCq();
    retryBacklog();
    drainUnexpected();
    if (ready_.runBatch()) continue;
    if (cq_ == nullptr || options_.busyPoll) return;
    fid* fids[] = {&cq_->fid};
    if (fi_trywait(fabric_, fids, 1) == FI_SUCCESS) return;  // safe to sleep on the wait fd
  }
  schedule();
}

bool OfiEndpoint::pollOnce() {
  bool worked = drainCq();
  retryBacklog();
  if (drainUnexpected()) worked = true;
  if (ready_.runBatch()) worked = true;
  return worked;
}

void OfiEndpoint::shutdown() {
  GV_CHECK_LOOP_THREAD(loop_);
  if (ep_ == nullptr) return;
  auto keepAlive = shared_from_this();
  std::vector<std::shared_ptr<OfiConnection>> live;
  for (auto& weak : connections_) {
    if (auto c = weak.lock()) live.push_back(std::move(c));
  }
  connections_.clear();
  for (auto& c : live) c->close();
  // Give the goodbyes a moment to leave (they are small eager sends), so peers learn of the close.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(200);
  while (std::chrono::steady_clock::now() < deadline &&
         std::any_of(live.begin(), live.end(), [](auto& c) { return c->goodbyePending(); })) {
    drainCq();
    retryBacklog();
  }
  drainCq();
  // Claimed messages no receive took, and a peek not answered yet, go with the endpoint below.
  for (Op* op : early_.clear()) releaseOp(op);
  std::erase_if(backlog_, [this](Op* op) {
    if (op->kind != Op::Kind::kDiscard) return false;
    releaseOp(op);
    return true;
  });
  if (peek_ != nullptr) adoptOrphan(std::exchange(peek_, nullptr));
  // Whatever the provider still holds goes away with the endpoint below: complete it here, once.
  for (auto& c : live) c->abandonPending();
  if (!ready_.empty()) schedule();
  destroyFabric();
}

void OfiEndpoint::destroyFabric() {
  driver_.detach();
  if (ep_ != nullptr) fi_close(&ep_->fid);
  ep_ = nullptr;
  if (cq_ != nullptr) fi_close(&cq_->fid);
  cq_ = nullptr;
  if (av_ != nullptr) fi_close(&av_->fid);
  av_ = nullptr;
  if (domain_ != nullptr) fi_close(&domain_->fid);
  domain_ = nullptr;
  if (fabric_ != nullptr) fi_close(&fabric_->fid);
  fabric_ = nullptr;
  if (info_ != nullptr) loadedLibfabric().freeinfo(info_);
  info_ = nullptr;
  // The endpoint is gone, so the provider holds no context any more.
  ops_.releaseOrphans();
}

OfiEndpoint::~OfiEndpoint() { destroyFabric(); }  // ops_ then deletes every op

// ---- OfiConnection ------------------------------------------------------------------------------

OfiConnection::~OfiConnection() { stopWatchingPeer(); }

Status OfiConnection::watchPeerProcess(pid_t pid) {
  std::weak_ptr<OfiConnection> weak = weak_from_this();
  return peerWatch_.start(endpoint_->loop(), "libfabric", peer_, pid, [weak](Status exited) {
    auto self = weak.lock();
    if (!self) return;
    self->stopWatchingPeer();
    self->fail(std::move(exited));
  });
}

Status OfiConnection::statusFor(int err, const std::string& detail) {
  if (err == 0) return Status::ok();
  if (err == FI_ETRUNC) {
    // tcp;ofi_rxm (1.17) drops its connection to the sender when a message is truncated, losing
    // whatever followed on it. Per-edge exactly-once delivery cannot be kept past that point, so
    // the receive reports the truncation and the connection fails (the engine resynchronises the
    // edge).
    return tagged::truncatedMessage(peer_);
  }
  if (!error_.isOk()) return error_;
  if (err == FI_ECANCELED) return cancelled("operation cancelled");
  // Any other transport error means the link to this peer is broken.
  Status failure =
      unavailable("peer " + std::to_string(peer_) + ": " + loadedLibfabric().strerror(err) +
                  (detail.empty() ? "" : " (" + detail + ")"));
  endpoint_->defer([keep = shared_from_this(), failure] { keep->fail(failure); });
  error_ = failure;
  return failure;
}

void OfiConnection::start() {
  postControlRecv();
  announce_ = sendControl(tagged::ControlKind::kAnnounce);
}

void OfiConnection::postControlRecv() {
  if (controlRecv_ != nullptr || !error_.isOk() || tornDown_ || !endpoint_->open()) return;
  Op* op =
      endpoint_->claimedOrNew(wireTag(static_cast<std::uint64_t>(peer_), kControlTag ^ recvMask_));
  op->kind = Op::Kind::kControlRecv;
  op->conn = shared_from_this();
  op->buffer = controlIn_;
  op->length = sizeof controlIn_;
  controlRecv_ = op;
  if (!endpoint_->submit(op).isOk()) {
    controlRecv_ = nullptr;
    endpoint_->releaseOp(op);
  }
}

Op* OfiConnection::sendControl(tagged::ControlKind kind) {
  std::uint8_t* out = kind == tagged::ControlKind::kAnnounce ? announceOut_ : goodbyeOut_;
  tagged::encodeControl({kind, id_},
                        std::span<std::uint8_t, tagged::kControlBytes>(out, tagged::kControlBytes));
  Op* op = endpoint_->allocOp();
  op->kind = kind == tagged::ControlKind::kAnnounce ? Op::Kind::kAnnounce : Op::Kind::kGoodbye;
  op->conn = shared_from_this();
  op->wireTag = wireTag(static_cast<std::uint64_t>(endpoint_->rank()), kControlTag ^ sendMask_);
  op->buffer = out;
  op->length = tagged::kControlBytes;
  if (!endpoint_->submit(op).isOk()) {
    endpoint_->releaseOp(op);
    return nullptr;
  }
  endpoint_->schedule();
  return op;
}

void OfiConnection::onControl(Op::Kind kind, const Status& st, std::size_t bytes) {
  if (kind == Op::Kind::kControlRecv) {
    controlRecv_ = nullptr;
    if (!st.isOk()) return;
    if (goodbyes_.take(peer_, std::span<const std::uint8_t>(controlIn_, bytes))) {
      fail(unavailable("peer " + std::to_string(peer_) + " closed the connection"));
      return;
    }
    endpoint_->defer([keep = shared_from_this()] { keep->postControlRecv(); });
    return;
  }
  if (kind == Op::Kind::kAnnounce) {
    announce_ = nullptr;
    return;
  }
  goodbye_ = nullptr;
  // A small send may be reported complete once rxm has buffered it, and removing the peer from the
  // address vector drops whatever is still queued for it. Keep progressing a moment so the goodbye
  // reaches the wire, then tear down.
  if (goodbyeTimer_) endpoint_->loop().cancel(goodbyeTimer_);
  std::weak_ptr<OfiConnection> weak = weak_from_this();
  goodbyeTimer_ = endpoint_->loop().after(kGoodbyeFlush, [weak] {
    auto self = weak.lock();
    if (!self) return;
    if (self->endpoint_->open()) self->endpoint_->progressAll();
    self->finishTeardown();
  });
}

void OfiConnection::fail(Status st, bool sayGoodbye) {
  if (error_.isOk()) error_ = std::move(st);
  stopWatchingPeer();
  if (!endpoint_->open()) return;
  if (sayGoodbye && goodbye_ == nullptr && !tornDown_) {
    goodbye_ = sendControl(tagged::ControlKind::kGoodbye);
    if (goodbye_ != nullptr) {
      // A peer that is gone may never take the goodbye; do not wait for it forever.
      std::weak_ptr<OfiConnection> weak = weak_from_this();
      goodbyeTimer_ = endpoint_->loop().after(kGoodbyeGrace, [weak] {
        if (auto self = weak.lock()) self->finishTeardown();
      });
    }
  }
  for (Op* op : pending_.snapshot([](Op*) { return true; })) {
    if (!op->posted) {  // still in the EAGAIN backlog: the provider never saw it
      endpoint_->dropFromBacklog(op);
      unlink(op);
      endpoint_->complete(op, error_, 0);
    } else if (op->kind == Op::Kind::kRecv) {
      // Cancellation completes through the CQ error path (FI_ECANCELED) and reports error_.
      fi_cancel(&endpoint_->ep()->fid, &op->context);
    }
  }
  if (controlRecv_ != nullptr && controlRecv_->posted) {
    fi_cancel(&endpoint_->ep()->fid, &controlRecv_->context);
  }
  if (goodbye_ == nullptr) finishTeardown();
  endpoint_->schedule();
}

void OfiConnection::finishTeardown() {
  if (tornDown_ || !endpoint_->open()) return;
  tornDown_ = true;
  if (goodbyeTimer_) endpoint_->loop().cancel(goodbyeTimer_);
  goodbyeTimer_.reset();
  for (Op** control : {&announce_, &goodbye_}) {
    // Still in the provider: its completion, if any, only recycles it.
    if (*control == nullptr) continue;
    endpoint_->dropFromBacklog(*control);
    endpoint_->adoptOrphan(std::exchange(*control, nullptr));
  }
  // Sends cannot be cancelled on an RDM endpoint. Removing the peer from the address vector makes
  // the provider drop its connection to the peer, after which it no longer reads our send buffers;
  // then the sends complete here, and a late completion for them is ignored (orphaned op).
  fi_addr_t a = addr_;
  (void)fi_av_remove(endpoint_->av(), &a, 1, 0);
  std::vector<Op*> sends = pending_.snapshot([](Op* op) { return op->kind == Op::Kind::kSend; });
  for (Op* op : sends) {
    unlink(op);
    endpoint_->defer([cb = std::move(op->sendCb), st = error_] { cb(st); });
    endpoint_->adoptOrphan(op);
  }
  endpoint_->schedule();
}

void OfiConnection::abandonPending() {
  if (goodbyeTimer_) endpoint_->loop().cancel(goodbyeTimer_);
  goodbyeTimer_.reset();
  for (Op** internal : {&controlRecv_, &announce_, &goodbye_}) {
    if (*internal != nullptr) {
      endpoint_->dropFromBacklog(*internal);
      endpoint_->releaseOp(*internal);
      *internal = nullptr;
    }
  }
  while (!pending_.empty()) {
    Op* op = pending_.head();
    unlink(op);
    endpoint_->dropFromBacklog(op);
    endpoint_->complete(op, error_.isOk() ? cancelled("libfabric context closed") : error_, 0);
  }
}

void OfiConnection::close() {
  GV_CHECK_LOOP_THREAD(endpoint_->loop());
  if (closed_) return;
  closed_ = true;
  fail(cancelled("connection to peer " + std::to_string(peer_) + " closed"), /*sayGoodbye=*/true);
}

void OfiConnection::send(Tag tag, std::span<const std::uint8_t> bytes, SendCallback cb) {
  GV_CHECK_LOOP_THREAD(endpoint_->loop());
  Status invalid = tagged::checkUserTag("libfabric", tag);
  if (invalid.isOk())
    invalid = tagged::checkMessageSize(bytes.size(), endpoint_->maxMessageBytes());
  if (!invalid.isOk()) {
    endpoint_->defer([cb = std::move(cb), invalid] { cb(invalid); });
    return;
  }
  if (!error_.isOk() || !endpoint_->open()) {
    Status st = !error_.isOk() ? error_ : cancelled("libfabric context closed");
    endpoint_->defer([cb = std::move(cb), st] { cb(st); });
    return;
  }
  Op* op = endpoint_->allocOp();
  op->kind = Op::Kind::kSend;
  op->conn = shared_from_this();
  op->sendCb = std::move(cb);
  op->wireTag = wireTag(static_cast<std::uint64_t>(endpoint_->rank()), tag ^ sendMask_);
  op->buffer = const_cast<std::uint8_t*>(bytes.data());  // fi_tsend takes void*; it only reads
  op->length = bytes.size();
  link(op);
  Status st = endpoint_->submit(op);
  if (!st.isOk()) {
    unlink(op);
    endpoint_->complete(op, st, 0);
    fail(st);
    return;
  }
  endpoint_->schedule();
}

void OfiConnection::recv(Tag tag, std::span<std::uint8_t> buffer, RecvCallback cb) {
  GV_CHECK_LOOP_THREAD(endpoint_->loop());
  if (Status invalid = tagged::checkUserTag("libfabric", tag); !invalid.isOk()) {
    endpoint_->defer([cb = std::move(cb), invalid] { cb(invalid, 0); });
    return;
  }
  if (!error_.isOk() || !endpoint_->open()) {
    Status st = !error_.isOk() ? error_ : cancelled("libfabric context closed");
    endpoint_->defer([cb = std::move(cb), st] { cb(st, 0); });
    return;
  }
  Op* op = endpoint_->claimedOrNew(wireTag(static_cast<std::uint64_t>(peer_), tag ^ recvMask_));
  op->kind = Op::Kind::kRecv;
  op->conn = shared_from_this();
  op->recvCb = std::move(cb);
  op->buffer = buffer.data();
  op->length = buffer.size();
  link(op);
  Status st = endpoint_->submit(op);
  if (!st.isOk()) {
    unlink(op);
    endpoint_->complete(op, st, 0);
    return;
  }
  endpoint_->schedule();
}

// ---- OfiContext ---------------------------------------------------------------------------------

class OfiContext : public Context {
 public:
  explicit OfiContext(std::shared_ptr<OfiEndpoint> endpoint) : endpoint_(std::move(endpoint)) {}
  ~OfiContext() override { close(); }

  std::string_view backend() const override { return "libfabric"; }
  std::vector<std::uint8_t> localAddress() const override {
    GV_CHECK_LOOP_THREAD(endpoint_->loop());
    return endpoint_->address();
  }

  Result<std::shared_ptr<Connection>> connect(int peer,
                                              std::span<const std::uint8_t> remote) override {
    return connectBound(peer, remote, DataBinding{});
  }

  // The tags of the connection are masked with the binding's tokens (tagged::tagMask).
  Result<std::shared_ptr<Connection>> connectBound(int peer, std::span<const std::uint8_t> remote,
                                                   const DataBinding& binding) override {
    GV_CHECK_LOOP_THREAD(endpoint_->loop());
    if (!endpoint_->open()) return failedPrecondition("libfabric context is closed");
    GV_RETURN_IF_ERROR(tagged::checkRank("libfabric", "peer rank", peer));
    GV_ASSIGN_OR_RETURN(const tagged::PeerAddress address,
                        tagged::parseAddress(kAddressFormat, peer, remote));
    fi_addr_t addr = FI_ADDR_UNSPEC;
    const int n =
        fi_av_insert(endpoint_->av(), address.backendAddress.data(), 1, &addr, 0, nullptr);
    if (n != 1) {
      return invalidArgument("libfabric: fi_av_insert rejected the address of peer " +
                             std::to_string(peer));
    }
    const tagged::TagMasks masks = tagged::tagMasks(binding, endpoint_->rank(), peer);
    auto conn = std::make_shared<OfiConnection>(endpoint_, peer, addr, masks.send, masks.recv);
    if (address.sameHost()) {
      // A dead peer on this host is seen at once through its pid, not only when a send fails.
      GV_RETURN_IF_ERROR(conn->watchPeerProcess(static_cast<pid_t>(address.header.pid)));
    }
    endpoint_->addConnection(conn);
    conn->start();
    return std::shared_ptr<Connection>(std::move(conn));
  }

  void close() override { endpoint_->shutdown(); }  // checks the thread

  std::map<std::string, std::uint64_t> counters() const override {
    GV_CHECK_LOOP_THREAD(endpoint_->loop());
    return endpoint_->counters();
  }

 private:
  std::shared_ptr<OfiEndpoint> endpoint_;
};

}  // namespace

Result<std::unique_ptr<Context>> makeOfiContext(Loop& loop, const Options& options) {
  GV_CHECK_LOOP_THREAD(loop);
  GV_RETURN_IF_ERROR(tagged::checkRank("libfabric", "rank", options.rank));
  auto endpoint = std::make_shared<OfiEndpoint>(loop, options);
  GV_RETURN_IF_ERROR(endpoint->init());
  return std::unique_ptr<Context>(std::make_unique<OfiContext>(std::move(endpoint)));
}

BackendInfo ofiBackendInfo() {
  static const BackendInfo info = [] {
    configureProviderDefaults();
    BackendInfo out{"libfabric", false, ""};
    Result<const LibfabricApi*> api = libfabricApi();
    if (!api.isOk()) {
      out.reason = "not usable: " + api.status().message();
      return out;
    }
    const LibfabricApi* fi = *api;
    fi_info* hints = fi->allocinfo();
    if (hints == nullptr) {
      out.reason = "not usable: fi_allocinfo failed";
      return out;
    }
    hints->ep_attr->type = FI_EP_RDM;
    hints->caps = FI_TAGGED;
    hints->mode = FI_CONTEXT | FI_CONTEXT2;
    hints->domain_attr->mr_mode = 0;
    hints->fabric_attr->prov_name = strdup(Options{}.libfabricProvider.c_str());
    fi_info* info = nullptr;
    const int rc = fi->getinfo(FI_VERSION(1, 11), nullptr, nullptr, 0, hints, &info);
    fi->freeinfo(hints);
    if (rc != 0 || info == nullptr) {
      out.reason = "not usable: no RDM tagged endpoint from provider '" +
                   Options{}.libfabricProvider + "': " + fiError(rc);
      return out;
    }
    fi->freeinfo(info);
    out.usable = true;
    return out;
  }();
  return info;
}

}  // namespace grapevine::transport::ofi

namespace grapevine::transport {
void registerOfi(Registry& registry) {
  registry.add(BackendEntry{"libfabric", ofi::makeOfiContext, ofi::ofiBackendInfo});
}
}  // namespace grapevine::transport
