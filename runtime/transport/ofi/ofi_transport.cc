// libfabric backend: Context and Connection over one RDM endpoint with tagged messages.
//
// Object graph and lifetimes (all on the loop thread), as in the UCX backend:
//   OfiContext --shared_ptr--> Engine <--shared_ptr-- OfiConnection <--shared_ptr-- Op (while pending)
// The Engine owns the fabric, domain, address vector, completion queue and endpoint plus the queue of
// ready user callbacks; it outlives the Context while a connection or posted task refers to it.
//
// Progress: the providers we use (tcp;ofi_rxm, shm) have manual data progress, i.e. data moves only
// inside fi_cq_read. The loop watches the CQ's wait fd; before going back to sleep we ask fi_trywait
// whether sleeping is safe, and progress again if not. A 200 ms tick keeps connection management
// going while a peer is silent. User callbacks run after fi_cq_read returns, never inline.
//
// Completions: every operation passes its Op (which starts with the provider's fi_context2) as the
// completion context; errors come back through fi_cq_readerr with the same context.
#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_eq.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_tagged.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <deque>
#include <string>
#include <utility>
#include <vector>

#include "runtime/common/log.h"
#include "runtime/transport/loop.h"
#include "runtime/transport/ofi/factory.h"

namespace grapevine::transport::ofi {
namespace {

// Tag layout, identical to the UCX backend's (see runtime/transport/ucx/tag_layout.h): sender rank in
// the high 24 bits, user tag in the low 40. Receives match the full 64 bits, so a receive posted for
// peer p only takes p's messages although the endpoint (and its matching) is shared by all peers.
constexpr int kUserTagBits = 40;
constexpr std::uint64_t kMaxUserTag = (std::uint64_t{1} << kUserTagBits) - 1;
constexpr std::uint64_t kMaxRank = (std::uint64_t{1} << (64 - kUserTagBits)) - 1;
// The highest user tag is reserved for the backend's own "goodbye" message: close() sends it so the
// peer fails its pending operations with kUnavailable at once instead of waiting for a send to fail.
constexpr std::uint64_t kControlTag = kMaxUserTag;
constexpr auto kGoodbyeGrace = std::chrono::milliseconds(500);
constexpr auto kGoodbyeFlush = std::chrono::milliseconds(50);
constexpr std::uint64_t wireTag(std::uint64_t rank, std::uint64_t tag) {
  return (rank << kUserTagBits) | (tag & kMaxUserTag);
}

// Address blob: u32 magic "GVOF" | u32 version | u32 rank | u32 pid | u64 host key | endpoint name.
constexpr std::uint32_t kAddressMagic = 0x464f5647;
constexpr std::uint32_t kAddressVersion = 1;
struct AddressHeader {
  std::uint32_t magic;
  std::uint32_t version;
  std::uint32_t rank;
  std::uint32_t pid;
  std::uint64_t hostKey;
};
constexpr std::size_t kAddressHeader = sizeof(AddressHeader);

constexpr auto kTickInterval = std::chrono::milliseconds(200);
constexpr int kMaxRoundsPerWake = 32;
constexpr std::size_t kCqBatch = 16;

// Same kernel and pid namespace (a pid then names the same process for both peers): FNV-1a over the
// boot id and the pid-namespace link; 0 when unknown. (Same definition as the UCX backend's.)
std::uint64_t hostKey() {
  std::string id;
  if (FILE* f = std::fopen("/proc/sys/kernel/random/boot_id", "r")) {
    char buf[64] = {};
    if (std::fgets(buf, sizeof buf, f) != nullptr) id = buf;
    std::fclose(f);
  }
  char ns[64] = {};
  const ssize_t n = ::readlink("/proc/self/ns/pid", ns, sizeof ns - 1);
  if (id.empty() || n <= 0) return 0;
  id.append(ns, static_cast<std::size_t>(n));
  std::uint64_t h = 1469598103934665603ull;
  for (unsigned char c : id) h = (h ^ c) * 1099511628211ull;
  return h == 0 ? 1 : h;
}

// ofi_rxm over tcp lets the tcp provider receive straight into the posted buffer ("dynamic receive
// buffers"); a message larger than that buffer then breaks the whole connection to the sender instead
// of failing one receive. Turn it off (rxm then truncates in its own bounce-buffer copy, and the link
// survives) unless the user set it. Must run before the first fi_getinfo() in the process, which reads
// provider parameters once.
void configureProviderDefaults() {
  static const bool once = [] {
    ::setenv("FI_OFI_RXM_ENABLE_DYN_RBUF", "0", /*overwrite=*/0);
    return true;
  }();
  (void)once;
}

std::string fiError(ssize_t rc) { return fi_strerror(static_cast<int>(rc < 0 ? -rc : rc)); }

class Engine;
class OfiConnection;

struct Op {
  fi_context2 context;  // first: the provider's scratch space, and what completions hand back
  // kControlRecv and kGoodbye are the backend's own (see kControlTag); they are never in the
  // connection's list of user operations.
  enum class Kind { kSend, kRecv, kControlRecv, kGoodbye };
  Kind kind = Kind::kSend;
  std::shared_ptr<OfiConnection> conn;
  SendCallback sendCb;
  RecvCallback recvCb;
  std::uint64_t wireTag = 0;
  void* buffer = nullptr;
  std::size_t length = 0;
  bool posted = false;    // handed to the provider (false while waiting in the EAGAIN backlog)
  bool orphaned = false;  // callback already delivered; the provider may still return the context
  Op* prev = nullptr;     // intrusive list of the connection's pending ops
  Op* next = nullptr;
};

class Engine : public std::enable_shared_from_this<Engine> {
 public:
  Engine(Loop& loop, const Options& options) : loop_(loop), options_(options) {}
  ~Engine();

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
    ready_.push_back(std::move(fn));
    schedule();
  }
  void schedule();

