#include "runtime/transport/tcp/tcp.h"

#include <algorithm>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/write.hpp>
#include <chrono>
#include <cstring>
#include <deque>
#include <string>
#include <unordered_map>
#include <vector>

#include "runtime/common/byte_order.h"
#include "runtime/common/log.h"
#include "runtime/security/auth.h"
#include "runtime/transport/accept_bounds.h"
#include "runtime/transport/buffer_pool.h"
#include "runtime/transport/connection_core.h"
#include "runtime/transport/loop.h"
#include "runtime/transport/registry.h"
#include "runtime/transport/socket_util.h"
#include "runtime/transport/tcp/framing.h"
#include "runtime/transport/tcp/incoming_frame.h"

namespace grapevine::transport::tcp {
namespace {

namespace asio = boost::asio;
using asio::ip::tcp;
using Clock = std::chrono::steady_clock;

constexpr std::size_t kStagingBytes = 256 * 1024;
// Bodies at least this large skip the staging buffer and are read straight into their destination.
constexpr std::size_t kDirectReadBytes = 64 * 1024;
// One gathered write carries frames up to about this many bytes (at least one frame).
constexpr std::size_t kGatherBytes = 256 * 1024;
constexpr std::size_t kGatherFrames = 64;

// The hello and frame header codecs are in framing.h (pure, fuzzed).

std::chrono::nanoseconds toDuration(double seconds) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
      std::chrono::duration<double>(seconds));
}

class TcpConnection : public Connection, public std::enable_shared_from_this<TcpConnection> {
 public:
  TcpConnection(Loop& loop, int selfRank, int peer, const Options& options,
                const DataBinding& binding)
      : loop_(loop),
        selfRank_(selfRank),
        maxMessageBytes_(options.maxMessageBytes),
        timeout_(toDuration(options.ioTimeoutSeconds)),
        timeoutSeconds_(options.ioTimeoutSeconds),
        pool_(std::size_t{256} << 20),
        core_(loop, peer, pool_, options.maxMessageBytes),
        socket_(loop.io()),
        watchdog_(loop.io()),
        expectedToken_(selfRank < peer ? binding.higher : binding.lower) {
    encodeHello(helloOut_, selfRank_, (selfRank < peer ? binding.lower : binding.higher).data());
  }

  // Whether a dialer's hello (kHelloBytes) carries the token this edge's handshake gave its rank.
  bool bound(const std::uint8_t* hello) const {
    return security::equalConstantTime(helloToken(hello), expectedToken_);
  }

  ~TcpConnection() override {
    // Handlers hold shared_from_this, so we only get here when none is pending.
    if (!core_.failed()) core_.fail(cancelled("connection destroyed"));
    completeSends(core_.error());
    frame_.fail(core_.error());
    pool_.release(std::move(staging_));
  }

  // Lower rank: connect to the peer's data listener, then exchange hellos.
  void dial(const tcp::endpoint& endpoint) {
    state_ = State::kConnecting;
    phaseSince_ = Clock::now();
    startWatchdog();
    socket_.async_connect(
        endpoint, [self = shared_from_this(), endpoint](boost::system::error_code ec) {
          if (self->core_.failed()) return;
          if (ec) {
            return self->fail(unavailable("cannot connect to peer " + std::to_string(self->peer()) +
                                          " at " + formatEndpoint(endpoint) + ": " + ec.message()));
          }
          configureSocket(self->socket_, self->timeoutSeconds_);
          self->state_ = State::kHello;
          self->phaseSince_ = Clock::now();
          self->readHello();
          self->startWrite();
        });
  }

  // Higher rank, before the dialer's socket arrived: wait for the context to hand it over.
  void awaitAccept() {
    state_ = State::kAwaitingAccept;
    phaseSince_ = Clock::now();
    startWatchdog();
  }

  // Higher rank: `socket` is accepted and its hello (naming our peer) was already read.
  void adopt(tcp::socket socket) {
    if (core_.failed()) return;
    socket_ = std::move(socket);
    configureSocket(socket_, timeoutSeconds_);
    if (state_ == State::kIdle) startWatchdog();
    becomeUp();
    startWrite();  // our hello first, then any queued frames
  }

  bool awaitingAccept() const { return state_ == State::kAwaitingAccept && !core_.failed(); }

  std::uint64_t bytesArrived() const override { return bytesArrived_; }

