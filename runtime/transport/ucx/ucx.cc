// UCX backend: Context and Connection over UCP tagged messages.
//
// Why tagged messages and not active messages: the transport contract *is* tag send/recv with
// receives posted into caller-owned buffers, which UCP tag matching implements directly (eager for
// small messages, rendezvous zero-copy into the posted buffer for large ones). Active messages
// would land in UCX-owned buffers and need our own matching queue plus a copy or a second
// rendezvous step.
//
// Object graph and lifetimes (all on the loop thread):
//   UcxContext --shared_ptr--> UcxWorker <--shared_ptr-- UcxConnection <--shared_ptr-- Op (while
//   pending)
// The UcxWorker owns the UCP context/worker and the queue of ready callbacks; it outlives the
// Context as long as a connection or a posted task refers to it, so every callback can still be
// delivered after Context::close(). A pending Op keeps its connection alive, so dropping a
// Connection with operations in flight is safe; Context::close() cancels them all.
//
// Callback discipline: UCX completion callbacks (which run inside ucp_worker_progress) never call
// user code; they push a closure onto UcxWorker::ready_, which runs after progress returns, from a
// posted task, the event-fd handler or the busy poller. So user callbacks never run inline in
// send()/recv()/close() and user code never re-enters ucp_worker_progress.
#include "runtime/transport/ucx/ucx.h"

#include <ucp/api/ucp.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <deque>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "runtime/common/log.h"
#include "runtime/transport/loop.h"
#include "runtime/transport/registry.h"
#include "runtime/transport/tagged/address_blob.h"
#include "runtime/transport/tagged/checks.h"
#include "runtime/transport/tagged/early_queue.h"
#include "runtime/transport/tagged/goodbye.h"
#include "runtime/transport/tagged/loop_driver.h"
#include "runtime/transport/tagged/op_pool.h"
#include "runtime/transport/tagged/pidfd_watch.h"
#include "runtime/transport/tagged/tag_layout.h"

namespace grapevine::transport::ucx {
namespace {

using tagged::kControlTag;
using tagged::kFullMask;
using tagged::kSenderMask;
using tagged::wireTag;

// Address blob (tagged::AddressHeader, then the UCX worker address). The pid and host key let a
// same-host peer watch this process's liveness (see connect()).
constexpr tagged::AddressFormat kAddressFormat{0x58555647 /* "GVUX" little-endian */, 2, "ucx",
                                               "UCX"};

// Keepalive: UCX probes idle endpoints at this interval, and we run a progress pass at
// kTickInterval so that keepalive (which only advances inside ucp_worker_progress) runs even while
// the loop sleeps. Together they bound how long a dead peer with only receives pending goes
// unnoticed (< 2 s).
constexpr const char* kKeepaliveInterval = "300ms";
constexpr auto kTickInterval = std::chrono::milliseconds(200);

// A bounded number of progress/callback rounds per wakeup so a busy peer cannot starve other loop
// work.
constexpr int kMaxRoundsPerWake = 32;
// How long close() waits for its goodbye to leave before it force-closes the endpoint anyway.
using tagged::kGoodbyeGrace;

// Messages that came before their receive (tagged/early_queue.h). UCX holds an eager message's
// bytes (up to its rendezvous threshold) and only the header of a rendezvous one; held bytes are
// counted as the message's length up to this much, or the configured threshold if larger.
using EarlyQueue = tagged::EarlyQueue<ucp_tag_message_h>;
constexpr std::size_t kEagerBytesEstimate = std::size_t{1} << 20;
constexpr auto kEarlyExpireInterval = std::chrono::seconds(1);

std::string ucsError(ucs_status_t st) { return ucs_status_string(st); }

class UcxWorker;
class UcxConnection;
struct Op;
UcxWorker* workerOf(Op* op);

struct Op {
  // kControlRecv / kAnnounce / kGoodbye are the backend's own (kControlTag, goodbye.h), never in
  // the user-op list.
  enum class Kind { kSend, kRecv, kControlRecv, kAnnounce, kGoodbye };
  Kind kind = Kind::kSend;
  std::shared_ptr<UcxConnection> conn;
  UcxWorker* worker = nullptr;  // owner of the op pool (outlives every op it hands out)
  SendCallback sendCb;
  RecvCallback recvCb;
  void* request = nullptr;
  // UCX may run the completion callback before ucp_tag_{send,recv}_nbx returns; while `submitting`,
  // the callback only records the result here and the submitter finishes the op.
  bool submitting = false;
  bool finishedInline = false;
  // Its callback already ran (the connection gave up on it) but UCX still owns the request; the UCX
  // completion, if it ever comes, only recycles the op.
  bool orphaned = false;
  ucs_status_t inlineStatus = UCS_OK;
  std::size_t inlineLength = 0;
  Op* prev = nullptr;  // intrusive list of the connection's pending operations
  Op* next = nullptr;

  // Clears it for reuse (tagged::OpPool).
  void reset() {
    conn.reset();
    sendCb = nullptr;
    recvCb = nullptr;
    request = nullptr;
    submitting = finishedInline = orphaned = false;
    prev = next = nullptr;
  }
};

class UcxWorker : public std::enable_shared_from_this<UcxWorker> {
 public:
  UcxWorker(Loop& loop, const Options& options) : loop_(loop), options_(options) {}
  ~UcxWorker();

