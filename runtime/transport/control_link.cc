#include "runtime/transport/control_link.h"

#include <boost/asio/read.hpp>
#include <boost/asio/write.hpp>
#include <cstdio>
#include <cstdlib>

#include "runtime/common/elapsed.h"
#include "runtime/common/log.h"
#include "runtime/transport/socket_util.h"

namespace grapevine::transport {
namespace {

namespace asio = boost::asio;
using asio::ip::tcp;
using Clock = ControlLink::Clock;
using namespace handshake;

std::chrono::nanoseconds seconds(double s) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::duration<double>(s));
}

}  // namespace

std::string formatSeconds(double s) {
  char b[32];
  std::snprintf(b, sizeof b, "%.1f s", s);
  return b;
}

ControlLink::ControlLink(Loop& loop, int peer, std::shared_ptr<const BootstrapOptions> options,
                         std::shared_ptr<const Hello> ours, std::vector<std::uint8_t> oursEncoded,
                         HandshakeDone onHandshake)
    : loop_(loop),
      peer_(peer),
      optionsHolder_(std::move(options)),
      options_(*optionsHolder_),
      ours_(std::move(ours)),
      oursEncoded_(std::move(oursEncoded)),
      onHandshake_(std::move(onHandshake)),
      socket_(loop.io()),
      timer_(loop.io()),
      rng_(static_cast<std::uint64_t>(options_.rank) * 1000003u ^ options_.incarnation ^
           static_cast<std::uint64_t>(peer)),
      check_(peer, options_.psk) {}

void ControlLink::moveTo(State next) {
  if (next <= state_) {
    // Always on (the default build defines NDEBUG): a link that went back to an earlier state would
    // write on a closed socket or report a handshake twice.
    log::error("control link to peer ", peer_, ": state ", static_cast<int>(state_), " -> ",
               static_cast<int>(next), " goes backwards");
    std::abort();
  }
  state_ = next;
}

void ControlLink::refreshRunningRound() {
  if (!options_.runningRound) return;
  const std::int64_t round = options_.runningRound();
  if (round < 0 || round == ours_->runningRound) return;
  auto fresh = std::make_shared<Hello>(*ours_);
  fresh->runningRound = round;
  auto bytes = handshake::encodeHello(*fresh, options_.psk);
  if (!bytes.isOk()) return;
  ours_ = std::move(fresh);
  oursEncoded_ = std::move(bytes).value();
}

void ControlLink::dial(tcp::endpoint endpoint, Clock::time_point deadline) {
  GV_CHECK_LOOP_THREAD(loop_);
  moveTo(State::kDialing);
  endpoint_ = endpoint;
  deadline_ = deadline;
  attemptConnect();
}

void ControlLink::adopt(tcp::socket socket, std::vector<std::uint8_t> hello,
                        std::optional<security::Key> sessionKey) {
  GV_CHECK_LOOP_THREAD(loop_);
  moveTo(State::kHandshaking);
  socket_ = std::move(socket);
  configureSocket(socket_, options_.connectTimeoutSeconds);
  sessionKey_ = std::move(sessionKey);
  if (!sessionKey_) {
    refreshRunningRound();
    queue(kHello, oursEncoded_);
  }
  onFrame(kHello, hello);
  if (state_ != State::kClosed) readFrame();
}

void ControlLink::startHeartbeats() {
  GV_CHECK_LOOP_THREAD(loop_);
  onHandshake_ = nullptr;
  if (state_ != State::kHandshaken) return;  // lost between its handshake and the bootstrap's end
  moveTo(State::kConnected);
  // Silence is judged from now on; the heartbeats themselves run since the handshake (see tick()).
  lastHeard_ = lastVerified_ = Clock::now();
}

void ControlLink::heardFrom() {
  GV_CHECK_LOOP_THREAD(loop_);
  if (state_ == State::kConnected) noteHeard();
}

void ControlLink::noteHeard() {
  lastHeard_ = Clock::now();
  if (missed_) {
    missed_ = false;
    emit(ControlEventKind::kHeartbeatsResumed, 0,
         "peer " + std::to_string(peer_) + " heartbeats resumed");
  }
}

void ControlLink::closeAfterFlush() {
  GV_CHECK_LOOP_THREAD(loop_);
  onHandshake_ = nullptr;
  if (state_ >= State::kClosing) return;
  if (out_.empty() || !socketOpen()) return shutdown();
  moveTo(State::kClosing);
}

