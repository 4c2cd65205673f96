#include "runtime/transport/bootstrap.h"

#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/write.hpp>
#include <chrono>
#include <cstdio>
#include <deque>
#include <map>
#include <random>
#include <unordered_map>

#include "runtime/common/log.h"
#include "runtime/transport/tcp/socket_util.h"
#include "runtime/transport/tcp/wire.h"

namespace grapevine::transport {
namespace {

namespace asio = boost::asio;
using asio::ip::tcp;
using Clock = std::chrono::steady_clock;

// Control frame: u32 payload length | u16 type | payload (little-endian).
constexpr std::size_t kFrameHeaderBytes = 6;
enum FrameType : std::uint16_t { kHello = 1, kReject = 2, kHeartbeat = 3, kUser = 4 };
// Fixed prefix of every hello, the same in every protocol version so that a version mismatch can
// still be attributed to a peer: magic u32 | version u16 | reserved u16 | sender u32 | receiver u32
// | incarnation u64.
constexpr std::size_t kHelloFixedBytes = 24;

std::chrono::nanoseconds seconds(double s) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::duration<double>(s));
}
double secondsSince(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}
std::string hex(std::uint64_t v) {
  char b[19];
  std::snprintf(b, sizeof b, "%#018llx", static_cast<unsigned long long>(v));
  return b;
}
std::string fmtSeconds(double s) {
  char b[32];
  std::snprintf(b, sizeof b, "%.1f s", s);
  return b;
}

struct Hello {
  std::uint16_t version = kControlProtocolVersion;
  int sender = -1;
  int receiver = -1;
  std::uint64_t incarnation = 0;
  std::string backend;
  std::vector<std::uint8_t> address;
  std::vector<ConfigPart> parts;
};

std::vector<std::uint8_t> encodeFrame(std::uint16_t type, std::span<const std::uint8_t> payload) {
  std::vector<std::uint8_t> f(kFrameHeaderBytes + payload.size());
  wire::putU32(f.data(), static_cast<std::uint32_t>(payload.size()));
  wire::putU16(f.data() + 4, type);
  if (!payload.empty()) std::memcpy(f.data() + kFrameHeaderBytes, payload.data(), payload.size());
  return f;
}

std::vector<std::uint8_t> encodeHello(const Hello& h) {
  std::vector<std::uint8_t> p(kHelloFixedBytes);
  wire::putU32(p.data(), kControlMagic);
  wire::putU16(p.data() + 4, h.version);
  wire::putU16(p.data() + 6, 0);
  wire::putU32(p.data() + 8, static_cast<std::uint32_t>(h.sender));
  wire::putU32(p.data() + 12, static_cast<std::uint32_t>(h.receiver));
  wire::putU64(p.data() + 16, h.incarnation);
  auto put = [&p](const void* d, std::size_t n) {
    const auto* b = static_cast<const std::uint8_t*>(d);
    p.insert(p.end(), b, b + n);
  };
  std::uint8_t tmp[8];
  wire::putU16(tmp, static_cast<std::uint16_t>(h.backend.size()));
  put(tmp, 2);
  put(h.backend.data(), h.backend.size());
  wire::putU32(tmp, static_cast<std::uint32_t>(h.address.size()));
  put(tmp, 4);
  put(h.address.data(), h.address.size());
  wire::putU16(tmp, static_cast<std::uint16_t>(h.parts.size()));
  put(tmp, 2);
  for (const ConfigPart& part : h.parts) {
    const std::uint8_t n = static_cast<std::uint8_t>(std::min<std::size_t>(part.name.size(), 255));
    put(&n, 1);
    put(part.name.data(), n);
    wire::putU64(tmp, part.hash);
    put(tmp, 8);
  }
  return p;
}