  Status init();
  void shutdown();

  Loop& loop() { return loop_; }
  ucp_worker_h handle() const { return ucpWorker_; }
  bool open() const { return ucpWorker_ != nullptr; }
  int rank() const { return options_.rank; }
  std::size_t maxMessageBytes() const { return options_.maxMessageBytes; }
  const std::vector<std::uint8_t>& address() const { return address_; }

  // Queues a closure to run on the loop thread after the current progress pass (never inline).
  void defer(std::function<void()> fn) {
    ready_.push(std::move(fn));
    schedule();
  }
  // Makes sure a progress pass runs soon (after new operations were handed to UCX).
  void schedule();

  Op* allocOp() {
    Op* op = ops_.alloc();
    op->worker = this;
    return op;
  }
  void releaseOp(Op* op) { ops_.release(op); }

  // Keeps an orphaned op alive until UCX completes it or the worker is destroyed.
  void adoptOrphan(Op* op) { ops_.adoptOrphan(op); }
  void releaseOrphan(Op* op) { ops_.releaseOrphan(op); }

  void addConnection(const std::shared_ptr<UcxConnection>& c) { connections_.push_back(c); }
  // Endpoint close requests still in flight; freed once UCX finishes them.
  void trackClose(void* request) { closing_.push_back(request); }

  // Progresses UCX and runs ready callbacks until idle, then re-arms the event fd.
  void progressAll();
  // One busy-poll step; true if it did any work.
  bool pollOnce();

  // The oldest message with wire tag `wire` that came before its receive, taken out of UCX's
  // unexpected queue (drainUnexpected); the caller receives it with ucp_tag_msg_recv_nbx.
  std::optional<EarlyQueue::Entry> takeEarly(std::uint64_t wire) { return early_.take(wire); }
  std::map<std::string, std::uint64_t> counters() const {
    return {{"unexpected_held", early_.held()},
            {"unexpected_held_bytes", early_.heldBytes()},
            {"unexpected_dropped", early_.dropped()}};
  }

 private:
  // The steps of init(): the UCP context and worker, this worker's address blob, and the progress
  // driver (busy polling or the worker's event fd, plus the tick).
  Status createWorker();
  Status publishAddress();
  Status startProgress();
  void destroyUcx();
  void sweepClosing();
  // After a progress pass: every message UCX now holds as unexpected goes into early_ (its handle
  // only), and what early_ evicts is discarded; once a second, a stranger's old messages too.
  bool drainUnexpected();
  // Receives each message into nothing (UCX completes it as truncated and frees what it held).
  void discard(const std::vector<ucp_tag_message_h>& messages);
  // Whether this worker has a connection to `rank` that has not failed.
  bool liveSender(std::uint64_t rank) const;

  Loop& loop_;
  Options options_;
  ucp_context_h ucpContext_ = nullptr;
  ucp_worker_h ucpWorker_ = nullptr;
  int efd_ = -1;
  tagged::LoopDriver<UcxWorker> driver_{loop_};
  std::vector<std::uint8_t> address_;
  tagged::ReadyQueue ready_;
  tagged::OpPool<Op> ops_;
  std::vector<void*> closing_;
  std::vector<std::weak_ptr<UcxConnection>> connections_;
  EarlyQueue early_;
  std::chrono::steady_clock::time_point lastExpire_{};
};

class UcxConnection : public Connection, public std::enable_shared_from_this<UcxConnection> {
 public:
  UcxConnection(std::shared_ptr<UcxWorker> worker, int peer, std::uint64_t sendMask = 0,
                std::uint64_t recvMask = 0)
      : worker_(std::move(worker)), peer_(peer), sendMask_(sendMask), recvMask_(recvMask) {}
  ~UcxConnection() override;

  Status createEndpoint(const ucp_address_t* address, ucp_err_handling_mode_t mode);
  // Fails the connection with kUnavailable when process `pid` (a peer on this host) exits.
  Status watchPeerProcess(pid_t pid);

  void send(Tag tag, std::span<const std::uint8_t> bytes, SendCallback cb) override;
  void recv(Tag tag, std::span<std::uint8_t> buffer, RecvCallback cb) override;
  void close() override;
  int peer() const override { return peer_; }
  Status error() const override {
    GV_CHECK_LOOP_THREAD(worker_->loop());
    return error_;
  }
  // Whole messages only: UCX reports a message when it completed a receive.
  std::uint64_t bytesArrived() const override { return bytesArrived_; }
  bool alive() const { return error_.isOk() && !closed_; }

  // Posts the receive for the peer's control messages and announces this connection's id
  // (goodbye.h). Called once by connect().
  void start();
  bool goodbyePending() const { return goodbye_ != nullptr; }
  // Called by the UcxWorker: the context is shutting down.
  void closeForShutdown() { close(); }
  // Force-closes the endpoint now (without waiting for the goodbye).
  void teardownNow() { finishTeardown(); }
  // Called by the UcxWorker right before the UCP worker is destroyed: completes (with error_) every
  // operation UCX has not finished, since the worker's destruction releases their requests without
  // callbacks.
  void abandonPending();

 private:
  static void onSendDone(void* request, ucs_status_t st, void* userData);
  static void onRecvDone(void* request, ucs_status_t st, const ucp_tag_recv_info_t* info,
                         void* userData);
  static void onEndpointError(void* arg, ucp_ep_h ep, ucs_status_t st);

