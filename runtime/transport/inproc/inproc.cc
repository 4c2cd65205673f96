#include "runtime/transport/inproc/inproc.h"

#include <charconv>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <unordered_map>
#include <unordered_set>

#include "runtime/transport/buffer_pool.h"
#include "runtime/transport/connection_core.h"
#include "runtime/transport/loop.h"
#include "runtime/transport/registry.h"

namespace grapevine::transport::inproc {
namespace {

constexpr std::string_view kAddressPrefix = "inproc:";

class InprocConnection;

struct Message {
  Tag tag;
  Buffer data;
  std::size_t size;
};

// One direction of one link: written by one connection, read by its peer. Everything in it is
// guarded by `mu`; the reader is woken by posting drain() to its loop (at most one drain queued at
// a time).
struct Pipe {
  std::mutex mu;
  std::deque<Message> queue;
  bool writerClosed = false;
  bool readerClosed = false;
  std::weak_ptr<InprocConnection> reader;
  Loop* readerLoop = nullptr;
  bool drainScheduled = false;
  // Buffers go from the writer's thread to the reader's and back here: after the first few messages
  // of a size, no send allocates.
  BufferPool pool{std::size_t{256} << 20};
};

// The process-wide table of live contexts (slots) and the pipes between them.
class Fabric {
 public:
  static Fabric& instance() {
    static Fabric* fabric =
        new Fabric();  // never destroyed: contexts may outlive static destruction order
    return *fabric;
  }
  std::uint64_t addContext() {
    std::lock_guard lock(mu_);
    const std::uint64_t slot = next_++;
    live_.insert(slot);
    return slot;
  }
  void removeContext(std::uint64_t slot) {
    std::lock_guard lock(mu_);
    live_.erase(slot);
    for (auto it = pipes_.begin(); it != pipes_.end();) {
      if (it->first.first == slot || it->first.second == slot) {
        it = pipes_.erase(it);  // connections keep their own references
      } else {
        ++it;
      }
    }
  }
  bool live(std::uint64_t slot) {
    std::lock_guard lock(mu_);
    return live_.count(slot) != 0;
  }
  // The pipe from -> to, created on first use. `fresh` replaces one whose writer (if writerSide) or
  // reader already closed: a context that reconnects to the same peer starts a new link.
  std::shared_ptr<Pipe> pipe(std::uint64_t from, std::uint64_t to, bool writerSide) {
    std::lock_guard lock(mu_);
    auto& p = pipes_[{from, to}];
    if (p) {
      std::lock_guard pl(p->mu);
      if (writerSide ? p->writerClosed : p->readerClosed) p.reset();
    }
    if (!p) p = std::make_shared<Pipe>();
    return p;
  }

 private:
  std::mutex mu_;
  std::uint64_t next_ = 1;
  std::unordered_set<std::uint64_t> live_;
  std::map<std::pair<std::uint64_t, std::uint64_t>, std::shared_ptr<Pipe>> pipes_;
};

void scheduleDrainLocked(Pipe& pipe);

class InprocConnection : public Connection, public std::enable_shared_from_this<InprocConnection> {
 public:
  InprocConnection(Loop& loop, int peer, const Options& options, std::shared_ptr<Pipe> out,
                   std::shared_ptr<Pipe> in)
      : core_(loop, peer, in->pool, ~std::size_t{0}),
        maxMessageBytes_(options.maxMessageBytes),
        out_(std::move(out)),
        in_(std::move(in)) {}

  ~InprocConnection() override { shutdown(cancelled("connection destroyed")); }

  // Registers as the reader of the inbound pipe; messages sent before we connected are drained now.
  void start() {
    std::lock_guard lock(in_->mu);
    in_->reader = weak_from_this();
    in_->readerLoop = &core_.loop();
    if (!in_->queue.empty() || in_->writerClosed) scheduleDrainLocked(*in_);
  }

  void send(Tag tag, std::span<const std::uint8_t> bytes, SendCallback cb) override {
    GV_CHECK_LOOP_THREAD(core_.loop());
    if (core_.failed()) return core_.completeSend(std::move(cb), core_.error());
    if (bytes.size() > maxMessageBytes_) {
      return core_.completeSend(
          std::move(cb),
          resourceExhausted("message of " + std::to_string(bytes.size()) +
                            " bytes exceeds maxMessageBytes " + std::to_string(maxMessageBytes_)));
    }
    Buffer data = out_->pool.acquire(bytes.size());
    if (!bytes.empty()) std::memcpy(data.data(), bytes.data(), bytes.size());
    bool peerGone = false;
    {
      std::lock_guard lock(out_->mu);
      if (out_->readerClosed) {
        peerGone = true;
      } else {
        out_->queue.push_back(Message{tag, std::move(data), bytes.size()});
        scheduleDrainLocked(*out_);
      }
    }
    if (peerGone) {
      fail(unavailable("peer " + std::to_string(core_.peer()) + " closed the connection"));
      return core_.completeSend(std::move(cb), core_.error());
    }
    // The bytes are copied: the caller's span is free now, so the send is complete.
    core_.completeSend(std::move(cb), Status::ok());
  }

  void recv(Tag tag, std::span<std::uint8_t> buffer, RecvCallback cb) override {
    GV_CHECK_LOOP_THREAD(core_.loop());
    core_.postRecv(tag, buffer, std::move(cb));
  }

  void close() override {
    GV_CHECK_LOOP_THREAD(core_.loop());
    shutdown(cancelled("connection closed"));
  }
  int peer() const override { return core_.peer(); }
  Status error() const override {
    GV_CHECK_LOOP_THREAD(core_.loop());
    return core_.error();
  }
  std::uint64_t bytesArrived() const override { return bytesArrived_; }