  void send(Tag tag, std::span<const std::uint8_t> bytes, SendCallback cb) override {
    GV_CHECK_LOOP_THREAD(loop_);
    if (core_.failed()) return core_.completeSend(std::move(cb), core_.error());
    if (bytes.size() > maxMessageBytes_) {
      return core_.completeSend(
          std::move(cb),
          resourceExhausted("message of " + std::to_string(bytes.size()) +
                            " bytes exceeds maxMessageBytes " + std::to_string(maxMessageBytes_)));
    }
    SendOp& op = sends_.emplace_back();
    op.bytes = bytes;
    op.cb = std::move(cb);
    encodeFrameHeader(op.header, tag, bytes.size());
    startWrite();
  }

  void recv(Tag tag, std::span<std::uint8_t> buffer, RecvCallback cb) override {
    GV_CHECK_LOOP_THREAD(loop_);
    core_.postRecv(tag, buffer, std::move(cb));
  }

  void close() override {
    GV_CHECK_LOOP_THREAD(loop_);
    fail(cancelled("connection closed"));
  }
  int peer() const override { return core_.peer(); }
  Status error() const override {
    GV_CHECK_LOOP_THREAD(loop_);
    return core_.error();
  }

 private:
  enum class State { kIdle, kConnecting, kAwaitingAccept, kHello, kUp };

  struct SendOp {
    std::uint8_t header[kHeaderBytes];
    std::span<const std::uint8_t> bytes;
    SendCallback cb;
  };

  // ---- failure ----------------------------------------------------------------------------------

  // First error sticks; every pending operation completes with it, exactly once.
  void fail(Status status) {
    if (!core_.fail(std::move(status))) return;
    completeSends(core_.error());
    frame_.fail(core_.error());
    boost::system::error_code ec;
    socket_.shutdown(tcp::socket::shutdown_both, ec);
    socket_.close(ec);  // pending socket handlers run with operation_aborted and see failed()
    watchdog_.cancel();
  }

  void completeSends(const Status& status) {
    for (SendOp& op : sends_) core_.completeSend(std::move(op.cb), status);
    sends_.clear();
    inFlightFrames_ = 0;
  }

  void onSocketError(const boost::system::error_code& ec, const char* what) {
    if (core_.failed()) return;
    const std::string p = std::to_string(peer());
    if (ec == asio::error::eof || ec == asio::error::connection_reset ||
        ec == asio::error::broken_pipe) {
      fail(unavailable("peer " + p + " closed the connection (" + ec.message() + ")"));
    } else {
      fail(unavailable(std::string(what) + " peer " + p + " failed: " + ec.message()));
    }
  }

  // ---- deadlines --------------------------------------------------------------------------------

  // One periodic timer per connection checks every deadline (cheaper than a timer per operation).
  void startWatchdog() {
    const auto period = std::clamp<std::chrono::nanoseconds>(
        timeout_ / 4, std::chrono::milliseconds(20), std::chrono::seconds(1));
    watchdog_.expires_after(period);
    watchdog_.async_wait([weak = weak_from_this()](boost::system::error_code ec) {
      auto self = weak.lock();
      if (ec || !self || self->core_.failed()) return;
      self->checkDeadlines();
      if (!self->core_.failed()) self->startWatchdog();
    });
  }

  void checkDeadlines() {
    const auto now = Clock::now();
    const std::string p = std::to_string(peer());
    const std::string limit = std::to_string(timeoutSeconds_) + " s";
    if ((state_ == State::kConnecting || state_ == State::kHello) && now - phaseSince_ > timeout_) {
      return fail(unavailable("connecting to peer " + p + " took longer than " + limit));
    }
    if (state_ == State::kAwaitingAccept && now - phaseSince_ > timeout_) {
      return fail(unavailable("peer " + p + " did not connect within " + limit));
    }
    if (writing_ && now - writeProgress_ > timeout_) {
      return fail(unavailable("writing to peer " + p + " made no progress for " + limit));
    }
    if (reading_ && midFrame() && now - readProgress_ > timeout_) {
      return fail(unavailable("a frame from peer " + p + " stalled midway for " + limit));
    }
  }

  bool midFrame() const { return frame_.inBody() || stagingEnd_ > stagingBegin_; }

  // ---- hello ------------------------------------------------------------------------------------