// Decodes a hello. A version other than ours is kFailedPrecondition (the fixed prefix is still
// read).
Result<Hello> decodeHello(std::span<const std::uint8_t> p, Hello* prefix) {
  if (p.size() < kHelloFixedBytes || wire::getU32(p.data()) != kControlMagic) {
    return dataLoss("not a grapevine control connection (bad magic or short hello)");
  }
  Hello h;
  h.version = wire::getU16(p.data() + 4);
  h.sender = static_cast<int>(wire::getU32(p.data() + 8));
  h.receiver = static_cast<int>(wire::getU32(p.data() + 12));
  h.incarnation = wire::getU64(p.data() + 16);
  if (prefix) *prefix = h;
  if (h.version != kControlProtocolVersion) {
    return failedPrecondition(
        "control protocol version mismatch with peer " + std::to_string(h.sender) + ": ours " +
        std::to_string(kControlProtocolVersion) + ", theirs " + std::to_string(h.version));
  }
  std::size_t at = kHelloFixedBytes;
  auto need = [&](std::size_t n) { return at + n <= p.size(); };
  const Status truncated = dataLoss("truncated hello from peer " + std::to_string(h.sender));
  if (!need(2)) return truncated;
  const std::size_t bl = wire::getU16(p.data() + at);
  at += 2;
  if (!need(bl)) return truncated;
  h.backend.assign(reinterpret_cast<const char*>(p.data() + at), bl);
  at += bl;
  if (!need(4)) return truncated;
  const std::size_t al = wire::getU32(p.data() + at);
  at += 4;
  if (!need(al)) return truncated;
  h.address.assign(p.data() + at, p.data() + at + al);
  at += al;
  if (!need(2)) return truncated;
  const std::size_t np = wire::getU16(p.data() + at);
  at += 2;
  for (std::size_t i = 0; i < np; ++i) {
    if (!need(1)) return truncated;
    const std::size_t nl = p[at++];
    if (!need(nl + 8)) return truncated;
    ConfigPart part;
    part.name.assign(reinterpret_cast<const char*>(p.data() + at), nl);
    at += nl;
    part.hash = wire::getU64(p.data() + at);
    at += 8;
    h.parts.push_back(std::move(part));
  }
  return h;
}

// Every difference between our hello and theirs, or ok. Symmetric: both sides find the same parts.
Status compareHellos(const Hello& ours, const Hello& theirs) {
  const std::string who = "peer " + std::to_string(theirs.sender);
  if (theirs.receiver != ours.sender) {
    return failedPrecondition(who + " expected to reach peer " + std::to_string(theirs.receiver) +
                              " but reached peer " + std::to_string(ours.sender));
  }
  if (ours.backend != theirs.backend) {
    return failedPrecondition("transport backend mismatch with " + who + ": ours '" + ours.backend +
                              "', theirs '" + theirs.backend + "'");
  }
  std::map<std::string, std::uint64_t> a, b;
  for (const auto& p : ours.parts) a[p.name] = p.hash;
  for (const auto& p : theirs.parts) b[p.name] = p.hash;
  std::string diffs;
  auto add = [&diffs](const std::string& d) { diffs += (diffs.empty() ? "" : "; ") + d; };
  for (const auto& [name, hash] : a) {
    auto it = b.find(name);
    if (it == b.end()) {
      add("part '" + name + "' missing on " + who);
    } else if (it->second != hash) {
      add("part '" + name + "' differs (ours " + hex(hash) + ", theirs " + hex(it->second) + ")");
    }
  }
  for (const auto& [name, hash] : b) {
    if (!a.count(name)) add("part '" + name + "' only on " + who);
  }
  if (!diffs.empty()) return failedPrecondition("config mismatch with " + who + ": " + diffs);
  return Status::ok();
}

class BootstrapImpl;

// One control connection. Before the handshake completes it reports to its bootstrap; afterwards it
// is a ControlChannel that heartbeats and carries control messages until closed.
class Link : public ControlChannel, public std::enable_shared_from_this<Link> {
 public:
  using HandshakeDone = std::function<void(Link&, Status)>;

  Link(Loop& loop, int peer, std::shared_ptr<const BootstrapOptions> options,
       std::shared_ptr<const Hello> ours, HandshakeDone onHandshake)
      : loop_(loop),
        peer_(peer),
        optionsHolder_(std::move(options)),
        options_(*optionsHolder_),
        ours_(std::move(ours)),
        onHandshake_(std::move(onHandshake)),
        socket_(loop.io()),
        timer_(loop.io()),
        rng_(static_cast<std::uint64_t>(options_.rank) * 1000003u ^ options_.incarnation ^
             static_cast<std::uint64_t>(peer)) {}