  // On the loop thread: moves every queued inbound message to a posted receive or the unexpected
  // buffer.
  void drain() {
    GV_CHECK_LOOP_THREAD(core_.loop());
    std::deque<Message> batch;
    bool writerClosed = false;
    {
      std::lock_guard lock(in_->mu);
      in_->drainScheduled = false;
      batch.swap(in_->queue);
      writerClosed = in_->writerClosed;
    }
    for (Message& m : batch) {
      if (core_.failed()) {
        in_->pool.release(std::move(m.data));
        continue;
      }
      bytesArrived_ += m.size;
      if (auto r = core_.takeRecv(m.tag)) {
        core_.deliver(std::move(*r), std::span<const std::uint8_t>(m.data.data(), m.size));
        in_->pool.release(std::move(m.data));
      } else {
        core_.stash(m.tag, std::move(m.data), m.size);
      }
    }
    if (writerClosed)
      fail(unavailable("peer " + std::to_string(core_.peer()) + " closed the connection"));
  }

 private:
  // Peer failure: same as shutdown, but the peer is already gone.
  void fail(Status status) { shutdown(std::move(status)); }

  // Sets the sticky error, completes pending receives, and tells the peer (its inbound pipe is our
  // outbound one) so its pending operations fail with kUnavailable.
  void shutdown(Status status) {
    if (closed_) {
      core_.fail(std::move(status));
      return;
    }
    closed_ = true;
    core_.fail(std::move(status));
    {
      std::lock_guard lock(in_->mu);
      in_->readerClosed = true;
      in_->reader.reset();
      in_->readerLoop = nullptr;
      for (Message& m : in_->queue) in_->pool.release(std::move(m.data));
      in_->queue.clear();
    }
    std::lock_guard lock(out_->mu);
    out_->writerClosed = true;
    scheduleDrainLocked(*out_);
  }

  ConnectionCore core_;
  const std::size_t maxMessageBytes_;
  std::shared_ptr<Pipe> out_;
  std::shared_ptr<Pipe> in_;
  bool closed_ = false;
  std::uint64_t bytesArrived_ = 0;  // of the messages drained from the inbound pipe (loop thread)
};

void scheduleDrainLocked(Pipe& pipe) {
  if (pipe.drainScheduled || pipe.readerLoop == nullptr) return;
  pipe.drainScheduled = true;
  pipe.readerLoop->post([reader = pipe.reader] {
    if (auto c = reader.lock()) c->drain();
  });
}

class InprocContext : public Context {
 public:
  InprocContext(Loop& loop, const Options& options)
      : loop_(loop), options_(options), slot_(Fabric::instance().addContext()) {}
  ~InprocContext() override { close(); }

  std::string_view backend() const override { return "inproc"; }

  std::vector<std::uint8_t> localAddress() const override {
    GV_CHECK_LOOP_THREAD(loop_);
    const std::string a = std::string(kAddressPrefix) + std::to_string(slot_);
    return {a.begin(), a.end()};
  }

  Result<std::shared_ptr<Connection>> connect(
      int peer, std::span<const std::uint8_t> remoteAddress) override {
    GV_CHECK_LOOP_THREAD(loop_);
    if (closed_) return cancelled("inproc context is closed");
    const std::string_view a(reinterpret_cast<const char*>(remoteAddress.data()),
                             remoteAddress.size());
    std::uint64_t slot = 0;
    if (!a.starts_with(kAddressPrefix) ||
        std::from_chars(a.data() + kAddressPrefix.size(), a.data() + a.size(), slot).ec !=
            std::errc() ||
        slot == 0) {
      return invalidArgument("malformed inproc address '" + std::string(a) + "'");
    }
    if (!Fabric::instance().live(slot)) {
      return unavailable("no live inproc context at slot " + std::to_string(slot) + " (peer " +
                         std::to_string(peer) + ")");
    }
    if (auto it = conns_.find(peer); it != conns_.end()) {
      if (auto old = it->second.lock()) old->close();
    }
    auto out = Fabric::instance().pipe(slot_, slot, /*writerSide=*/true);
    auto in = Fabric::instance().pipe(slot, slot_, /*writerSide=*/false);
    auto conn =
        std::make_shared<InprocConnection>(loop_, peer, options_, std::move(out), std::move(in));
    conn->start();
    conns_[peer] = conn;
    return std::shared_ptr<Connection>(conn);
  }

  void close() override {
    GV_CHECK_LOOP_THREAD(loop_);
    if (closed_) return;
    closed_ = true;
    for (auto& [peer, weak] : conns_) {
      if (auto c = weak.lock()) c->close();
    }
    conns_.clear();
    Fabric::instance().removeContext(slot_);
  }

 private:
  Loop& loop_;
  const Options options_;
  const std::uint64_t slot_;
  std::unordered_map<int, std::weak_ptr<InprocConnection>> conns_;
  bool closed_ = false;
};

}  // namespace

Result<std::unique_ptr<Context>> makeInprocContext(Loop& loop, const Options& options) {
  GV_CHECK_LOOP_THREAD(loop);
  return std::unique_ptr<Context>(std::make_unique<InprocContext>(loop, options));
}

BackendInfo inprocBackendInfo() { return BackendInfo{"inproc", true, ""}; }

}  // namespace grapevine::transport::inproc

namespace grapevine::transport {
void registerInproc(Registry& registry) {
  registry.add(BackendEntry{"inproc", inproc::makeInprocContext, inproc::inprocBackendInfo});
}
}  // namespace grapevine::transport