Status ControlLink::unreachable() const {
  return unavailable("neighbour " + std::to_string(peer_) + " at " + formatEndpoint(endpoint_) +
                     " unreachable for " + formatSeconds(options_.connectTimeoutSeconds) + ": " +
                     (lastError_.empty() ? "no answer" : lastError_) + " (" +
                     std::to_string(attempts_) + " attempts)");
}

Status ControlLink::send(std::uint16_t type, std::span<const std::uint8_t> payload) {
  GV_CHECK_LOOP_THREAD(loop_);
  if (state_ == State::kClosed) {
    return unavailable("control connection to peer " + std::to_string(peer_) + " is closed");
  }
  if (payload.size() + 2 + security::kSealTagBytes > options_.maxControlFrameBytes) {
    return resourceExhausted("control message of " + std::to_string(payload.size()) +
                             " bytes exceeds maxControlFrameBytes");
  }
  queue(kUser, encodeUserMessage(type, payload));
  return Status::ok();
}

void ControlLink::attemptConnect() {
  ++attempts_;
  socket_ = tcp::socket(loop_.io());
  const int attempt = attempts_;
  socket_.async_connect(
      endpoint_, [self = shared_from_this(), attempt](boost::system::error_code ec) {
        if (self->state_ != State::kDialing) return;  // closed meanwhile
        // Given up on by the attempt timer below (its close may race a connect that just
        // completed).
        const bool timedOut = self->attemptTimedOut_ == attempt;
        if (!ec && !timedOut) {
          self->timer_.cancel();
          configureSocket(self->socket_, self->options_.connectTimeoutSeconds);
          self->moveTo(State::kHandshaking);
          self->refreshRunningRound();
          self->queue(kHello, self->oursEncoded_);
          self->readFrame();
          return;
        }
        self->lastError_ =
            timedOut ? "no answer within " + formatSeconds(kConnectAttemptSeconds) : ec.message();
        self->retryConnect();
      });
  // A SYN that gets no answer (the path is down, the neighbour's accept queue is full) is left to
  // the kernel's SYN retransmissions, 1, 3, 7, 15, 31 s apart: a link back after a long cut would
  // wait up to half a minute for the next one, and a dial would outlive its deadline. Each attempt
  // is given kConnectAttemptSeconds, cut at the deadline (the one made at the deadline itself gets
  // a tenth of a second); then a fresh socket dials again.
  const std::chrono::nanoseconds left = deadline_ - Clock::now();
  timer_.expires_after(std::min<std::chrono::nanoseconds>(
      seconds(kConnectAttemptSeconds), std::max<std::chrono::nanoseconds>(left, seconds(0.1))));
  timer_.async_wait([self = shared_from_this(), attempt](boost::system::error_code tec) {
    if (tec || self->state_ != State::kDialing || self->attempts_ != attempt) return;
    self->attemptTimedOut_ = attempt;
    boost::system::error_code ignored;
    self->socket_.close(ignored);  // the connect completes with operation_aborted
  });
}

void ControlLink::retryConnect() {
  // Capped exponential backoff with jitter, until the deadline.
  const double base = std::min(1.0, 0.02 * double(1u << std::min(attempts_, 6)));
  const auto jittered = seconds(base * std::uniform_real_distribution<double>(0.5, 1.5)(rng_));
  const auto now = Clock::now();
  if (now >= deadline_) return handshakeFailed(unreachable());
  // The last attempt is made at the deadline itself.
  timer_.expires_after(std::min<std::chrono::nanoseconds>(jittered, deadline_ - now));
  timer_.async_wait([self = shared_from_this()](boost::system::error_code tec) {
    if (!tec && self->state_ == State::kDialing) self->attemptConnect();
  });
}

void ControlLink::handshakeFailed(Status status) {
  if (auto cb = std::move(onHandshake_)) {
    onHandshake_ = nullptr;
    cb(*this, std::move(status));
  }
}

void ControlLink::queue(std::uint16_t type, std::span<const std::uint8_t> payload) {
  if (controlKey_) {
    out_.push_back(encodeSealedFrame(*controlKey_, static_cast<std::uint32_t>(ours_->sender),
                                     sealedOut_++, type, payload));
  } else {
    out_.push_back(encodeFrame(type, payload));
  }
  writeNext();
}