  // Sets the sticky error (first one wins), cancels posted receives, and then, after telling the
  // peer (sayGoodbye) or at once, force-closes the endpoint (which completes its pending sends).
  // Pending callbacks complete with error_, each exactly once.
  void fail(Status st, bool sayGoodbye = false);
  void finishTeardown();
  // A control op finished: a control message came (`bytes` of it), or ours left.
  void onControl(Op::Kind kind, ucs_status_t st, std::size_t bytes = 0);
  void postControlRecv();
  // ucp_tag_send_nbx / ucp_tag_recv_nbx of op (user tag `tag`, this peer's wire tag), never
  // completed immediately: the callback runs, inline too (then op->finishedInline is set). The
  // request, or an error pointer. postRecv first takes the tag's oldest message that came before
  // (UcxWorker::takeEarly) and receives it (ucp_tag_msg_recv_nbx), so a tag's messages still come
  // in their send order.
  void* postSend(Op* op, const void* data, std::size_t n, std::uint64_t tag);
  void* postRecv(Op* op, void* data, std::size_t n, std::uint64_t tag);
  // Sends `kind` with this connection's id on kControlTag: the op (completion pending), or nullptr
  // (done at once, or failed).
  Op* sendControl(tagged::ControlKind kind);
  void noteFailure(Status st);
  // Completes `op` (already unlinked): queues its callback with the mapped status, recycles it.
  void finishSend(Op* op, ucs_status_t st);
  void finishRecv(Op* op, ucs_status_t st, std::size_t bytes);
  void link(Op* op) { pending_.link(op); }
  void unlink(Op* op) { pending_.unlink(op); }
  // The status an operation that UCX finished with `st` reports to its callback.
  Status statusFor(ucs_status_t st);
  void closeEndpoint();

  void stopWatchingPeer() { peerWatch_.stop(); }