  Op* allocOp() {
    if (freeOps_.empty()) return new Op();
    Op* op = freeOps_.back();
    freeOps_.pop_back();
    return op;
  }
  void releaseOp(Op* op) {
    op->conn.reset();
    op->sendCb = nullptr;
    op->recvCb = nullptr;
    op->posted = op->orphaned = false;
    op->prev = op->next = nullptr;
    freeOps_.push_back(op);
  }
  void adoptOrphan(Op* op) {
    op->orphaned = true;
    op->conn.reset();
    orphans_.push_back(op);
  }

  // Hands `op` to the provider, or queues it behind earlier ops that met -FI_EAGAIN (queueing keeps
  // the per-tag order). Returns an error status for a hard failure.
  Status submit(Op* op);
  void dropFromBacklog(Op* op) {
    backlog_.erase(std::remove(backlog_.begin(), backlog_.end(), op), backlog_.end());
  }

  void addConnection(const std::shared_ptr<OfiConnection>& c) { connections_.push_back(c); }

  void progressAll();
  bool pollOnce();

 private:
  ssize_t post(Op* op);
  bool drainCq();  // true if it saw any completion
  void retryBacklog();
  void complete(Op* op, Status st, std::size_t bytes);
  void tick();
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
  bool watching_ = false;
  bool scheduled_ = false;
  std::vector<std::uint8_t> address_;
  std::deque<std::function<void()>> ready_;
  std::deque<Op*> backlog_;
  std::vector<Op*> freeOps_;
  std::vector<Op*> orphans_;
  std::vector<std::weak_ptr<OfiConnection>> connections_;
  std::shared_ptr<Loop::TimerHandle> timer_;

  friend class OfiConnection;
};

class OfiConnection : public Connection, public std::enable_shared_from_this<OfiConnection> {
 public:
  OfiConnection(std::shared_ptr<Engine> engine, int peer, fi_addr_t addr)
      : engine_(std::move(engine)), peer_(peer), addr_(addr) {}
  ~OfiConnection() override;