  void readHello() {
    asio::async_read(
        socket_, asio::buffer(helloIn_, kHelloBytes),
        [self = shared_from_this()](boost::system::error_code ec, std::size_t) {
          if (self->core_.failed()) return;
          if (ec) return self->onSocketError(ec, "reading the hello of");
          auto rank = decodeHello(self->helloIn_);
          if (!rank.isOk()) return self->fail(unavailable(rank.status().message()));
          if (*rank != self->peer()) {
            return self->fail(unavailable("expected peer " + std::to_string(self->peer()) +
                                          ", the listener is peer " + std::to_string(*rank)));
          }
          if (!self->bound(self->helloIn_)) {
            return self->fail(unavailable("the data listener of peer " +
                                          std::to_string(self->peer()) +
                                          " is not bound to our handshake (another token)"));
          }
          self->becomeUp();
          self->startWrite();  // what was queued waits for the listener's bound hello
        });
  }

  void becomeUp() {
    state_ = State::kUp;
    core_.setOnRecvPosted([weak = weak_from_this()] {
      if (auto self = weak.lock()) self->onRecvPosted();
    });
    staging_ = pool_.acquire(kStagingBytes);
    boost::system::error_code ec;
    socket_.non_blocking(true, ec);  // read_some after a readiness wait must not block
    readFrames();
  }

  // ---- writing ----------------------------------------------------------------------------------

  void startWrite() {
    if (writing_ || core_.failed()) return;
    if (state_ != State::kUp && !(state_ == State::kHello)) return;
    gather_.clear();
    if (!helloSent_) {
      gather_.emplace_back(helloOut_, kHelloBytes);
      helloSent_ = true;
    }
    std::size_t bytes = 0;
    inFlightFrames_ = 0;
    // Nothing but our hello before the other end's hello proved its binding (the dialer reads the
    // listener's; the listener adopted the dialer's socket only after checking it).
    for (SendOp& op : sends_) {
      if (state_ != State::kUp) break;
      if (inFlightFrames_ > 0 && (bytes >= kGatherBytes || inFlightFrames_ >= kGatherFrames)) break;
      gather_.emplace_back(op.header, kHeaderBytes);
      if (!op.bytes.empty()) gather_.emplace_back(op.bytes.data(), op.bytes.size());
      bytes += kHeaderBytes + op.bytes.size();
      ++inFlightFrames_;
    }
    if (gather_.empty()) return;
    gatherIndex_ = 0;
    writing_ = true;
    writeProgress_ = Clock::now();
    writeSome();
  }

  // Writes the gathered buffers with write_some so the watchdog sees progress of long writes.
  void writeSome() {
    // Pass at most 64 buffers per call (IOV_MAX is far above that).
    const std::size_t end = std::min(gather_.size(), gatherIndex_ + 64);
    std::vector<asio::const_buffer> slice(
        gather_.begin() + static_cast<std::ptrdiff_t>(gatherIndex_),
        gather_.begin() + static_cast<std::ptrdiff_t>(end));
    socket_.async_write_some(
        slice, [self = shared_from_this()](boost::system::error_code ec, std::size_t n) {
          if (self->core_.failed()) return;
          if (ec) return self->onSocketError(ec, "writing to");
          self->writeProgress_ = Clock::now();
          self->consumeGather(n);
          if (self->gatherIndex_ < self->gather_.size()) return self->writeSome();
          // Take the finished frames off the queue and start the next write before any callback
          // runs: a callback may send (queues behind) or close (completes what is still queued).
          std::vector<SendCallback> done;
          done.reserve(self->inFlightFrames_);
          for (std::size_t i = 0; i < self->inFlightFrames_; ++i) {
            done.push_back(std::move(self->sends_.front().cb));
            self->sends_.pop_front();
          }
          self->inFlightFrames_ = 0;
          self->writing_ = false;
          self->startWrite();
          for (SendCallback& cb : done)
            self->core_.completeSendFromHandler(std::move(cb), Status::ok());
        });
  }

  void consumeGather(std::size_t n) {
    while (n > 0 && gatherIndex_ < gather_.size()) {
      asio::const_buffer& b = gather_[gatherIndex_];
      if (n >= b.size()) {
        n -= b.size();
        ++gatherIndex_;
      } else {
        b += n;
        n = 0;
      }
    }
    while (gatherIndex_ < gather_.size() && gather_[gatherIndex_].size() == 0) ++gatherIndex_;
  }

  // ---- reading ----------------------------------------------------------------------------------