void ControlLink::writeNext() {
  if (writing_ || out_.empty() || !socketOpen()) return;
  writing_ = true;
  asio::async_write(socket_, asio::buffer(out_.front()),
                    [self = shared_from_this()](boost::system::error_code ec, std::size_t) {
                      self->writing_ = false;
                      if (self->state_ == State::kClosed) return;
                      self->out_.pop_front();
                      if (ec) return self->lost("writing: " + ec.message());
                      if (self->out_.empty() && self->state_ == State::kClosing) {
                        return self->shutdown();
                      }
                      self->writeNext();
                    });
}

void ControlLink::readFrame() {
  asio::async_read(socket_, asio::buffer(header_, kFrameHeaderBytes),
                   [self = shared_from_this()](boost::system::error_code ec, std::size_t) {
                     if (self->state_ == State::kClosed) return;
                     if (ec)
                       return self->lost(ec == asio::error::eof ? "closed by peer" : ec.message());
                     const FrameHeader h = decodeFrameHeader(self->header_);
                     if (h.payloadBytes > self->options_.maxControlFrameBytes) {
                       // Refused before allocating anything for it.
                       return self->protocolError(
                           resourceExhausted("control frame of " + std::to_string(h.payloadBytes) +
                                             " bytes from peer " + std::to_string(self->peer_) +
                                             " exceeds maxControlFrameBytes " +
                                             std::to_string(self->options_.maxControlFrameBytes)),
                           /*tellPeer=*/true);
                     }
                     self->body_.resize(h.payloadBytes);
                     asio::async_read(
                         self->socket_, asio::buffer(self->body_),
                         [self, type = h.type](boost::system::error_code ec2, std::size_t) {
                           if (self->state_ == State::kClosed) return;
                           if (ec2) return self->lost(ec2.message());
                           self->onFrame(type, self->body_);
                           if (self->state_ < State::kClosing) self->readFrame();
                         });
                   });
}

void ControlLink::onFrame(std::uint16_t type, std::span<const std::uint8_t> body) {
  if (controlKey_) {
    // After a keyed handshake only frames sealed by the neighbour, in order, count (handshake.h).
    // The next count, or one a few later: a frame of the neighbour's that was altered on the way
    // is skipped instead of leaving every later one unverifiable (older counts never verify, so
    // nothing is replayed).
    std::optional<std::span<const std::uint8_t>> payload;
    std::uint64_t skipped = 0;
    for (; skipped < kSealWindow && !payload; ++skipped) {
      payload = openSealedFrame(*controlKey_, static_cast<std::uint32_t>(peer_),
                                sealedIn_ + skipped, header_, body);
    }
    if (!payload) {
      ++unverifiedSinceHeard_;
      ++droppedFrames_;
      if (droppedLog_.due()) {
        log::warn("control connection to peer ", peer_, ": dropped a frame whose seal does not ",
                  "verify (forged, altered or replayed; ", droppedFrames_, " so far)");
      }
      return;
    }
    sealedIn_ += skipped;  // the frame's count + 1
    unverifiedSinceHeard_ = 0;
    lastVerified_ = Clock::now();
    body = *payload;
  }
  noteHeard();
  switch (state_) {
    case State::kHandshaking:
      return onHandshakeFrame(type, body);
    case State::kHandshaken:
    case State::kConnected:
      break;
    default:
      return;  // kClosing: leaving, the peer has been told why
  }
  switch (type) {
    case kHeartbeat:
      break;
    case kUser:
      if (auto m = decodeUserMessage(body); m.isOk() && options_.onMessage) {
        options_.onMessage(peer_, m->type, m->bytes);
      }
      break;
    case kReject:
      lost("peer rejected: " + decodeReject(body));
      break;
    default:
      break;  // unknown types are ignored: newer minor additions
  }
}

void ControlLink::onHandshakeFrame(std::uint16_t type, std::span<const std::uint8_t> body) {
  using Kind = HandshakeCheck::Verdict::Kind;
  HandshakeCheck::Verdict v = check_.onFrame(type, body, *ours_, oursEncoded_,
                                             sessionKey_.has_value(), formatEndpoint(endpoint_));
  switch (v.kind) {
    case Kind::kWait:
      return;
    case Kind::kFailed:
      authFailed_ = authFailed_ || v.authFailed;
      return protocolError(std::move(v.status), v.tellPeer, v.tell);
    case Kind::kAgreed:
      if (v.proof) queue(kAuth, *v.proof);
      if (v.sessionKey) sessionKey_ = std::move(v.sessionKey);
      return handshakeAgreed(std::move(v.theirs));
  }
}