  std::shared_ptr<UcxWorker> worker_;
  int peer_;
  const std::uint64_t sendMask_;  // tagged::tagMask of our binding token (0: unbound)
  const std::uint64_t recvMask_;  // of the peer's
  ucp_ep_h ep_ = nullptr;
  tagged::PeerProcessWatch peerWatch_;  // the peer's process (same host), watched for exit
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
  tagged::PendingOps<Op> pending_;
  std::uint64_t bytesArrived_ = 0;  // of the data receives completed (loop thread)
};

// ---- UcxWorker ----------------------------------------------------------------------------------

UcxWorker* workerOf(Op* op) { return op->worker; }

Status UcxWorker::init() {
  GV_CHECK_LOOP_THREAD(loop_);
  GV_RETURN_IF_ERROR(createWorker());
  GV_RETURN_IF_ERROR(publishAddress());
  return startProgress();
}

Status UcxWorker::createWorker() {
  ucp_config_t* config = nullptr;
  ucs_status_t st = ucp_config_read(nullptr, nullptr, &config);
  if (st != UCS_OK) return unavailable("ucp_config_read: " + ucsError(st));
  if (!options_.ucxTls.empty()) {
    st = ucp_config_modify(config, "TLS", options_.ucxTls.c_str());
    if (st != UCS_OK) {
      ucp_config_release(config);
      return invalidArgument("transport.ucx.tls '" + options_.ucxTls + "': " + ucsError(st));
    }
  }
  // A user's UCX_RNDV_THRESH wins over the config's (ucp_config_read has applied it already).
  if (options_.ucxRndvThresh > 0 && std::getenv("UCX_RNDV_THRESH") == nullptr) {
    const std::string thresh = std::to_string(options_.ucxRndvThresh);
    st = ucp_config_modify(config, "RNDV_THRESH", thresh.c_str());
    if (st != UCS_OK) {
      ucp_config_release(config);
      return invalidArgument("transport.ucx.rndv_thresh " + thresh + ": " + ucsError(st));
    }
  }
  // Best effort: an older UCX without keepalive still works, it just detects silent peers later.
  (void)ucp_config_modify(config, "KEEPALIVE_INTERVAL", kKeepaliveInterval);

  ucp_params_t params{};
  params.field_mask = UCP_PARAM_FIELD_FEATURES | UCP_PARAM_FIELD_TAG_SENDER_MASK |
                      UCP_PARAM_FIELD_MT_WORKERS_SHARED | UCP_PARAM_FIELD_NAME;
  params.features = UCP_FEATURE_TAG | UCP_FEATURE_WAKEUP;
  params.tag_sender_mask = kSenderMask;
  params.mt_workers_shared = 0;
  params.name = "grapevine";
  st = ucp_init(&params, config, &ucpContext_);
  ucp_config_release(config);
  if (st != UCS_OK) return unavailable("ucp_init: " + ucsError(st));

  ucp_worker_params_t wparams{};
  wparams.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
  wparams.thread_mode = UCS_THREAD_MODE_SINGLE;  // only the loop thread touches the worker
  st = ucp_worker_create(ucpContext_, &wparams, &ucpWorker_);
  if (st != UCS_OK) {
    destroyUcx();
    return unavailable("ucp_worker_create: " + ucsError(st));
  }
  return Status::ok();
}

Status UcxWorker::publishAddress() {
  ucp_address_t* addr = nullptr;
  std::size_t addrLen = 0;
  const ucs_status_t st = ucp_worker_get_address(ucpWorker_, &addr, &addrLen);
  if (st != UCS_OK) {
    destroyUcx();
    return unavailable("ucp_worker_get_address: " + ucsError(st));
  }
  address_ = tagged::encodeAddress(
      kAddressFormat, options_.rank,
      std::span<const std::uint8_t>(reinterpret_cast<const std::uint8_t*>(addr), addrLen));
  ucp_worker_release_address(ucpWorker_, addr);
  return Status::ok();
}

Status UcxWorker::startProgress() {
  std::weak_ptr<UcxWorker> weak = weak_from_this();
  if (options_.busyPoll) {
    driver_.poll(weak);
  } else {
    const ucs_status_t st = ucp_worker_get_efd(ucpWorker_, &efd_);
    if (st != UCS_OK) {
      destroyUcx();
      return unavailable("ucp_worker_get_efd: " + ucsError(st));
    }
    driver_.watch(efd_, weak);
  }
  driver_.tick(*this, kTickInterval);
  return Status::ok();
}

void UcxWorker::schedule() { driver_.schedule(shared_from_this()); }

void UcxWorker::sweepClosing() {
  for (std::size_t i = 0; i < closing_.size();) {
    if (ucp_request_check_status(closing_[i]) != UCS_INPROGRESS) {
      ucp_request_free(closing_[i]);
      closing_[i] = closing_.back();
      closing_.pop_back();
    } else {
      ++i;
    }
  }
}

void UcxWorker::progressAll() {
  GV_CHECK_LOOP_THREAD(loop_);
  auto keepAlive =
      shared_from_this();  // a callback may close the context and drop the last reference
  for (int round = 0; round < kMaxRoundsPerWake; ++round) {
    if (ucpWorker_ != nullptr) {
      while (ucp_worker_progress(ucpWorker_) != 0) {
      }
      if (!closing_.empty()) sweepClosing();
      drainUnexpected();
    }
    if (ready_.runBatch()) continue;  // callbacks may have posted new operations
    if (ucpWorker_ == nullptr || options_.busyPoll) return;
    const ucs_status_t st = ucp_worker_arm(ucpWorker_);
    if (st == UCS_ERR_BUSY) continue;  // events arrived between progress and arm
    return;
  }
  schedule();  // still busy: yield to other loop work, come back soon
}

bool UcxWorker::pollOnce() {
  bool worked = false;
  if (ucpWorker_ != nullptr) {
    while (ucp_worker_progress(ucpWorker_) != 0) worked = true;
    if (!closing_.empty()) sweepClosing();
    if (drainUnexpected()) worked = true;
  }
  if (ready_.runBatch()) worked = true;
  return worked;
}

bool UcxWorker::drainUnexpected() {
  const auto now = std::chrono::steady_clock::now();
  const EarlyQueue::LiveFn live = [this](std::uint64_t rank) { return liveSender(rank); };
  const std::size_t eagerBytes = std::max(kEagerBytesEstimate, options_.ucxRndvThresh);
  bool took = false;
  for (;;) {
    ucp_tag_recv_info_t info{};
    ucp_tag_message_h msg = ucp_tag_probe_nb(ucpWorker_, 0, 0, /*remove=*/1, &info);
    if (msg == nullptr) break;
    took = true;
    discard(early_.add(info.sender_tag, msg, info.length, std::min(info.length, eagerBytes), now,
                       live));
  }
  if (now - lastExpire_ >= kEarlyExpireInterval) {
    lastExpire_ = now;
    discard(early_.expire(now, live));
  }
  if (auto warning = early_.dropWarning("ucx")) log::warn(*warning);
  return took;
}

void UcxWorker::discard(const std::vector<ucp_tag_message_h>& messages) {
  static std::uint8_t scratch[1];
  for (ucp_tag_message_h msg : messages) {
    ucp_request_param_t param{};
    param.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK;
    param.cb.recv = [](void* request, ucs_status_t, const ucp_tag_recv_info_t*, void*) {
      ucp_request_free(request);
    };
    // Into 0 bytes: UCX completes it as truncated (a rendezvous sender is released) and frees
    // what it held. Done at once (nullptr), or the callback frees the request.
    void* req = ucp_tag_msg_recv_nbx(ucpWorker_, scratch, 0, msg, &param);
    (void)req;
  }
}

bool UcxWorker::liveSender(std::uint64_t rank) const {
  for (const auto& weak : connections_) {
    if (auto c = weak.lock(); c && static_cast<std::uint64_t>(c->peer()) == rank && c->alive())
      return true;
  }
  return false;
}

void UcxWorker::shutdown() {
  GV_CHECK_LOOP_THREAD(loop_);
  if (ucpWorker_ == nullptr) return;
  auto keepAlive = shared_from_this();
  std::vector<std::shared_ptr<UcxConnection>> live;
  for (auto& weak : connections_) {
    if (auto c = weak.lock()) live.push_back(std::move(c));
  }
  connections_.clear();
  for (auto& c : live) c->closeForShutdown();
  // Give the goodbyes a moment to leave (small eager sends), so peers learn of the close at once.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(200);
  while (std::chrono::steady_clock::now() < deadline &&
         std::any_of(live.begin(), live.end(), [](auto& c) { return c->goodbyePending(); })) {
    ucp_worker_progress(ucpWorker_);
  }
  for (auto& c : live) c->teardownNow();
  // Messages taken out of UCX's unexpected queue are ours to receive: into nothing.
  discard(early_.clear());
  // Let the forced endpoint closes and the cancellations finish; they are local operations.
  for (int i = 0; i < 1000 && !closing_.empty(); ++i) {
    ucp_worker_progress(ucpWorker_);
    sweepClosing();
  }
  while (ucp_worker_progress(ucpWorker_) != 0) {
  }
  // Anything UCX still holds is released with the worker: complete it here, exactly once.
  for (auto& c : live) c->abandonPending();
  if (!ready_.empty()) schedule();
  destroyUcx();
}

void UcxWorker::destroyUcx() {
  driver_.detach();
  for (void* req : closing_) ucp_request_free(req);
  closing_.clear();
  if (ucpWorker_ != nullptr) {
    ucp_worker_destroy(ucpWorker_);
    ucpWorker_ = nullptr;
  }
  ops_.releaseOrphans();  // UCX released their requests with the worker
  if (ucpContext_ != nullptr) {
    ucp_cleanup(ucpContext_);
    ucpContext_ = nullptr;
  }
}

UcxWorker::~UcxWorker() { destroyUcx(); }  // ops_ then deletes every op

// ---- UcxConnection ------------------------------------------------------------------------------

UcxConnection::~UcxConnection() {
  closeEndpoint();
  stopWatchingPeer();
}

Status UcxConnection::watchPeerProcess(pid_t pid) {
  std::weak_ptr<UcxConnection> weak = weak_from_this();
  return peerWatch_.start(worker_->loop(), "ucx", peer_, pid, [weak](Status exited) {
    auto self = weak.lock();
    if (!self) return;
    self->stopWatchingPeer();
    self->fail(std::move(exited));
  });
}

Status UcxConnection::createEndpoint(const ucp_address_t* address, ucp_err_handling_mode_t mode) {
  ucp_ep_params_t params{};
  params.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE |
                      UCP_EP_PARAM_FIELD_ERR_HANDLER;
  params.address = address;
  params.err_mode = mode;
  params.err_handler.cb = &UcxConnection::onEndpointError;
  params.err_handler.arg = this;  // the endpoint is force-closed before this object goes away
  const ucs_status_t st = ucp_ep_create(worker_->handle(), &params, &ep_);
  if (st != UCS_OK) {
    ep_ = nullptr;
    return unavailable("ucp_ep_create to peer " + std::to_string(peer_) + ": " + ucsError(st));
  }
  return Status::ok();
}

Status UcxConnection::statusFor(ucs_status_t st) {
  if (st == UCS_OK) return Status::ok();
  if (st == UCS_ERR_MESSAGE_TRUNCATED) return tagged::truncatedMessage(peer_);
  if (!error_.isOk()) return error_;  // cancelled by close() or by a peer failure: report the cause
  if (st == UCS_ERR_CANCELED) return cancelled("operation cancelled");
  Status failure = unavailable("peer " + std::to_string(peer_) + ": " + ucsError(st));
  noteFailure(failure);
  return failure;
}

void UcxConnection::onSendDone(void* request, ucs_status_t st, void* userData) {
  Op* op = static_cast<Op*>(userData);
  ucp_request_free(request);
  if (op->submitting) {
    op->finishedInline = true;
    op->inlineStatus = st;
    return;
  }
  if (op->orphaned) return workerOf(op)->releaseOrphan(op);
  auto conn = op->conn;
  conn->unlink(op);
  conn->finishSend(op, st);
}

void UcxConnection::onRecvDone(void* request, ucs_status_t st, const ucp_tag_recv_info_t* info,
                               void* userData) {
  Op* op = static_cast<Op*>(userData);
  ucp_request_free(request);
  const std::size_t bytes = (st == UCS_OK && info != nullptr) ? info->length : 0;
  if (op->submitting) {
    op->finishedInline = true;
    op->inlineStatus = st;
    op->inlineLength = bytes;
    return;
  }
  if (op->orphaned) return workerOf(op)->releaseOrphan(op);
  auto conn = op->conn;
  conn->unlink(op);
  conn->finishRecv(op, st, bytes);
}

void UcxConnection::finishSend(Op* op, ucs_status_t st) {
  if (op->kind == Op::Kind::kGoodbye || op->kind == Op::Kind::kAnnounce) {
    const Op::Kind kind = op->kind;
    worker_->releaseOp(op);
    return onControl(kind, st);
  }
  Status status = statusFor(st);
  worker_->defer([cb = std::move(op->sendCb), status = std::move(status)] { cb(status); });
  worker_->releaseOp(op);
}

void UcxConnection::finishRecv(Op* op, ucs_status_t st, std::size_t bytes) {
  if (op->kind == Op::Kind::kControlRecv) {
    worker_->releaseOp(op);
    return onControl(Op::Kind::kControlRecv, st, bytes);
  }
  Status status = statusFor(st);
  if (status.isOk()) bytesArrived_ += bytes;
  worker_->defer(
      [cb = std::move(op->recvCb), status = std::move(status), bytes] { cb(status, bytes); });
  worker_->releaseOp(op);
}

void UcxConnection::onEndpointError(void* arg, ucp_ep_h ep, ucs_status_t st) {
  auto* self = static_cast<UcxConnection*>(arg);
  self->noteFailure(unavailable("peer " + std::to_string(self->peer_) +
                                " failed (UCX endpoint error: " + ucsError(st) + ")"));
}

void UcxConnection::noteFailure(Status st) {
  // May run inside ucp_worker_progress (a completion or the endpoint error handler): record the
  // error now so every completion from here on reports it, and cancel/close after progress returns.
  if (error_.isOk()) error_ = std::move(st);
  worker_->defer([keep = shared_from_this()] { keep->fail(keep->error_); });
}

void* UcxConnection::postSend(Op* op, const void* data, std::size_t n, std::uint64_t tag) {
  ucp_request_param_t param{};
  param.op_attr_mask =
      UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA | UCP_OP_ATTR_FLAG_NO_IMM_CMPL;
  param.cb.send = &UcxConnection::onSendDone;
  param.user_data = op;
  op->submitting = true;
  void* req = ucp_tag_send_nbx(
      ep_, data, n, wireTag(static_cast<std::uint64_t>(worker_->rank()), tag ^ sendMask_), &param);
  op->submitting = false;
  return req;
}

void* UcxConnection::postRecv(Op* op, void* data, std::size_t n, std::uint64_t tag) {
  ucp_request_param_t param{};
  param.op_attr_mask =
      UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA | UCP_OP_ATTR_FLAG_NO_IMM_CMPL;
  param.cb.recv = &UcxConnection::onRecvDone;
  param.user_data = op;
  const std::uint64_t wire = wireTag(static_cast<std::uint64_t>(peer_), tag ^ recvMask_);
  op->submitting = true;
  void* req;
  if (auto early = worker_->takeEarly(wire)) {
    req = ucp_tag_msg_recv_nbx(worker_->handle(), data, n, early->handle, &param);
  } else {
    req = ucp_tag_recv_nbx(worker_->handle(), data, n, wire, kFullMask, &param);
  }
  op->submitting = false;
  return req;
}

void UcxConnection::start() {
  postControlRecv();
  announce_ = sendControl(tagged::ControlKind::kAnnounce);
}

void UcxConnection::postControlRecv() {
  if (controlRecv_ != nullptr || !error_.isOk() || tornDown_ || !worker_->open()) return;
  Op* op = worker_->allocOp();
  op->kind = Op::Kind::kControlRecv;
  op->conn = shared_from_this();
  void* req = postRecv(op, controlIn_, sizeof controlIn_, kControlTag);
  if (UCS_PTR_IS_ERR(req)) {
    worker_->releaseOp(op);  // cannot happen for a fresh worker receive; then no goodbye detection
    return;
  }
  // It may have been waiting already (the peer's announcement often is: it connected first).
  if (op->finishedInline) return finishRecv(op, op->inlineStatus, op->inlineLength);
  op->request = req;
  controlRecv_ = op;
}

Op* UcxConnection::sendControl(tagged::ControlKind kind) {
  if (ep_ == nullptr || !worker_->open()) return nullptr;
  std::uint8_t* out = kind == tagged::ControlKind::kAnnounce ? announceOut_ : goodbyeOut_;
  tagged::encodeControl({kind, id_},
                        std::span<std::uint8_t, tagged::kControlBytes>(out, tagged::kControlBytes));
  Op* op = worker_->allocOp();
  op->kind = kind == tagged::ControlKind::kAnnounce ? Op::Kind::kAnnounce : Op::Kind::kGoodbye;
  op->conn = shared_from_this();
  void* req = postSend(op, out, tagged::kControlBytes, kControlTag);
  if (UCS_PTR_IS_PTR(req) && !op->finishedInline) {
    op->request = req;
    worker_->schedule();
    return op;
  }
  worker_->releaseOp(op);
  return nullptr;
}

void UcxConnection::onControl(Op::Kind kind, ucs_status_t st, std::size_t bytes) {
  if (kind == Op::Kind::kControlRecv) {
    controlRecv_ = nullptr;
    if (st != UCS_OK) return;
    if (goodbyes_.take(peer_, std::span<const std::uint8_t>(controlIn_, bytes))) {
      fail(unavailable("peer " + std::to_string(peer_) + " closed the connection"));
      return;
    }
    // Not inside the progress call that completed the receive.
    worker_->defer([keep = shared_from_this()] { keep->postControlRecv(); });
    return;
  }
  if (kind == Op::Kind::kAnnounce) {
    announce_ = nullptr;
    return;
  }
  goodbye_ = nullptr;
  finishTeardown();
}

void UcxConnection::fail(Status st, bool sayGoodbye) {
  if (error_.isOk()) error_ = std::move(st);
  stopWatchingPeer();
  if (!worker_->open()) return;
  // Posted receives match on the worker, not the endpoint: cancel this peer's explicitly.
  // Cancelling calls onRecvDone synchronously (it only queues the user callback), which unlinks the
  // op, so walk a snapshot.
  std::vector<Op*> recvs = pending_.snapshot([](Op* op) { return op->kind == Op::Kind::kRecv; });
  if (controlRecv_ != nullptr) recvs.push_back(controlRecv_);
  for (Op* op : recvs) {
    if (op->request != nullptr) ucp_request_cancel(worker_->handle(), op->request);
  }
  if (sayGoodbye && goodbye_ == nullptr && !tornDown_) {
    goodbye_ = sendControl(tagged::ControlKind::kGoodbye);
    if (goodbye_ != nullptr) {
      // A peer that is gone may never take the goodbye; do not wait for it forever.
      std::weak_ptr<UcxConnection> weak = weak_from_this();
      goodbyeTimer_ = worker_->loop().after(kGoodbyeGrace, [weak] {
        if (auto self = weak.lock()) self->finishTeardown();
      });
      return;
    }
  }
  finishTeardown();
}

void UcxConnection::finishTeardown() {
  if (tornDown_) return;
  tornDown_ = true;
  if (goodbyeTimer_) worker_->loop().cancel(goodbyeTimer_);
  goodbyeTimer_.reset();
  // Force-closing the endpoint completes every send still queued on it, the goodbye included, with
  // UCS_ERR_CANCELED.
  closeEndpoint();
  for (Op** control : {&announce_, &goodbye_}) {
    // Not cancelled by the close: UCX keeps the request, we drop the op.
    if (*control != nullptr) worker_->adoptOrphan(std::exchange(*control, nullptr));
  }
  // Without UCX error handling (the same-host shared-memory case) a forced close leaves a
  // rendezvous send that the peer never matched in flight. Complete it now and leave the request to
  // UCX.
  std::vector<Op*> stuck = pending_.snapshot([](Op* op) { return op->kind == Op::Kind::kSend; });
  for (Op* op : stuck) {
    unlink(op);
    worker_->defer([cb = std::move(op->sendCb), st = error_] { cb(st); });
    worker_->adoptOrphan(op);
  }
  worker_->schedule();
}

void UcxConnection::closeEndpoint() {
  if (ep_ == nullptr) return;
  ucp_ep_h ep = ep_;
  ep_ = nullptr;
  if (!worker_->open()) return;  // the worker already destroyed its endpoints
  ucp_request_param_t param{};
  param.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
  param.flags = UCP_EP_CLOSE_FLAG_FORCE;
  void* req = ucp_ep_close_nbx(ep, &param);
  if (UCS_PTR_IS_PTR(req)) worker_->trackClose(req);
}

void UcxConnection::abandonPending() {
  if (goodbyeTimer_) worker_->loop().cancel(goodbyeTimer_);
  goodbyeTimer_.reset();
  for (Op** internal : {&controlRecv_, &announce_, &goodbye_}) {
    if (*internal != nullptr) {
      worker_->releaseOp(*internal);
      *internal = nullptr;
    }
  }
  while (!pending_.empty()) {
    Op* op = pending_.head();
    unlink(op);
    // op->request goes away with the worker (ucp_worker_destroy), which runs right after this.
    Status st = error_.isOk() ? cancelled("ucx context closed") : error_;
    if (op->kind == Op::Kind::kSend) {
      worker_->defer([cb = std::move(op->sendCb), st] { cb(st); });
    } else {
      worker_->defer([cb = std::move(op->recvCb), st] { cb(st, 0); });
    }
    worker_->releaseOp(op);
  }
}

void UcxConnection::close() {
  GV_CHECK_LOOP_THREAD(worker_->loop());
  if (closed_) return;
  closed_ = true;
  fail(cancelled("connection to peer " + std::to_string(peer_) + " closed"), /*sayGoodbye=*/true);
}

void UcxConnection::send(Tag tag, std::span<const std::uint8_t> bytes, SendCallback cb) {
  GV_CHECK_LOOP_THREAD(worker_->loop());
  Status invalid = tagged::checkUserTag("ucx", tag);
  if (invalid.isOk()) invalid = tagged::checkMessageSize(bytes.size(), worker_->maxMessageBytes());
  if (!invalid.isOk()) {
    worker_->defer([cb = std::move(cb), invalid] { cb(invalid); });
    return;
  }
  if (!error_.isOk() || ep_ == nullptr || !worker_->open()) {
    Status st = !error_.isOk() ? error_ : cancelled("ucx context closed");
    worker_->defer([cb = std::move(cb), st] { cb(st); });
    return;
  }
  Op* op = worker_->allocOp();
  op->kind = Op::Kind::kSend;
  op->conn = shared_from_this();
  op->sendCb = std::move(cb);
  void* req = postSend(op, bytes.data(), bytes.size(), tag);
  if (UCS_PTR_IS_ERR(req)) return finishSend(op, UCS_PTR_STATUS(req));
  if (op->finishedInline) return finishSend(op, op->inlineStatus);  // callback freed the request
  op->request = req;
  link(op);
  worker_->schedule();
}

void UcxConnection::recv(Tag tag, std::span<std::uint8_t> buffer, RecvCallback cb) {
  GV_CHECK_LOOP_THREAD(worker_->loop());
  if (Status invalid = tagged::checkUserTag("ucx", tag); !invalid.isOk()) {
    worker_->defer([cb = std::move(cb), invalid] { cb(invalid, 0); });
    return;
  }
  if (!error_.isOk() || !worker_->open()) {
    Status st = !error_.isOk() ? error_ : cancelled("ucx context closed");
    worker_->defer([cb = std::move(cb), st] { cb(st, 0); });
    return;
  }
  Op* op = worker_->allocOp();
  op->kind = Op::Kind::kRecv;
  op->conn = shared_from_this();
  op->recvCb = std::move(cb);
  void* req = postRecv(op, buffer.data(), buffer.size(), tag);
  if (UCS_PTR_IS_ERR(req)) return finishRecv(op, UCS_PTR_STATUS(req), 0);
  if (op->finishedInline) return finishRecv(op, op->inlineStatus, op->inlineLength);
  op->request = req;
  link(op);
  worker_->schedule();
}

// ---- UcxContext ---------------------------------------------------------------------------------

class UcxContext : public Context {
 public:
  explicit UcxContext(std::shared_ptr<UcxWorker> worker) : worker_(std::move(worker)) {}
  ~UcxContext() override { close(); }