  void onRecvPosted() {
    if (paused_ && !reading_ && !core_.failed()) {
      paused_ = false;
      readFrames();
    }
  }

  // Parses every complete frame in the staging buffer, then issues the next read.
  void readFrames() {
    while (!core_.failed()) {
      const std::size_t avail = stagingEnd_ - stagingBegin_;
      if (!frame_.inBody()) {
        if (avail < kHeaderBytes) return readIntoStaging();
        // Refused before any allocation when too long: the peer is misconfigured or corrupt.
        auto header = decodeFrameHeader(staging_.data() + stagingBegin_, maxMessageBytes_, peer());
        if (!header.isOk()) return fail(header.status());
        if (!frame_.start(header->tag, header->size)) {
          paused_ = true;  // over the unexpected-message budget: wait for a receive to be posted
          return;
        }
        stagingBegin_ += kHeaderBytes;
        continue;
      }
      // In a body: take what the staging buffer holds.
      stagingBegin_ += frame_.take(staging_.data() + stagingBegin_, avail);
      if (frame_.complete()) {
        frame_.finish();
        continue;
      }
      // The staging buffer is drained and the body is not complete.
      stagingBegin_ = stagingEnd_ = 0;
      if (!frame_.discarding() && frame_.remaining() >= kDirectReadBytes) return readBodyDirect();
      return readIntoStaging();
    }
  }

  void readIntoStaging() {
    if (stagingBegin_ > 0) {  // keep a partial header at the front
      const std::size_t avail = stagingEnd_ - stagingBegin_;
      std::memmove(staging_.data(), staging_.data() + stagingBegin_, avail);
      stagingBegin_ = 0;
      stagingEnd_ = avail;
    }
    const std::size_t want = stagingWant();
    reading_ = true;
    readProgress_ = Clock::now();
    if (drained_) {
      // The last read emptied the socket: wait until it is readable, then read without blocking
      // (async_read_some would first try a read that fails with EAGAIN: one wasted system call per
      // message, which shows in small-message latency).
      socket_.async_wait(tcp::socket::wait_read,
                         [self = shared_from_this()](boost::system::error_code ec) {
                           if (self->core_.failed()) {
                             self->reading_ = false;
                             return;
                           }
                           if (ec) {
                             self->reading_ = false;
                             return self->onSocketError(ec, "waiting to read from");
                           }
                           const std::size_t room = self->stagingWant();
                           const std::size_t n = self->socket_.read_some(
                               asio::buffer(self->staging_.data() + self->stagingEnd_, room), ec);
                           if (ec == asio::error::would_block || ec == asio::error::try_again) {
                             self->reading_ = false;
                             return self->readIntoStaging();  // spurious wake-up
                           }
                           self->onStagingRead(ec, n, room);
                         });
      return;
    }
    const std::size_t room = want;
    socket_.async_read_some(
        asio::buffer(staging_.data() + stagingEnd_, want),
        [self = shared_from_this(), room](boost::system::error_code ec, std::size_t n) {
          self->onStagingRead(ec, n, room);
        });
  }

  std::size_t stagingWant() const {
    std::size_t want = staging_.capacity() - stagingEnd_;
    // Don't read past a discarded frame.
    if (frame_.discarding()) want = std::min(want, frame_.remaining());
    return want;
  }

  void onStagingRead(boost::system::error_code ec, std::size_t n, std::size_t asked) {
    reading_ = false;
    if (core_.failed()) return;
    if (ec) return onSocketError(ec, "reading from");
    drained_ = n < asked;
    stagingEnd_ += n;
    bytesArrived_ += n;
    readFrames();
  }

  void readBodyDirect() {
    reading_ = true;
    readProgress_ = Clock::now();
    readBodyChunk();
  }

  // Reads the rest of the body into its destination in chunks, so the watchdog sees progress.
  void readBodyChunk() {
    socket_.async_read_some(
        asio::buffer(frame_.dest(), frame_.remaining()),
        [self = shared_from_this()](boost::system::error_code ec, std::size_t n) {
          if (self->core_.failed()) {
            self->reading_ = false;
            return;
          }
          if (ec) {
            self->reading_ = false;
            return self->onSocketError(ec, "reading from");
          }
          self->readProgress_ = Clock::now();
          self->drained_ = false;  // limited by the frame, not by the socket: more may be waiting
          self->frame_.advance(n);
          self->bytesArrived_ += n;
          if (!self->frame_.complete()) return self->readBodyChunk();
          self->reading_ = false;
          self->frame_.finish();
          self->readFrames();
        });
  }