  void send(Tag tag, std::span<const std::uint8_t> bytes, SendCallback cb) override;
  void recv(Tag tag, std::span<std::uint8_t> buffer, RecvCallback cb) override;
  void close() override;
  int peer() const override { return peer_; }
  Status error() const override { return error_; }

  fi_addr_t fiAddr() const { return addr_; }
  Status watchPeerProcess(pid_t pid);
  // Posts the receive for the peer's goodbye. Called once by connect().
  void start();
  // Sticky error, then: cancel posted receives and, after telling the peer (sayGoodbye) or at once,
  // tear down the provider's link to the peer and complete whatever it still holds with error_.
  // Every pending op completes exactly once.
  void fail(Status st, bool sayGoodbye = false);
  // A control op finished: the peer's goodbye arrived, or ours left.
  void onControl(Op::Kind kind, const Status& st);
  bool goodbyePending() const { return goodbye_ != nullptr; }
  // Right before the endpoint is closed: completes (with error_) every op the provider still holds.
  void abandonPending();
  void link(Op* op);
  void unlink(Op* op);
  // Status for an op the provider finished with libfabric error `err` (0 = success).
  Status statusFor(int err, const std::string& detail);

 private:
  void stopWatchingPeer();
  void finishTeardown();

  std::shared_ptr<Engine> engine_;
  int peer_;
  fi_addr_t addr_;
  Op* controlRecv_ = nullptr;
  Op* goodbye_ = nullptr;
  std::uint8_t controlIn_[8] = {};
  bool tornDown_ = false;
  std::shared_ptr<Loop::TimerHandle> goodbyeTimer_;
  Status error_;
  bool closed_ = false;
  int pidfd_ = -1;
  pid_t peerPid_ = 0;
  Op* head_ = nullptr;
};

// ---- Engine -----------------------------------------------------------------------------------------

Status Engine::init() {
  configureProviderDefaults();
  fi_info* hints = fi_allocinfo();
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
  int rc = fi_getinfo(FI_VERSION(1, 11), node, nullptr, node != nullptr ? FI_SOURCE : 0, hints,
                      &info_);
  fi_freeinfo(hints);
  if (rc != 0 || info_ == nullptr) {
    info_ = nullptr;
    return unavailable("libfabric: no RDM tagged endpoint from provider '" +
                       options_.libfabricProvider + "': " + fiError(rc));
  }
  auto fail = [this](const char* what, int code) {
    destroyFabric();
    return unavailable(std::string("libfabric: ") + what + ": " + fiError(code));
  };
  if ((rc = fi_fabric(info_->fabric_attr, &fabric_, nullptr)) != 0) return fail("fi_fabric", rc);
  if ((rc = fi_domain(fabric_, info_, &domain_, nullptr)) != 0) return fail("fi_domain", rc);

  fi_av_attr avAttr{};
  avAttr.type = FI_AV_TABLE;
  if ((rc = fi_av_open(domain_, &avAttr, &av_, nullptr)) != 0) return fail("fi_av_open", rc);

  fi_cq_attr cqAttr{};
  cqAttr.format = FI_CQ_FORMAT_TAGGED;
  cqAttr.wait_obj = options_.busyPoll ? FI_WAIT_NONE : FI_WAIT_FD;
  cqAttr.size = 0;
  if ((rc = fi_cq_open(domain_, &cqAttr, &cq_, nullptr)) != 0) return fail("fi_cq_open", rc);

  if ((rc = fi_endpoint(domain_, info_, &ep_, nullptr)) != 0) return fail("fi_endpoint", rc);
  if ((rc = fi_ep_bind(ep_, &av_->fid, 0)) != 0) return fail("fi_ep_bind(av)", rc);
  if ((rc = fi_ep_bind(ep_, &cq_->fid, FI_TRANSMIT | FI_RECV)) != 0) return fail("fi_ep_bind(cq)", rc);
  if ((rc = fi_enable(ep_)) != 0) return fail("fi_enable", rc);

  std::vector<std::uint8_t> name(256);
  std::size_t nameLen = name.size();
  rc = fi_getname(&ep_->fid, name.data(), &nameLen);
  if (rc == -FI_ETOOSMALL) {
    name.resize(nameLen);
    rc = fi_getname(&ep_->fid, name.data(), &nameLen);
  }
  if (rc != 0) return fail("fi_getname", rc);
  const AddressHeader header{kAddressMagic, kAddressVersion,
                             static_cast<std::uint32_t>(options_.rank),
                             static_cast<std::uint32_t>(::getpid()), hostKey()};
  address_.resize(kAddressHeader + nameLen);
  std::memcpy(address_.data(), &header, kAddressHeader);
  std::memcpy(address_.data() + kAddressHeader, name.data(), nameLen);

  std::weak_ptr<Engine> weak = weak_from_this();
  if (options_.busyPoll) {
    loop_.addPoller([weak] {
      auto self = weak.lock();
      return self && self->pollOnce();
    });
  } else {
    if ((rc = fi_control(&cq_->fid, FI_GETWAIT, &waitFd_)) != 0) return fail("FI_GETWAIT", rc);
    loop_.watchFd(waitFd_, [weak] {
      if (auto self = weak.lock()) self->progressAll();
    });
    watching_ = true;
  }
  tick();
  return Status::ok();
}

void Engine::tick() {
  if (!open()) return;
  progressAll();
  std::weak_ptr<Engine> weak = weak_from_this();
  timer_ = loop_.after(kTickInterval, [weak] {
    if (auto self = weak.lock()) self->tick();
  });
}

void Engine::schedule() {
  if (scheduled_) return;
  scheduled_ = true;
  loop_.post([self = shared_from_this()] {
    self->scheduled_ = false;
    self->progressAll();
  });
}

ssize_t Engine::post(Op* op) {
  if (op->kind == Op::Kind::kSend || op->kind == Op::Kind::kGoodbye) {
    return fi_tsend(ep_, op->buffer, op->length, nullptr, op->conn->fiAddr(), op->wireTag,
                    &op->context);
  }
  return fi_trecv(ep_, op->buffer, op->length, nullptr, FI_ADDR_UNSPEC, op->wireTag, 0,
                  &op->context);
}

Status Engine::submit(Op* op) {
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

void Engine::retryBacklog() {
  while (!backlog_.empty() && ep_ != nullptr) {
    Op* op = backlog_.front();
    const ssize_t rc = post(op);
    if (rc == -FI_EAGAIN) return;
    backlog_.pop_front();
    if (rc == 0) {
      op->posted = true;
    } else {
      auto conn = op->conn;
      conn->unlink(op);
      complete(op, conn->statusFor(static_cast<int>(-rc), "post"), 0);
    }
  }
}

void Engine::complete(Op* op, Status st, std::size_t bytes) {
  if (op->kind == Op::Kind::kControlRecv || op->kind == Op::Kind::kGoodbye) {
    auto conn = op->conn;
    const Op::Kind kind = op->kind;
    releaseOp(op);
    conn->onControl(kind, st);
    return;
  }
  if (op->kind == Op::Kind::kSend) {
    defer([cb = std::move(op->sendCb), st = std::move(st)] { cb(st); });
  } else {
    defer([cb = std::move(op->recvCb), st = std::move(st), bytes] { cb(st, bytes); });
  }
  releaseOp(op);
}

bool Engine::drainCq() {
  bool any = false;
  fi_cq_tagged_entry entries[kCqBatch];
  while (cq_ != nullptr) {
    const ssize_t n = fi_cq_read(cq_, entries, kCqBatch);
    if (n > 0) {
      any = true;
      for (ssize_t i = 0; i < n; ++i) {
        Op* op = reinterpret_cast<Op*>(entries[i].op_context);
        if (op->orphaned) {
          orphans_.erase(std::find(orphans_.begin(), orphans_.end(), op));
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
        orphans_.erase(std::find(orphans_.begin(), orphans_.end(), op));
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

void Engine::progressAll() {
  auto keepAlive = shared_from_this();
  for (int round = 0; round < kMaxRoundsPerWake; ++round) {
    drainCq();
    retryBacklog();
    if (!ready_.empty()) {
      std::deque<std::function<void()>> batch;
      batch.swap(ready_);
      for (auto& fn : batch) fn();
      continue;
    }
    if (cq_ == nullptr || options_.busyPoll) return;
    fid* fids[] = {&cq_->fid};
    if (fi_trywait(fabric_, fids, 1) == FI_SUCCESS) return;  // safe to sleep on the wait fd
  }
  schedule();
}

bool Engine::pollOnce() {
  bool worked = drainCq();
  retryBacklog();
  if (!ready_.empty()) {
    std::deque<std::function<void()>> batch;
    batch.swap(ready_);
    for (auto& fn : batch) fn();
    worked = true;
  }
  return worked;
}

void Engine::shutdown() {
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
  // Whatever the provider still holds goes away with the endpoint below: complete it here, once.
  for (auto& c : live) c->abandonPending();
  if (!ready_.empty()) schedule();
  destroyFabric();
}

void Engine::destroyFabric() {
  if (timer_) {
    loop_.cancel(timer_);
    timer_.reset();
  }
  if (watching_) {
    loop_.unwatchFd(waitFd_);
    watching_ = false;
  }
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
  if (info_ != nullptr) fi_freeinfo(info_);
  info_ = nullptr;
  // The endpoint is gone, so the provider holds no context any more.
  for (Op* op : orphans_) releaseOp(op);
  orphans_.clear();
}

Engine::~Engine() {
  destroyFabric();
  for (Op* op : freeOps_) delete op;
}

// ---- OfiConnection ----------------------------------------------------------------------------------

OfiConnection::~OfiConnection() { stopWatchingPeer(); }

Status OfiConnection::watchPeerProcess(pid_t pid) {
  const int fd = static_cast<int>(::syscall(SYS_pidfd_open, pid, 0));
  if (fd < 0) {
    return unavailable("libfabric: cannot watch peer " + std::to_string(peer_) + " (pid " +
                       std::to_string(pid) + "): " + std::strerror(errno));
  }
  pidfd_ = fd;
  peerPid_ = pid;
  std::weak_ptr<OfiConnection> weak = weak_from_this();
  engine_->loop().watchFd(pidfd_, [weak] {
    auto self = weak.lock();
    if (!self) return;
    self->stopWatchingPeer();
    self->fail(unavailable("peer " + std::to_string(self->peer_) + " (pid " +
                           std::to_string(self->peerPid_) + ") exited"));
  });
  return Status::ok();
}

void OfiConnection::stopWatchingPeer() {
  if (pidfd_ < 0) return;
  engine_->loop().unwatchFd(pidfd_);
  ::close(pidfd_);
  pidfd_ = -1;
}

void OfiConnection::link(Op* op) {
  op->prev = nullptr;
  op->next = head_;
  if (head_ != nullptr) head_->prev = op;
  head_ = op;
}

void OfiConnection::unlink(Op* op) {
  if (op->prev != nullptr) op->prev->next = op->next;
  if (op->next != nullptr) op->next->prev = op->prev;
  if (head_ == op) head_ = op->next;
  op->prev = op->next = nullptr;
}

Status OfiConnection::statusFor(int err, const std::string& detail) {
  if (err == 0) return Status::ok();
  if (err == FI_ETRUNC) {
    // tcp;ofi_rxm (1.17) drops its connection to the sender when a message is truncated, losing
    // whatever followed on it. Per-edge exactly-once delivery cannot be kept past that point, so the
    // receive reports the truncation and the connection fails (the engine resynchronises the edge).
    return resourceExhausted("message from peer " + std::to_string(peer_) +
                             " is larger than the posted receive buffer");
  }
  if (!error_.isOk()) return error_;
  if (err == FI_ECANCELED) return cancelled("operation cancelled");
  // Any other transport error means the link to this peer is broken.
  Status failure = unavailable("peer " + std::to_string(peer_) + ": " + fi_strerror(err) +
                               (detail.empty() ? "" : " (" + detail + ")"));
  engine_->defer([keep = shared_from_this(), failure] { keep->fail(failure); });
  error_ = failure;
  return failure;
}

void OfiConnection::start() {
  Op* op = engine_->allocOp();
  op->kind = Op::Kind::kControlRecv;
  op->conn = shared_from_this();
  op->wireTag = wireTag(static_cast<std::uint64_t>(peer_), kControlTag);
  op->buffer = controlIn_;
  op->length = sizeof controlIn_;
  controlRecv_ = op;
  if (!engine_->submit(op).isOk()) {
    controlRecv_ = nullptr;
    engine_->releaseOp(op);
  }
}

void OfiConnection::onControl(Op::Kind kind, const Status& st) {
  if (kind == Op::Kind::kControlRecv) {
    controlRecv_ = nullptr;
    if (st.isOk()) fail(unavailable("peer " + std::to_string(peer_) + " closed the connection"));
    return;
  }
  goodbye_ = nullptr;
  // A small send may be reported complete once rxm has buffered it, and removing the peer from the
  // address vector drops whatever is still queued for it. Keep progressing a moment so the goodbye
  // reaches the wire, then tear down.
  if (goodbyeTimer_) engine_->loop().cancel(goodbyeTimer_);
  std::weak_ptr<OfiConnection> weak = weak_from_this();
  goodbyeTimer_ = engine_->loop().after(kGoodbyeFlush, [weak] {
    auto self = weak.lock();
    if (!self) return;
    if (self->engine_->open()) self->engine_->progressAll();
    self->finishTeardown();
  });
}

void OfiConnection::fail(Status st, bool sayGoodbye) {
  if (error_.isOk()) error_ = std::move(st);
  stopWatchingPeer();
  if (!engine_->open()) return;
  if (sayGoodbye && goodbye_ == nullptr && !tornDown_) {
    static const std::uint8_t kGoodbye[8] = {'g', 'o', 'o', 'd', 'b', 'y', 'e', 0};
    Op* op = engine_->allocOp();
    op->kind = Op::Kind::kGoodbye;
    op->conn = shared_from_this();
    op->wireTag = wireTag(static_cast<std::uint64_t>(engine_->rank()), kControlTag);
    op->buffer = const_cast<std::uint8_t*>(kGoodbye);
    op->length = sizeof kGoodbye;
    if (engine_->submit(op).isOk()) {
      goodbye_ = op;
      // A peer that is gone may never take the goodbye; do not wait for it forever.
      std::weak_ptr<OfiConnection> weak = weak_from_this();
      goodbyeTimer_ = engine_->loop().after(kGoodbyeGrace, [weak] {
        if (auto self = weak.lock()) self->finishTeardown();
      });
      engine_->schedule();
    } else {
      engine_->releaseOp(op);
    }
  }
  std::vector<Op*> pending;
  for (Op* op = head_; op != nullptr; op = op->next) pending.push_back(op);
  for (Op* op : pending) {
    if (!op->posted) {  // still in the EAGAIN backlog: the provider never saw it
      engine_->dropFromBacklog(op);
      unlink(op);
      engine_->complete(op, error_, 0);
    } else if (op->kind == Op::Kind::kRecv) {
      // Cancellation completes through the CQ error path (FI_ECANCELED) and reports error_.
      fi_cancel(&engine_->ep()->fid, &op->context);
    }
  }
  if (controlRecv_ != nullptr && controlRecv_->posted) {
    fi_cancel(&engine_->ep()->fid, &controlRecv_->context);
  }
  if (goodbye_ == nullptr) finishTeardown();
  engine_->schedule();
}

void OfiConnection::finishTeardown() {
  if (tornDown_ || !engine_->open()) return;
  tornDown_ = true;
  if (goodbyeTimer_) engine_->loop().cancel(goodbyeTimer_);
  goodbyeTimer_.reset();
  if (goodbye_ != nullptr) {
    // Still in the provider: its completion, if any, only recycles it.
    engine_->dropFromBacklog(goodbye_);
    engine_->adoptOrphan(goodbye_);
    goodbye_ = nullptr;
  }
  // Sends cannot be cancelled on an RDM endpoint. Removing the peer from the address vector makes the
  // provider drop its connection to the peer, after which it no longer reads our send buffers; then
  // the sends complete here, and a late completion for them is ignored (orphaned op).
  fi_addr_t a = addr_;
  (void)fi_av_remove(engine_->av(), &a, 1, 0);
  std::vector<Op*> sends;
  for (Op* op = head_; op != nullptr; op = op->next) {
    if (op->kind == Op::Kind::kSend) sends.push_back(op);
  }
  for (Op* op : sends) {
    unlink(op);
    engine_->defer([cb = std::move(op->sendCb), st = error_] { cb(st); });
    engine_->adoptOrphan(op);
  }
  engine_->schedule();
}

void OfiConnection::abandonPending() {
  if (goodbyeTimer_) engine_->loop().cancel(goodbyeTimer_);
  goodbyeTimer_.reset();
  for (Op** internal : {&controlRecv_, &goodbye_}) {
    if (*internal != nullptr) {
      engine_->dropFromBacklog(*internal);
      engine_->releaseOp(*internal);
      *internal = nullptr;
    }
  }
  while (head_ != nullptr) {
    Op* op = head_;
    unlink(op);
    engine_->dropFromBacklog(op);
    engine_->complete(op, error_.isOk() ? cancelled("libfabric context closed") : error_, 0);
  }
}

void OfiConnection::close() {
  if (closed_) return;
  closed_ = true;
  fail(cancelled("connection to peer " + std::to_string(peer_) + " closed"), /*sayGoodbye=*/true);
}

void OfiConnection::send(Tag tag, std::span<const std::uint8_t> bytes, SendCallback cb) {
  if (tag >= kControlTag) {
    engine_->defer([cb = std::move(cb)] { cb(invalidArgument("libfabric: tag above 2^40 - 2")); });
    return;
  }
  if (bytes.size() > engine_->maxMessageBytes()) {
    engine_->defer([cb = std::move(cb), n = bytes.size(), max = engine_->maxMessageBytes()] {
      cb(resourceExhausted("message of " + std::to_string(n) + " bytes above maxMessageBytes " +
                           std::to_string(max)));
    });
    return;
  }
  if (!error_.isOk() || !engine_->open()) {
    Status st = !error_.isOk() ? error_ : cancelled("libfabric context closed");
    engine_->defer([cb = std::move(cb), st] { cb(st); });
    return;
  }
  Op* op = engine_->allocOp();
  op->kind = Op::Kind::kSend;
  op->conn = shared_from_this();
  op->sendCb = std::move(cb);
  op->wireTag = wireTag(static_cast<std::uint64_t>(engine_->rank()), tag);
  op->buffer = const_cast<std::uint8_t*>(bytes.data());  // fi_tsend takes void*; it only reads
  op->length = bytes.size();
  link(op);
  Status st = engine_->submit(op);
  if (!st.isOk()) {
    unlink(op);
    engine_->complete(op, st, 0);
    fail(st);
    return;
  }
  engine_->schedule();
}

void OfiConnection::recv(Tag tag, std::span<std::uint8_t> buffer, RecvCallback cb) {
  if (tag >= kControlTag) {
    engine_->defer(
        [cb = std::move(cb)] { cb(invalidArgument("libfabric: tag above 2^40 - 2"), 0); });
    return;
  }
  if (!error_.isOk() || !engine_->open()) {
    Status st = !error_.isOk() ? error_ : cancelled("libfabric context closed");
    engine_->defer([cb = std::move(cb), st] { cb(st, 0); });
    return;
  }
  Op* op = engine_->allocOp();
  op->kind = Op::Kind::kRecv;
  op->conn = shared_from_this();
  op->recvCb = std::move(cb);
  op->wireTag = wireTag(static_cast<std::uint64_t>(peer_), tag);
  op->buffer = buffer.data();
  op->length = buffer.size();
  link(op);
  Status st = engine_->submit(op);
  if (!st.isOk()) {
    unlink(op);
    engine_->complete(op, st, 0);
    return;
  }
  engine_->schedule();
}

// ---- OfiContext -------------------------------------------------------------------------------------

class OfiContext : public Context {
 public:
  explicit OfiContext(std::shared_ptr<Engine> engine) : engine_(std::move(engine)) {}
  ~OfiContext() override { close(); }

  std::string_view backend() const override { return "libfabric"; }
  std::vector<std::uint8_t> localAddress() const override { return engine_->address(); }

  Result<std::shared_ptr<Connection>> connect(int peer,
                                              std::span<const std::uint8_t> remote) override {
    if (!engine_->open()) return failedPrecondition("libfabric context is closed");
    if (peer < 0 || static_cast<std::uint64_t>(peer) > kMaxRank) {
      return invalidArgument("libfabric: peer rank " + std::to_string(peer) + " outside [0, 2^24)");
    }
    AddressHeader header;
    if (remote.size() <= kAddressHeader) return invalidArgument("libfabric: address blob too short");
    std::memcpy(&header, remote.data(), kAddressHeader);
    if (header.magic != kAddressMagic || header.version != kAddressVersion) {
      return invalidArgument("libfabric: not a grapevine libfabric address (bad magic or version)");
    }
    if (header.rank != static_cast<std::uint32_t>(peer)) {
      return invalidArgument("libfabric: address belongs to rank " + std::to_string(header.rank) +
                             ", not " + std::to_string(peer));
    }
    std::vector<std::uint8_t> name(remote.begin() + kAddressHeader, remote.end());
    fi_addr_t addr = FI_ADDR_UNSPEC;
    const int n = fi_av_insert(engine_->av(), name.data(), 1, &addr, 0, nullptr);
    if (n != 1) {
      return invalidArgument("libfabric: fi_av_insert rejected the address of peer " +
                             std::to_string(peer));
    }
    auto conn = std::make_shared<OfiConnection>(engine_, peer, addr);
    if (header.hostKey != 0 && header.hostKey == hostKey()) {
      // A dead peer on this host is seen at once through its pid, not only when a send fails.
      GV_RETURN_IF_ERROR(conn->watchPeerProcess(static_cast<pid_t>(header.pid)));
    }
    engine_->addConnection(conn);
    conn->start();
    return std::shared_ptr<Connection>(std::move(conn));
  }

  void close() override { engine_->shutdown(); }

 private:
  std::shared_ptr<Engine> engine_;
};

}  // namespace

Result<std::unique_ptr<Context>> makeOfiContext(Loop& loop, const Options& options) {
  if (options.rank < 0 || static_cast<std::uint64_t>(options.rank) > kMaxRank) {
    return invalidArgument("libfabric: rank " + std::to_string(options.rank) +
                           " outside [0, 2^24)");
  }
  auto engine = std::make_shared<Engine>(loop, options);
  GV_RETURN_IF_ERROR(engine->init());
  return std::unique_ptr<Context>(std::make_unique<OfiContext>(std::move(engine)));
}

BackendInfo ofiBackendInfo() {
  static const BackendInfo info = [] {
    configureProviderDefaults();
    BackendInfo out{"libfabric", false, ""};
    fi_info* hints = fi_allocinfo();
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
    const int rc = fi_getinfo(FI_VERSION(1, 11), nullptr, nullptr, 0, hints, &info);
    fi_freeinfo(hints);
    if (rc != 0 || info == nullptr) {
      out.reason = "not usable: no RDM tagged endpoint from provider '" +
                   Options{}.libfabricProvider + "': " + fiError(rc);
      return out;
    }
    fi_freeinfo(info);
    out.usable = true;
    return out;
  }();
  return info;
}

bool markPeerFailed(Connection& connection, const std::string& why) {
  auto* c = dynamic_cast<OfiConnection*>(&connection);
  if (c == nullptr) return false;
  c->fail(unavailable(why));
  return true;
}

}  // namespace grapevine::transport::ofi