  std::string_view backend() const override { return "ucx"; }
  std::vector<std::uint8_t> localAddress() const override {
    GV_CHECK_LOOP_THREAD(worker_->loop());
    return worker_->address();
  }

  Result<std::shared_ptr<Connection>> connect(int peer,
                                              std::span<const std::uint8_t> remote) override {
    return connectBound(peer, remote, DataBinding{});
  }

  // The tags of the connection are masked with the binding's tokens (tagged::tagMask).
  Result<std::shared_ptr<Connection>> connectBound(int peer, std::span<const std::uint8_t> remote,
                                                   const DataBinding& binding) override {
    GV_CHECK_LOOP_THREAD(worker_->loop());
    if (!worker_->open()) return failedPrecondition("ucx context is closed");
    GV_RETURN_IF_ERROR(tagged::checkRank("ucx", "peer rank", peer));
    // UCX reads the worker address in place; parseAddress keeps an aligned copy for the call.
    GV_ASSIGN_OR_RETURN(const tagged::PeerAddress address,
                        tagged::parseAddress(kAddressFormat, peer, remote));
    const tagged::AddressHeader& header = address.header;
    const auto* ucxAddress = reinterpret_cast<const ucp_address_t*>(address.backendAddress.data());
    const tagged::TagMasks masks = tagged::tagMasks(binding, worker_->rank(), peer);
    auto conn = std::make_shared<UcxConnection>(worker_, peer, masks.send, masks.recv);
    // Prefer UCX's own peer-failure handling. UCX 1.13's shared-memory transports (posix, sysv)
    // have none, so with a TLS list of only those, a PEER-mode endpoint is unreachable; for a peer
    // on this host we then use an endpoint without UCX error handling and learn of the peer's death
    // from a pidfd, which the kernel makes readable the moment that process exits.
    const bool sameHost = address.sameHost();
    if (sameHost && header.pid != static_cast<std::uint32_t>(::getpid())) {
      // A peer process on this host: its exit is seen at once (the kernel makes the pidfd
      // readable), whatever the transport; UCX's own detection (keepalive, socket errors) backs it
      // up.
      GV_RETURN_IF_ERROR(conn->watchPeerProcess(static_cast<pid_t>(header.pid)));
    }
    Status st = conn->createEndpoint(ucxAddress, UCP_ERR_HANDLING_MODE_PEER);
    if (st.code() == ErrorCode::kUnavailable && sameHost) {
      st = conn->createEndpoint(ucxAddress, UCP_ERR_HANDLING_MODE_NONE);
      if (st.isOk()) {
        log::info("ucx: peer ", peer, " is on this host and the transports lack peer-failure ",
                  "handling; watching its process (pid ", header.pid, ") for liveness");
      }
    }
    GV_RETURN_IF_ERROR(st);
    worker_->addConnection(conn);
    conn->start();
    worker_->schedule();  // endpoint wire-up proceeds in progress
    return std::shared_ptr<Connection>(std::move(conn));
  }