  Loop& loop_;
  const int selfRank_;
  const std::size_t maxMessageBytes_;
  const std::chrono::nanoseconds timeout_;
  const double timeoutSeconds_;
  BufferPool pool_;
  ConnectionCore core_;
  tcp::socket socket_;
  asio::steady_timer watchdog_;
  State state_ = State::kIdle;
  Clock::time_point phaseSince_{};

  // Writing.
  std::uint8_t helloOut_[kHelloBytes];
  bool helloSent_ = false;
  std::deque<SendOp> sends_;  // front inFlightFrames_ entries are being written
  std::size_t inFlightFrames_ = 0;
  std::vector<asio::const_buffer> gather_;
  std::size_t gatherIndex_ = 0;
  bool writing_ = false;
  Clock::time_point writeProgress_{};

  // Reading.
  std::uint64_t bytesArrived_ = 0;  // frames' bytes read from the socket (bytesArrived())
  std::uint8_t helloIn_[kHelloBytes];
  Buffer staging_;
  std::size_t stagingBegin_ = 0;
  std::size_t stagingEnd_ = 0;
  bool reading_ = false;
  bool drained_ = false;  // the last staging read returned less than it asked for
  bool paused_ = false;
  Clock::time_point readProgress_{};
  IncomingFrame frame_{core_};  // the frame whose body is being read

  // The token the other end's hello must carry (DataBinding).
  const std::array<std::uint8_t, kBindingBytes> expectedToken_;
};

// The listener and the table of connections, shared with the accept handlers so that a context
// destroyed while an accept is pending leaves them a valid (closed) object. What strangers can
// make it hold is bounded (accept_bounds.h): at most kMaxPendingAccepts + Options::expectedDialers
// sockets whose hello has not arrived (each for at most ioTimeout, the oldest closed beyond the
// bound; every neighbour may dial at once without closing another's), parked sockets
// only for ranks below ours (the ones that dial us), each for at most ioTimeout and at most
// kMaxPendingAccepts of them (the oldest closed), and accept() backs off on EMFILE/ENFILE.
struct Listener : std::enable_shared_from_this<Listener> {
  Listener(Loop& loop, const Options& options)
      : loop(loop),
        options(options),
        acceptor(loop.io()),
        acceptTimer(loop.io()),
        unidentified(kMaxPendingAccepts + options.expectedDialers) {}

  struct PendingSocket {
    tcp::socket socket;
    std::uint8_t hello[kHelloBytes];
    asio::steady_timer deadline;
    std::uint64_t id = 0;  // in `pending`, then its age among the parked ones
    explicit PendingSocket(asio::io_context& io) : socket(io), deadline(io) {}
    void close() {
      boost::system::error_code ignored;
      deadline.cancel();
      socket.close(ignored);
    }
  };

  void startAccept() {
    auto pending = std::make_shared<PendingSocket>(loop.io());
    acceptor.async_accept(pending->socket,
                          [self = shared_from_this(), pending](boost::system::error_code ec) {
                            if (self->closed) return;
                            if (ec && isAcceptShortage(ec)) return self->backOff(ec);
                            if (!ec) {
                              self->backoff.reset();
                              self->readHello(pending);
                            }
                            self->startAccept();
                          });
  }

  // Out of descriptors (or buffers): accept again only after a pause, so that the loop thread
  // does not spin on a connection the kernel keeps queued.
  void backOff(boost::system::error_code ec) {
    if (!backoff.backingOff()) {
      log::warn("tcp: accepting on the data port failed (", ec.message(), "); backing off");
    }
    acceptTimer.expires_after(backoff.next());
    acceptTimer.async_wait([self = shared_from_this()](boost::system::error_code tec) {
      if (!tec && !self->closed) self->startAccept();
    });
  }