  // --- handshake (lower rank dials) --------------------------------------------------------------

  void dial(tcp::endpoint endpoint, Clock::time_point deadline) {
    endpoint_ = endpoint;
    deadline_ = deadline;
    attemptConnect();
  }

  // Higher rank: an accepted socket whose first frame (the dialer's hello) was already read.
  void adopt(tcp::socket socket, std::vector<std::uint8_t> hello) {
    socket_ = std::move(socket);
    transport::tcp::configureSocket(socket_, options_.connectTimeoutSeconds);
    connected_ = true;
    sendHello();
    onFrame(kHello, hello);
    if (!closed_) readFrame();
  }

  bool connected() const { return connected_; }
  bool dialing() const { return attempts_ > 0 && !connected_; }
  // "neighbour 1 at 10.0.0.2:7000 unreachable for 10.0 s: Connection refused (12 attempts)"
  Status unreachable() const {
    return unavailable("neighbour " + std::to_string(peer_) + " at " +
                       transport::tcp::formatEndpoint(endpoint_) + " unreachable for " +
                       fmtSeconds(options_.connectTimeoutSeconds) + ": " +
                       (lastError_.empty() ? "no answer" : lastError_) + " (" +
                       std::to_string(attempts_) + " attempts)");
  }
  bool ready() const { return ready_; }
  const Hello& theirs() const { return theirs_; }

  // --- ControlChannel ----------------------------------------------------------------------------

  int peer() const override { return peer_; }
  std::uint64_t peerIncarnation() const override { return theirs_.incarnation; }
  double silentSeconds() const override { return secondsSince(lastHeard_); }

  Status send(std::uint16_t type, std::span<const std::uint8_t> payload) override {
    if (closed_)
      return unavailable("control connection to peer " + std::to_string(peer_) + " is closed");
    if (payload.size() + 2 > options_.maxControlFrameBytes) {
      return resourceExhausted("control message of " + std::to_string(payload.size()) +
                               " bytes exceeds maxControlFrameBytes");
    }
    std::vector<std::uint8_t> body(2 + payload.size());
    wire::putU16(body.data(), type);
    if (!payload.empty()) std::memcpy(body.data() + 2, payload.data(), payload.size());
    queue(kUser, body);
    return Status::ok();
  }

  void close() override { shutdown(); }

  // Ends the link; reports nothing (callers report).
  void shutdown() {
    if (closed_) return;
    closed_ = true;
    onHandshake_ = nullptr;
    boost::system::error_code ec;
    timer_.cancel();
    socket_.shutdown(tcp::socket::shutdown_both, ec);
    socket_.close(ec);
  }

  // Starts heartbeats and liveness checks once the bootstrap handed the channel to the caller.
  void startHeartbeats() {
    onHandshake_ = nullptr;
    lastHeard_ = Clock::now();
    tick();
  }

  // Closes once queued frames (a reject) are written, so the peer gets to read why.
  void closeAfterFlush() {
    onHandshake_ = nullptr;
    if (closed_) return;
    if (out_.empty() || !connected_) return shutdown();
    closeAfterWrite_ = true;
  }

  // Sends a reject with `reason` (best effort), then closes after the write.
  void reject(const std::string& reason) {
    if (closed_) return;
    queue(kReject, std::span(reinterpret_cast<const std::uint8_t*>(reason.data()), reason.size()));
    closeAfterWrite_ = true;
  }

 private:
  void attemptConnect() {
    ++attempts_;
    socket_ = tcp::socket(loop_.io());
    socket_.async_connect(endpoint_, [self = shared_from_this()](boost::system::error_code ec) {
      if (self->closed_) return;
      if (!ec) {
        transport::tcp::configureSocket(self->socket_, self->options_.connectTimeoutSeconds);
        self->connected_ = true;
        self->sendHello();
        self->readFrame();
        return;
      }
      // Capped exponential backoff with jitter, until the deadline.
      const double base = std::min(1.0, 0.02 * double(1u << std::min(self->attempts_, 6)));
      const auto jittered =
          seconds(base * std::uniform_real_distribution<double>(0.5, 1.5)(self->rng_));
      const auto now = Clock::now();
      self->lastError_ = ec.message();
      if (now >= self->deadline_) return self->handshakeFailed(self->unreachable());
      // The last attempt is made at the deadline itself.
      self->timer_.expires_after(
          std::min<std::chrono::nanoseconds>(jittered, self->deadline_ - now));
      self->timer_.async_wait([self](boost::system::error_code tec) {
        if (!tec && !self->closed_) self->attemptConnect();
      });
    });
  }