  void close() override { worker_->shutdown(); }  // checks the thread

  std::map<std::string, std::uint64_t> counters() const override {
    GV_CHECK_LOOP_THREAD(worker_->loop());
    return worker_->counters();
  }

 private:
  std::shared_ptr<UcxWorker> worker_;
};

}  // namespace

Result<std::unique_ptr<Context>> makeUcxContext(Loop& loop, const Options& options) {
  GV_CHECK_LOOP_THREAD(loop);
  GV_RETURN_IF_ERROR(tagged::checkRank("ucx", "rank", options.rank));
  auto worker = std::make_shared<UcxWorker>(loop, options);
  GV_RETURN_IF_ERROR(worker->init());
  return std::unique_ptr<Context>(std::make_unique<UcxContext>(std::move(worker)));
}

BackendInfo ucxBackendInfo() {
  static const BackendInfo info = [] {
    BackendInfo out{"ucx", false, ""};
    ucp_params_t params{};
    params.field_mask = UCP_PARAM_FIELD_FEATURES;
    params.features = UCP_FEATURE_TAG | UCP_FEATURE_WAKEUP;
    ucp_context_h ctx = nullptr;
    const ucs_status_t st = ucp_init(&params, nullptr, &ctx);
    if (st != UCS_OK) {
      out.reason = std::string("not usable: ucp_init failed: ") + ucs_status_string(st);
      return out;
    }
    ucp_cleanup(ctx);
    out.usable = true;
    return out;
  }();
  return info;
}

}  // namespace grapevine::transport::ucx

namespace grapevine::transport {
void registerUcx(Registry& registry) {
  registry.add(BackendEntry{"ucx", ucx::makeUcxContext, ucx::ucxBackendInfo});
}
}  // namespace grapevine::transport