  // Reads the dialer's hello under a deadline, then hands the socket to its connection (or parks it
  // until connect() for that peer is called).
  void readHello(const std::shared_ptr<PendingSocket>& pending) {
    std::shared_ptr<PendingSocket> evicted;
    pending->id = unidentified.add(pending, evicted);
    if (evicted) evicted->close();
    pending->deadline.expires_after(toDuration(options.ioTimeoutSeconds));
    pending->deadline.async_wait([pending](boost::system::error_code ec) {
      if (!ec) {
        boost::system::error_code ignored;
        pending->socket.close(ignored);
      }
    });
    asio::async_read(
        pending->socket, asio::buffer(pending->hello, kHelloBytes),
        [self = shared_from_this(), pending](boost::system::error_code ec, std::size_t) {
          pending->deadline.cancel();
          self->unidentified.remove(pending->id);
          if (self->closed || ec) return;
          auto rank = decodeHello(pending->hello);
          // Only a lower rank dials us (TcpContext::connect): anything else is not for us.
          if (!rank.isOk() || *rank < 0 || *rank >= self->options.rank) return;
          auto it = self->connections.find(*rank);
          if (it != self->connections.end()) {
            if (auto conn = it->second.lock(); conn && conn->awaitingAccept()) {
              if (!conn->bound(pending->hello)) return self->refuseUnbound(*rank, pending);
              conn->adopt(std::move(pending->socket));
              return;
            }
          }
          self->park(*rank, pending);
        });
  }

  // A hello claiming `rank` without the token of the edge's handshake: closed before anything is
  // read from the socket or written to it, counted, and logged at most once a second.
  void refuseUnbound(int rank, const std::shared_ptr<PendingSocket>& pending) {
    pending->close();
    ++refusedUnbound;
    if (refusalLog.due()) {
      log::warn("tcp: closed a data connection claiming to be peer ", rank,
                " without the token of its handshake (", refusedUnbound, " so far)");
    }
  }

  // Holds an identified socket until connect() for its rank, for at most ioTimeout: at most
  // kParkedPerRank per rank (a stranger claiming the rank cannot push out the real dialer's by
  // dialing once more; beyond that the oldest of the rank is closed) and kMaxPendingAccepts in
  // all (the oldest closed). connect() adopts the one bound to its handshake and closes the rest.
  void park(int rank, const std::shared_ptr<PendingSocket>& pending) {
    pending->id = ++parkedCount;
    auto oldestWhere = [this](auto pred) {
      auto best = parked.end();
      for (auto it = parked.begin(); it != parked.end(); ++it) {
        if (pred(*it) && (best == parked.end() || it->second->id < best->second->id)) best = it;
      }
      return best;
    };
    const auto ofRank = static_cast<std::size_t>(std::count_if(
        parked.begin(), parked.end(), [rank](const auto& p) { return p.first == rank; }));
    if (ofRank >= kParkedPerRank) {
      auto oldest = oldestWhere([rank](const auto& p) { return p.first == rank; });
      oldest->second->close();
      parked.erase(oldest);
    }
    if (parked.size() >= kMaxPendingAccepts) {
      auto oldest = oldestWhere([](const auto&) { return true; });
      oldest->second->close();
      parked.erase(oldest);
    }
    parked.emplace_back(rank, pending);
    pending->deadline.expires_after(toDuration(options.ioTimeoutSeconds));
    pending->deadline.async_wait([weak = weak_from_this(), pending](boost::system::error_code ec) {
      auto self = weak.lock();
      if (ec || !self) return;
      auto it = std::find_if(self->parked.begin(), self->parked.end(),
                             [&](const auto& p) { return p.second == pending; });
      if (it != self->parked.end()) {
        pending->close();
        self->parked.erase(it);
      }
    });
  }

  // The parked socket of `rank` bound to `conn`'s handshake (null when none); every other parked
  // socket of the rank is closed (a stranger's, or a dial of an older handshake).
  std::shared_ptr<PendingSocket> takeParked(int rank, const TcpConnection& conn) {
    std::shared_ptr<PendingSocket> found;
    for (auto it = parked.begin(); it != parked.end();) {
      if (it->first != rank) {
        ++it;
        continue;
      }
      if (!found && conn.bound(it->second->hello)) {
        found = it->second;
        found->deadline.cancel();
      } else {
        refuseUnbound(rank, it->second);
      }
      it = parked.erase(it);
    }
    return found;
  }

  void close() {
    GV_CHECK_LOOP_THREAD(loop);
    if (closed) return;
    closed = true;
    boost::system::error_code ec;
    acceptor.close(ec);
    acceptTimer.cancel();
    for (auto& [rank, weak] : connections) {
      if (auto c = weak.lock()) c->close();
    }
    connections.clear();
    for (auto& [rank, p] : parked) p->close();
    parked.clear();
    unidentified.forEach([](PendingSocket& p) { p.close(); });
    unidentified.clear();
  }