  void sendHello() { queue(kHello, encodeHello(*ours_)); }

  void handshakeFailed(Status status) {
    if (auto cb = std::move(onHandshake_)) {
      onHandshake_ = nullptr;
      cb(*this, std::move(status));
    }
  }

  void queue(std::uint16_t type, std::span<const std::uint8_t> payload) {
    out_.push_back(encodeFrame(type, payload));
    writeNext();
  }

  void writeNext() {
    if (writing_ || out_.empty() || closed_ || !connected_) return;
    writing_ = true;
    asio::async_write(socket_, asio::buffer(out_.front()),
                      [self = shared_from_this()](boost::system::error_code ec, std::size_t) {
                        self->writing_ = false;
                        if (self->closed_) return;
                        self->out_.pop_front();
                        if (ec) return self->lost("writing: " + ec.message());
                        if (self->out_.empty() && self->closeAfterWrite_) return self->shutdown();
                        self->writeNext();
                      });
  }

  void readFrame() {
    asio::async_read(
        socket_, asio::buffer(header_, kFrameHeaderBytes),
        [self = shared_from_this()](boost::system::error_code ec, std::size_t) {
          if (self->closed_) return;
          if (ec) return self->lost(ec == asio::error::eof ? "closed by peer" : ec.message());
          const std::size_t len = wire::getU32(self->header_);
          const std::uint16_t type = wire::getU16(self->header_ + 4);
          if (len > self->options_.maxControlFrameBytes) {
            // Refused before allocating anything for it.
            const std::string why = "control frame of " + std::to_string(len) +
                                    " bytes from peer " + std::to_string(self->peer_) +
                                    " exceeds maxControlFrameBytes " +
                                    std::to_string(self->options_.maxControlFrameBytes);
            self->reject(why);
            return self->protocolError(resourceExhausted(why));
          }
          self->body_.resize(len);
          asio::async_read(self->socket_, asio::buffer(self->body_),
                           [self, type](boost::system::error_code ec2, std::size_t) {
                             if (self->closed_) return;
                             if (ec2) return self->lost(ec2.message());
                             self->onFrame(type, self->body_);
                             if (!self->closed_ && !self->closeAfterWrite_) self->readFrame();
                           });
        });
  }

  void onFrame(std::uint16_t type, std::span<const std::uint8_t> body) {
    lastHeard_ = Clock::now();
    if (missed_) {
      missed_ = false;
      emit(ControlEventKind::kHeartbeatsResumed, 0,
           "peer " + std::to_string(peer_) + " heartbeats resumed");
    }
    if (!ready_) {
      if (type == kReject) {
        return protocolError(failedPrecondition(
            "peer " + std::to_string(peer_) + " rejected the handshake: " +
            std::string(reinterpret_cast<const char*>(body.data()), body.size())));
      }
      if (type != kHello) {
        return protocolError(dataLoss("peer " + std::to_string(peer_) + " sent frame type " +
                                      std::to_string(type) + " before its hello"));
      }
      auto h = decodeHello(body, nullptr);
      Status st = h.isOk() ? Status::ok() : h.status();
      if (st.isOk()) {
        theirs_ = std::move(h).value();
        if (theirs_.sender != peer_) {
          st = failedPrecondition("expected peer " + std::to_string(peer_) + ", but peer " +
                                  std::to_string(theirs_.sender) + " answered");
        } else {
          st = compareHellos(*ours_, theirs_);
        }
      }
      if (!st.isOk()) {
        reject(st.message());
        return protocolError(std::move(st));
      }
      ready_ = true;
      if (auto cb = std::move(onHandshake_)) {
        onHandshake_ = nullptr;
        cb(*this, Status::ok());
      }
      return;
    }
    switch (type) {
      case kHeartbeat:
        break;
      case kUser:
        if (body.size() >= 2 && options_.onMessage) {
          options_.onMessage(peer_, wire::getU16(body.data()), body.subspan(2));
        }
        break;
      case kReject:
        lost("peer rejected: " +
             std::string(reinterpret_cast<const char*>(body.data()), body.size()));
        break;
      default:
        break;  // unknown types are ignored: newer minor additions
    }
  }