void ControlLink::handshakeAgreed(handshake::Hello theirs) {
  theirs_ = std::move(theirs);
  moveTo(State::kHandshaken);
  // From here on every frame both ways is sealed (the neighbour seals from its own handshake on,
  // and its handshake frames all precede ours in the stream).
  if (sessionKey_) controlKey_ = security::controlKey(*sessionKey_);
  // Heartbeats start with the handshake, not with our bootstrap's end: the neighbour may finish
  // its bootstrap long before ours (we may still wait for another neighbour) and judges our
  // silence from then on.
  tick();
  if (auto cb = std::move(onHandshake_)) {
    onHandshake_ = nullptr;
    cb(*this, Status::ok());
  }
}

// A broken handshake or a protocol violation. With `tellPeer` a reject carrying the status message
// is queued first: during the handshake the link then closes once it is written; afterwards the
// link closes at once (the reject goes out only if its write gets through first).
void ControlLink::protocolError(Status status, bool tellPeer, const std::string& tell) {
  if (tellPeer) queue(kReject, encodeReject(tell.empty() ? status.message() : tell));
  if (handshakeDone()) return lost(status.message());
  if (tellPeer && state_ < State::kClosing) moveTo(State::kClosing);
  handshakeFailed(std::move(status));
  // The callback may have asked for a flushed close already (the bootstrap failing as a whole).
  if (state_ != State::kClosing) shutdown();
}

void ControlLink::lost(const std::string& why) {
  if (state_ == State::kClosed) return;
  if (!handshakeDone()) {
    handshakeFailed(unavailable("control connection to neighbour " + std::to_string(peer_) +
                                " lost during the handshake: " + why));
    return shutdown();
  }
  const bool handedOut = state_ == State::kConnected;
  shutdown();
  if (handedOut) {
    emit(ControlEventKind::kClosed, secondsSince(lastHeard_),
         "control connection to peer " + std::to_string(peer_) + " closed: " + why);
  }
}

void ControlLink::shutdown() {
  GV_CHECK_LOOP_THREAD(loop_);
  if (state_ == State::kClosed) return;
  moveTo(State::kClosed);
  onHandshake_ = nullptr;
  boost::system::error_code ec;
  timer_.cancel();
  socket_.shutdown(tcp::socket::shutdown_both, ec);
  socket_.close(ec);
}

void ControlLink::emit(ControlEventKind kind, double silent, std::string message) {
  if (!options_.onEvent) return;
  ControlEvent e;
  e.peer = peer_;
  e.channel = this;
  e.kind = kind;
  e.silentSeconds = silent;
  e.message = std::move(message);
  options_.onEvent(e);
}

void ControlLink::tick() {
  if (state_ != State::kHandshaken && state_ != State::kConnected) return;
  if (out_.size() < 16) queue(kHeartbeat, {});  // a stalled peer does not grow the queue
  const double silent = secondsSince(lastHeard_);
  const double limit = options_.heartbeatIntervalSeconds * options_.missedHeartbeats;
  // Silence counts only once the bootstrap handed the link out (startHeartbeats()).
  // Frames keep coming but none verifies (more than kSealWindow of the neighbour's were altered,
  // or a stranger writes into the stream): the link cannot recover, so it is closed and the edge
  // redialed rather than left open and silent for the rest of the run.
  if (const double unverified = secondsSince(lastVerified_);
      state_ == State::kConnected && unverifiedSinceHeard_ > 0 && unverified > limit) {
    return lost("no control frame verified for " + formatSeconds(unverified) + " (" +
                std::to_string(unverifiedSinceHeard_) + " refused)");
  }
  if (state_ == State::kConnected && !missed_ && silent > limit) {
    missed_ = true;
    emit(ControlEventKind::kMissedHeartbeats, silent,
         "peer " + std::to_string(peer_) + " missed heartbeats for " + formatSeconds(silent));
  }
  timer_.expires_after(seconds(options_.heartbeatIntervalSeconds));
  timer_.async_wait([weak = weak_from_this()](boost::system::error_code ec) {
    auto self = weak.lock();
    if (!ec && self) self->tick();
  });
}

}  // namespace grapevine::transport