  Loop& loop;
  const Options options;
  tcp::acceptor acceptor;
  asio::steady_timer acceptTimer;  // the EMFILE back-off
  AcceptBackoff backoff;
  bool closed = false;
  std::unordered_map<int, std::weak_ptr<TcpConnection>> connections;
  PendingAccepts<PendingSocket> unidentified;  // accepted, hello not read yet
  // Accepted, hello read, connect() not yet called: (claimed rank, socket).
  static constexpr std::size_t kParkedPerRank = 4;
  std::vector<std::pair<int, std::shared_ptr<PendingSocket>>> parked;
  std::uint64_t parkedCount = 0;
  std::uint64_t refusedUnbound = 0;  // hellos without the handshake's token (refuseUnbound)
  log::Throttle refusalLog;
};

class TcpContext : public Context {
 public:
  explicit TcpContext(std::shared_ptr<Listener> listener) : listener_(std::move(listener)) {}
  ~TcpContext() override { close(); }

  std::string_view backend() const override { return "tcp"; }

  std::vector<std::uint8_t> localAddress() const override {
    GV_CHECK_LOOP_THREAD(listener_->loop);
    boost::system::error_code ec;
    const std::string a = formatEndpoint(listener_->acceptor.local_endpoint(ec));
    return {a.begin(), a.end()};
  }

  Result<std::shared_ptr<Connection>> connect(
      int peer, std::span<const std::uint8_t> remoteAddress) override {
    return connectBound(peer, remoteAddress, DataBinding{});
  }

  Result<std::shared_ptr<Connection>> connectBound(int peer,
                                                   std::span<const std::uint8_t> remoteAddress,
                                                   const DataBinding& binding) override {
    Listener& l = *listener_;
    GV_CHECK_LOOP_THREAD(l.loop);
    if (l.closed) return cancelled("tcp context is closed");
    if (peer == l.options.rank)
      return invalidArgument("cannot connect to self (rank " + std::to_string(peer) + ")");
    GV_ASSIGN_OR_RETURN(
        tcp::endpoint endpoint,
        parseEndpoint(std::string_view(reinterpret_cast<const char*>(remoteAddress.data()),
                                       remoteAddress.size())));
    if (auto it = l.connections.find(peer); it != l.connections.end()) {
      if (auto old = it->second.lock()) old->close();
    }
    auto conn = std::make_shared<TcpConnection>(l.loop, l.options.rank, peer, l.options, binding);
    l.connections[peer] = conn;
    if (l.options.rank < peer) {
      conn->dial(endpoint);
    } else if (auto parked = l.takeParked(peer, *conn)) {
      conn->adopt(std::move(parked->socket));
    } else {
      conn->awaitAccept();
    }
    return std::shared_ptr<Connection>(conn);
  }

  void close() override { listener_->close(); }  // checks the thread

 private:
  std::shared_ptr<Listener> listener_;
};

}  // namespace

Result<std::unique_ptr<Context>> makeTcpContext(Loop& loop, const Options& options) {
  GV_CHECK_LOOP_THREAD(loop);
  auto listener = std::make_shared<Listener>(loop, options);
  boost::system::error_code ec;
  const auto address =
      asio::ip::make_address(options.host == "localhost" ? "127.0.0.1" : options.host, ec);
  if (ec) return invalidArgument("tcp host '" + options.host + "' is not a numeric IP address");
  const tcp::endpoint endpoint(address, options.dataPort);
  listener->acceptor.open(endpoint.protocol(), ec);
  if (!ec) listener->acceptor.set_option(tcp::acceptor::reuse_address(true), ec);
  if (!ec) listener->acceptor.bind(endpoint, ec);
  if (!ec) listener->acceptor.listen(asio::socket_base::max_listen_connections, ec);
  if (ec) {
    return unavailable("tcp: cannot listen on " + formatEndpoint(endpoint) + ": " + ec.message());
  }
  listener->startAccept();
  return std::unique_ptr<Context>(std::make_unique<TcpContext>(std::move(listener)));
}

BackendInfo tcpBackendInfo() { return BackendInfo{"tcp", true, ""}; }

}  // namespace grapevine::transport::tcp

namespace grapevine::transport {
void registerTcp(Registry& registry) {
  registry.add(BackendEntry{"tcp", tcp::makeTcpContext, tcp::tcpBackendInfo});
}
}  // namespace grapevine::transport