  // A broken handshake or a protocol violation.
  void protocolError(Status status) {
    if (!ready_)
      handshakeFailed(status);
    else
      lost(status.message());
    if (!closeAfterWrite_) shutdown();
  }

  // The connection is gone.
  void lost(const std::string& why) {
    if (closed_) return;
    if (!ready_) {
      handshakeFailed(unavailable("control connection to neighbour " + std::to_string(peer_) +
                                  " lost during the handshake: " + why));
      return shutdown();
    }
    shutdown();
    emit(ControlEventKind::kClosed, secondsSince(lastHeard_),
         "control connection to peer " + std::to_string(peer_) + " closed: " + why);
  }

  void emit(ControlEventKind kind, double silent, std::string message) {
    if (!heartbeating_ || !options_.onEvent) return;
    ControlEvent e{peer_, kind, silent, std::move(message)};
    options_.onEvent(e);
  }

  void tick() {
    heartbeating_ = true;
    if (closed_) return;
    if (out_.size() < 16) queue(kHeartbeat, {});  // a stalled peer does not grow the queue
    const double silent = secondsSince(lastHeard_);
    const double limit = options_.heartbeatIntervalSeconds * options_.missedHeartbeats;
    if (!missed_ && silent > limit) {
      missed_ = true;
      emit(ControlEventKind::kMissedHeartbeats, silent,
           "peer " + std::to_string(peer_) + " missed heartbeats for " + fmtSeconds(silent));
    }
    timer_.expires_after(seconds(options_.heartbeatIntervalSeconds));
    timer_.async_wait([weak = weak_from_this()](boost::system::error_code ec) {
      auto self = weak.lock();
      if (!ec && self) self->tick();
    });
  }

  Loop& loop_;
  const int peer_;
  std::shared_ptr<const BootstrapOptions>
      optionsHolder_;  // shared with the bootstrap and other links
  const BootstrapOptions& options_;
  std::shared_ptr<const Hello> ours_;
  HandshakeDone onHandshake_;
  tcp::socket socket_;
  asio::steady_timer timer_;
  std::mt19937_64 rng_;
  tcp::endpoint endpoint_;
  Clock::time_point deadline_{};
  int attempts_ = 0;
  std::string lastError_;
  bool connected_ = false;
  bool ready_ = false;
  bool closed_ = false;
  bool closeAfterWrite_ = false;
  bool writing_ = false;
  bool heartbeating_ = false;
  bool missed_ = false;
  Clock::time_point lastHeard_ = Clock::now();
  std::deque<std::vector<std::uint8_t>> out_;
  std::uint8_t header_[kFrameHeaderBytes];
  std::vector<std::uint8_t> body_;
  Hello theirs_;
};

class BootstrapImpl : public Bootstrap, public std::enable_shared_from_this<BootstrapImpl> {
 public:
  BootstrapImpl(Loop& loop, BootstrapOptions options, Context& data, BootstrapCallback done)
      : loop_(loop),
        options_(std::make_shared<const BootstrapOptions>(std::move(options))),
        data_(data),
        done_(std::move(done)),
        acceptor_(loop.io()),
        deadline_(loop.io()) {}

  Status init() {
    const BootstrapOptions& o = *options_;
    if (o.rank < 0 || static_cast<std::size_t>(o.rank) >= o.peers.size()) {
      return invalidArgument("rank " + std::to_string(o.rank) +
                             " has no entry in the peers list (" + std::to_string(o.peers.size()) +
                             " peers)");
    }
    for (int n : o.neighbours) {
      if (n < 0 || static_cast<std::size_t>(n) >= o.peers.size() || n == o.rank) {
        return invalidArgument("neighbour " + std::to_string(n) + " of peer " +
                               std::to_string(o.rank) + " is not a valid peer");
      }
    }
    GV_ASSIGN_OR_RETURN(tcp::endpoint self, transport::tcp::parseEndpoint(o.peers[o.rank]));
    boost::system::error_code ec;
    acceptor_.open(self.protocol(), ec);
    if (!ec) acceptor_.set_option(tcp::acceptor::reuse_address(true), ec);
    if (!ec) acceptor_.bind(self, ec);
    if (!ec) acceptor_.listen(asio::socket_base::max_listen_connections, ec);
    if (ec)
      return unavailable("bootstrap: cannot listen on " + o.peers[o.rank] + ": " + ec.message());

    auto ours = std::make_shared<Hello>();
    ours->sender = o.rank;
    ours->incarnation = o.incarnation;
    ours->backend = std::string(data_.backend());
    ours->address = data_.localAddress();
    ours->parts = o.configParts;
    // Each link gets its own `receiver` field: one hello per neighbour.
    const auto deadline = Clock::now() + seconds(o.connectTimeoutSeconds);
    for (int n : o.neighbours) {
      auto hello = std::make_shared<Hello>(*ours);
      hello->receiver = n;
      auto link = std::make_shared<Link>(loop_, n, options_, hello,
                                         [weak = weak_from_this()](Link& l, Status st) {
                                           if (auto self = weak.lock())
                                             self->onHandshake(l, std::move(st));
                                         });
      links_[n] = link;
    }
    startAccept();
    for (int n : o.neighbours) {
      if (o.rank < n) {
        auto ep = transport::tcp::parseEndpoint(o.peers[n]);
        if (!ep.isOk()) return ep.status();
        links_[n]->dial(*ep, deadline);
      }
    }
    deadline_.expires_at(deadline);
    deadline_.async_wait([weak = weak_from_this()](boost::system::error_code ec) {
      if (auto self = weak.lock(); self && !ec) self->onDeadline();
    });
    if (o.neighbours.empty()) finish(std::vector<Neighbour>{});
    return Status::ok();
  }

  std::uint16_t listenPort() const override {
    boost::system::error_code ec;
    return acceptor_.local_endpoint(ec).port();
  }

  void cancel() override { finish(cancelled("bootstrap cancelled")); }

 private:
  struct Pending {
    explicit Pending(asio::io_context& io) : socket(io), timer(io) {}
    tcp::socket socket;
    asio::steady_timer timer;
    std::uint8_t header[kFrameHeaderBytes];
    std::vector<std::uint8_t> body;
  };

  void startAccept() {
    auto pending = std::make_shared<Pending>(loop_.io());
    acceptor_.async_accept(pending->socket,
                           [self = shared_from_this(), pending](boost::system::error_code ec) {
                             if (self->finished_) return;
                             if (!ec) self->readFirstFrame(pending);
                             self->startAccept();
                           });
  }

  // The dialer's first frame must be its hello; it tells us which link the socket belongs to.
  void readFirstFrame(const std::shared_ptr<Pending>& p) {
    p->timer.expires_after(seconds(options_->connectTimeoutSeconds));
    p->timer.async_wait([p](boost::system::error_code ec) {
      boost::system::error_code ignored;
      if (!ec) p->socket.close(ignored);
    });
    asio::async_read(p->socket, asio::buffer(p->header, kFrameHeaderBytes),
                     [self = shared_from_this(), p](boost::system::error_code ec, std::size_t) {
                       if (ec || self->finished_) return;
                       const std::size_t len = wire::getU32(p->header);
                       if (len > self->options_->maxControlFrameBytes) {
                         const std::string why =
                             "control frame of " + std::to_string(len) +
                             " bytes exceeds maxControlFrameBytes " +
                             std::to_string(self->options_->maxControlFrameBytes);
                         log::warn("bootstrap: refused a connection: ", why);
                         return self->rejectPending(p, why);
                       }
                       p->body.resize(len);
                       asio::async_read(p->socket, asio::buffer(p->body),
                                        [self, p](boost::system::error_code ec2, std::size_t) {
                                          p->timer.cancel();
                                          if (ec2 || self->finished_) return;
                                          self->routeAccepted(p);
                                        });
                     });
  }

  void routeAccepted(const std::shared_ptr<Pending>& p) {
    if (wire::getU16(p->header + 4) != kHello) return rejectPending(p, "expected a hello first");
    Hello prefix;
    auto h = decodeHello(p->body, &prefix);
    if (!h.isOk() && h.status().code() != ErrorCode::kFailedPrecondition) {
      return rejectPending(p, h.status().message());
    }
    auto it = links_.find(prefix.sender);
    if (it == links_.end() || prefix.sender > options_->rank || it->second->connected()) {
      return rejectPending(p, "peer " + std::to_string(prefix.sender) +
                                  " is not an expected neighbour of peer " +
                                  std::to_string(options_->rank));
    }
    // The link checks the hello itself (version, config) so both sides report the same mismatch.
    it->second->adopt(std::move(p->socket), std::move(p->body));
  }

  void rejectPending(const std::shared_ptr<Pending>& p, const std::string& why) {
    auto frame = std::make_shared<std::vector<std::uint8_t>>(encodeFrame(
        kReject, std::span(reinterpret_cast<const std::uint8_t*>(why.data()), why.size())));
    asio::async_write(p->socket, asio::buffer(*frame),
                      [p, frame](boost::system::error_code, std::size_t) {
                        boost::system::error_code ignored;
                        p->socket.close(ignored);
                      });
    // A version mismatch from a real neighbour is a bootstrap failure here too.
    Hello prefix;
    auto h = decodeHello(p->body, &prefix);
    if (!h.isOk() && h.status().code() == ErrorCode::kFailedPrecondition &&
        links_.count(prefix.sender)) {
      finish(h.status());
    }
  }

  void onHandshake(Link& link, Status status) {
    if (finished_) return;
    if (!status.isOk()) return finish(std::move(status));
    if (++ready_ < links_.size()) return;
    // Every neighbour agreed: connect the data backend to each.
    std::vector<Neighbour> out;
    for (int n : options_->neighbours) {
      auto& l = links_[n];
      auto conn = data_.connect(n, l->theirs().address);
      if (!conn.isOk()) {
        return finish(Status(
            conn.status().code(),
            "data connection to neighbour " + std::to_string(n) + ": " + conn.status().message()));
      }
      out.push_back(Neighbour{n, l->theirs().incarnation, std::move(conn).value(), l});
    }
    finish(std::move(out));
  }

  void onDeadline() {
    if (finished_) return;
    for (int n : options_->neighbours) {
      const auto& l = links_[n];
      if (l->ready()) continue;
      if (l->dialing()) return finish(l->unreachable());
      const std::string what = options_->rank < n ? " did not complete the handshake within "
                                                  : " did not connect within ";
      return finish(deadlineExceeded("neighbour " + std::to_string(n) + " (" + options_->peers[n] +
                                     ")" + what + fmtSeconds(options_->connectTimeoutSeconds)));
    }
  }

  void finish(Result<std::vector<Neighbour>> result) {
    if (finished_) return;
    finished_ = true;
    boost::system::error_code ec;
    acceptor_.close(ec);
    deadline_.cancel();
    if (result.isOk()) {
      for (auto& [n, l] : links_) l->startHeartbeats();
    } else {
      for (auto& [n, l] : links_) l->closeAfterFlush();
    }
    links_.clear();
    loop_.post([done = std::move(done_), r = std::move(result)]() mutable { done(std::move(r)); });
  }

  Loop& loop_;
  // Shared with the links (they keep a reference to it after the bootstrap object is gone).
  std::shared_ptr<const BootstrapOptions> options_;
  Context& data_;
  BootstrapCallback done_;
  tcp::acceptor acceptor_;
  asio::steady_timer deadline_;
  std::map<int, std::shared_ptr<Link>> links_;
  std::size_t ready_ = 0;
  bool finished_ = false;
};

}  // namespace

Result<std::shared_ptr<Bootstrap>> Bootstrap::start(Loop& loop, BootstrapOptions options,
                                                    Context& data, BootstrapCallback done) {
  auto b = std::make_shared<BootstrapImpl>(loop, std::move(options), data, std::move(done));
  GV_RETURN_IF_ERROR(b->init());
  return std::shared_ptr<Bootstrap>(b);
}

}  // namespace grapevine::transport
