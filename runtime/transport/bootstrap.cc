#include "runtime/transport/bootstrap.h"

#include <algorithm>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/write.hpp>
#include <chrono>
#include <map>
#include <optional>
#include <set>

#include "runtime/common/log.h"
#include "runtime/transport/accept_bounds.h"
#include "runtime/transport/control_link.h"
#include "runtime/transport/handshake.h"
#include "runtime/transport/socket_util.h"

namespace grapevine::transport {
namespace {

namespace asio = boost::asio;
using asio::ip::tcp;
using Clock = std::chrono::steady_clock;
using handshake::Hello;

#ifndef GRAPEVINE_BUILD_ID
#define GRAPEVINE_BUILD_ID "unknown"
#endif

// What a refused stranger is told: nothing of ours (no versions, hashes or part names).
constexpr const char* kRefusedText = "handshake refused (the reason is in that peer's log)";

std::chrono::nanoseconds seconds(double s) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::duration<double>(s));
}

// Who dials whom (the lower rank), the accept side's routing of sockets to links, the shared
// deadline, and collecting the neighbours once every handshake agreed. The per-connection work is
// ControlLink's; the bytes are handshake.h's. Thread: the Loop thread (bootstrap.h).
class BootstrapImpl : public Bootstrap, public std::enable_shared_from_this<BootstrapImpl> {
 public:
  BootstrapImpl(Loop& loop, BootstrapOptions options, Context& data, BootstrapCallback done)
      : loop_(loop),
        options_(std::make_shared<const BootstrapOptions>(std::move(options))),
        data_(data),
        done_(std::move(done)),
        acceptor_(loop.io()),
        acceptTimer_(loop.io()),
        pending_(kMaxPendingAccepts + lowerNeighbours(*options_)),
        deadline_(loop.io()) {}

  // The neighbours that dial us: every one may be unidentified at once without closing another's.
  static std::size_t lowerNeighbours(const BootstrapOptions& o) {
    return static_cast<std::size_t>(
        std::count_if(o.neighbours.begin(), o.neighbours.end(), [&](int n) { return n < o.rank; }));
  }

  // Errors at start (bootstrap.h): bad ranks or addresses, a port that cannot be bound.
  Status init() {
    const BootstrapOptions& o = *options_;
    GV_RETURN_IF_ERROR(checkRanks(o));
    GV_RETURN_IF_ERROR(makeLinks());
    GV_RETURN_IF_ERROR(listen());
    const auto deadline = Clock::now() + seconds(o.connectTimeoutSeconds);
    startAccept();
    // The lower rank dials: we dial the neighbours above us and accept the ones below.
    for (int n : o.neighbours) {
      if (o.rank < n) {
        GV_ASSIGN_OR_RETURN(tcp::endpoint endpoint, parseEndpoint(o.peers[n]));
        links_[n]->dial(endpoint, deadline);
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
  void expire() override {
    expired_ = true;
    onDeadline();
  }

  std::map<std::string, std::uint64_t> rejected() const override { return rejected_; }

 private:
  static Status checkRanks(const BootstrapOptions& o) {
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
    return Status::ok();
  }

  Status listen() {
    const std::string& address = options_->peers[options_->rank];
    GV_ASSIGN_OR_RETURN(tcp::endpoint self, parseEndpoint(address));
    boost::system::error_code ec;
    acceptor_.open(self.protocol(), ec);
    if (!ec) acceptor_.set_option(tcp::acceptor::reuse_address(true), ec);
    if (!ec) acceptor_.bind(self, ec);
    if (!ec) acceptor_.listen(asio::socket_base::max_listen_connections, ec);
    if (ec) return unavailable("bootstrap: cannot listen on " + address + ": " + ec.message());
    return Status::ok();
  }

  // One link per neighbour, each with its own hello (its `receiver` field names the neighbour).
  // Errors: a hello field too long for the wire (handshake::encodeHello).
  Status makeLinks() {
    for (int n : options_->neighbours) {
      GV_ASSIGN_OR_RETURN(links_[n], makeLink(n));
    }
    return Status::ok();
  }

  // A fresh link to neighbour n with our hello (a fresh nonce with a key; after the bootstrap, the
  // round we train at).
  Result<std::shared_ptr<ControlLink>> makeLink(int n) {
    const BootstrapOptions& o = *options_;
    auto hello = std::make_shared<Hello>();
    hello->sender = o.rank;
    hello->receiver = n;
    hello->incarnation = o.incarnation;
    hello->backend = std::string(data_.backend());
    hello->address = data_.localAddress();
    hello->parts = o.configParts;
    if (o.psk) {
      // Keyed (security::configPartHash): our hello goes to whoever answers or dials before any
      // proof. Protocol versions stay plain: a skew is named with both versions.
      for (ConfigPart& part : hello->parts) {
        if (!part.name.starts_with(handshake::kProtocolPartPrefix))
          part.hash = security::configPartHash(*o.psk, part.name, part.hash);
      }
      hello->nonce = security::randomNonce();  // fresh for every handshake
    }
    hello->buildId = std::string(buildId());
    if (security::aesGcmAvailable()) hello->capabilities |= handshake::kCapabilityAesGcm;
    if (rejoining_ && o.runningRound) hello->runningRound = o.runningRound();
    // With a key the address, build id and round are sealed: nobody learns where our data port
    // is before proving the key.
    GV_ASSIGN_OR_RETURN(std::vector<std::uint8_t> bytes, handshake::encodeHello(*hello, o.psk));
    return std::make_shared<ControlLink>(loop_, n, options_, std::move(hello), std::move(bytes),
                                         [weak = weak_from_this()](ControlLink& l, Status st) {
                                           if (auto self = weak.lock())
                                             self->onHandshake(l, std::move(st));
                                         });
  }

  // An accepted socket until its first frame told us which link it belongs to.
  struct Pending {
    explicit Pending(asio::io_context& io) : socket(io), timer(io) {}
    tcp::socket socket;
    asio::steady_timer timer;
    std::uint8_t header[handshake::kFrameHeaderBytes];
    std::vector<std::uint8_t> body;
    // With a key: the dialer's hello while its proof is awaited, and the transcript.
    std::optional<Hello> hello;
    std::vector<std::uint8_t> helloBytes;
    security::Transcript transcript;
    std::string from;  // the remote address, for the log
    asio::ip::address remote;
    std::uint64_t id = 0;  // in pending_
    void close() {
      boost::system::error_code ignored;
      timer.cancel();
      socket.close(ignored);
    }
  };

  // Accepts until the bootstrap finishes; on EMFILE/ENFILE it pauses (AcceptBackoff) instead of
  // spinning on the connection the kernel keeps queued.
  void startAccept() {
    auto pending = std::make_shared<Pending>(loop_.io());
    acceptor_.async_accept(pending->socket,
                           [self = shared_from_this(), pending](boost::system::error_code ec) {
                             if (!self->accepting()) return;
                             if (ec && isAcceptShortage(ec)) return self->backOff(ec);
                             if (!ec) {
                               self->backoff_.reset();
                               self->readFirstFrame(pending);
                             }
                             self->startAccept();
                           });
  }

  void backOff(boost::system::error_code ec) {
    if (!backoff_.backingOff()) {
      log::warn("bootstrap: accepting on the control port failed (", ec.message(),
                "); backing off");
    }
    acceptTimer_.expires_after(backoff_.next());
    acceptTimer_.async_wait([weak = weak_from_this()](boost::system::error_code tec) {
      auto self = weak.lock();
      if (!tec && self && self->accepting()) self->startAccept();
    });
  }

  // Takes an accepted socket out of pending_ (it was routed to its link, refused or lost).
  // Its deadline timer is cancelled: it would keep the socket's descriptor for connectTimeout.
  void unpend(const std::shared_ptr<Pending>& p) {
    pending_.remove(p->id);
    p->timer.cancel();
  }

  // The dialer's first frame must be its hello; it tells us which link the socket belongs to.
  // At most kMaxPendingAccepts + (neighbours of lower rank) accepted sockets wait to be identified
  // (and, with a key, for their proof); beyond that the oldest is closed, counted as
  // `pending_limit`.
  void readFirstFrame(const std::shared_ptr<Pending>& p) {
    std::shared_ptr<Pending> evicted;
    p->id = pending_.add(p, evicted);
    if (evicted) {
      evicted->hello.reset();  // closed by us, not a failed proof (pendingLost stays quiet)
      evicted->close();
      ++rejected_["pending_limit"];
    }
    boost::system::error_code ec;
    const auto remote = p->socket.remote_endpoint(ec);
    p->from = ec ? std::string("?") : formatEndpoint(remote);
    if (!ec) p->remote = remote.address();
    readPendingFrame(p, [self = shared_from_this(), p] { self->routeAccepted(p); });
  }

  // Reads one frame into p->header/body within connectTimeout, then runs `next`. An oversized
  // frame is refused before allocation; a closed or silent socket is dropped (counted when the
  // peer had started authenticating).
  void readPendingFrame(const std::shared_ptr<Pending>& p, std::function<void()> next) {
    p->timer.expires_after(seconds(options_->connectTimeoutSeconds));
    p->timer.async_wait([p](boost::system::error_code ec) {
      boost::system::error_code ignored;
      if (!ec) p->socket.close(ignored);
    });
    asio::async_read(
        p->socket, asio::buffer(p->header, handshake::kFrameHeaderBytes),
        [self = shared_from_this(), p, next = std::move(next)](boost::system::error_code ec,
                                                               std::size_t) mutable {
          if (!self->accepting()) return;
          if (ec) return self->pendingLost(p, ec);
          const std::size_t len = handshake::decodeFrameHeader(p->header).payloadBytes;
          if (len > self->options_->maxControlFrameBytes) {
            const std::string why = "control frame of " + std::to_string(len) +
                                    " bytes exceeds maxControlFrameBytes " +
                                    std::to_string(self->options_->maxControlFrameBytes);
            if (self->refusedLog_.due()) {
              log::warn("bootstrap: refused a connection from ", p->from, ": ", why,
                        self->refusedLog_.skipped());
            }
            return self->rejectPending(p, why, "too_large");
          }
          p->body.resize(len);
          asio::async_read(
              p->socket, asio::buffer(p->body),
              [self, p, next = std::move(next)](boost::system::error_code ec2, std::size_t) {
                p->timer.cancel();
                if (!self->accepting()) return;
                if (ec2) return self->pendingLost(p, ec2);
                next();
              });
        });
  }

  void pendingLost(const std::shared_ptr<Pending>& p, boost::system::error_code ec) {
    unpend(p);
    if (!p->hello) return p->close();  // a probe that never said who it is
    refuse(p, "auth_failed",
           "closed before proving the key (" + ec.message() +
               "): a different security.key_file there?");
  }

  void routeAccepted(const std::shared_ptr<Pending>& p) {
    if (handshake::decodeFrameHeader(p->header).type != handshake::kHello) {
      return rejectPending(p, "expected a hello first", "not_hello");
    }
    // Routed by the fixed prefix, so that a hello of another protocol version still reaches its
    // link; anything else malformed is refused here.
    const auto prefix = handshake::decodeHelloPrefix(p->body);
    if (!prefix.isOk()) return rejectPending(p, prefix.status().message(), "malformed");
    auto h = handshake::decodeHello(p->body);
    if (!h.isOk() && h.status().code() != ErrorCode::kFailedPrecondition) {
      return rejectPending(p, h.status().message(), "malformed");
    }
    const int sender = prefix->sender;
    if (rejoining_ && sender < options_->rank && isNeighbour(sender) && !links_.count(sender)) {
      // After the bootstrap: a neighbour of lower rank dials again (it restarted, or its
      // connection failed): a fresh link for it, through the same handshake.
      auto link = makeLink(sender);
      if (!link.isOk()) return rejectPending(p, link.status().message(), "malformed");
      links_[sender] = std::move(link).value();
    }
    auto it = links_.find(sender);
    if (it == links_.end() || sender > options_->rank || !it->second->awaitingDialer()) {
      return rejectPending(p,
                           "peer " + std::to_string(sender) +
                               " is not an expected neighbour of peer " +
                               std::to_string(options_->rank),
                           "unexpected_rank");
    }
    if (options_->psk) return authenticate(p, it->second, std::move(h));
    // Without a key nothing proves who sent a hello. A mismatch (control protocol version, other
    // protocol versions, backend, config) ends the bootstrap only when it comes from the host
    // configured for the rank it claims: a real neighbour of another build or config fails fast,
    // naming the part. From any other address it is refused (telling nothing), logged, counted
    // and named at the deadline, and the rank stays open for the real neighbour.
    const Status mismatch =
        h.isOk() ? handshake::compareHellos(it->second->ours(), *h) : h.status();
    if (!mismatch.isOk() && !fromConfiguredHost(*p, sender)) {
      return refuse(p, h.isOk() ? "mismatch" : "version", mismatch.message(), kRefusedText);
    }
    if (!h.isOk()) {  // another control protocol version, from the neighbour's host
      rejectPending(p, h.status().message(), "version");
      if (rejoining_) return dropRejoin(sender, h.status());
      return finish(h.status());
    }
    // The link checks the hello itself (version, config) so both sides report the same mismatch.
    unpend(p);
    it->second->adopt(std::move(p->socket), std::move(p->body));
  }

  // Whether the accepted socket comes from the host in options.peers[rank] (an IP: parseEndpoint).
  bool fromConfiguredHost(const Pending& p, int rank) const {
    const auto configured = parseEndpoint(options_->peers[rank]);
    if (!configured.isOk()) return false;
    auto a = configured->address(), b = p.remote;
    if (a.is_v6() && a.to_v6().is_v4_mapped()) a = a.to_v6().to_v4();
    if (b.is_v6() && b.to_v6().is_v4_mapped()) b = b.to_v6().to_v4();
    return a == b;
  }

  // With a key, nothing from an accepted socket is trusted before it proved the key: a hello of
  // another version, without a nonce, or whose proof fails is refused and counted, and the rank
  // stays open for the real neighbour. We answer with our hello (a fresh nonce) and our proof;
  // the dialer checks it and sends its own.
  void authenticate(const std::shared_ptr<Pending>& p, const std::shared_ptr<ControlLink>& link,
                    Result<Hello> theirs) {
    if (!theirs.isOk()) {  // another protocol version
      return refuse(
          p, "version", theirs.status().message(),
          "control protocol version " + std::to_string(kControlProtocolVersion) + " expected");
    }
    if (!theirs->nonce) {
      return refuse(p, "unauthenticated", "its hello carries no key proof (no security.key_file?)",
                    "authentication required");
    }
    Hello ours = link->ours();
    ours.nonce = security::randomNonce();
    // The round we train at now (as ControlLink::refreshRunningRound for the other paths).
    if (options_->runningRound && options_->runningRound() >= 0)
      ours.runningRound = options_->runningRound();
    auto oursBytes = handshake::encodeHello(ours, options_->psk);
    if (!oursBytes.isOk()) return rejectPending(p, oursBytes.status().message(), "malformed");
    p->transcript = handshake::transcriptOf(*theirs, p->body, ours, *oursBytes);
    p->hello = std::move(theirs).value();
    p->helloBytes = std::move(p->body);
    const security::Proof proof =
        security::handshakeProof(*options_->psk, p->transcript, p->transcript.acceptor);
    auto out = std::make_shared<std::vector<std::uint8_t>>(
        handshake::encodeFrame(handshake::kHello, *oursBytes));
    const auto auth = handshake::encodeFrame(handshake::kAuth, proof);
    out->insert(out->end(), auth.begin(), auth.end());
    asio::async_write(p->socket, asio::buffer(*out),
                      [p, out](boost::system::error_code, std::size_t) {});
    readPendingFrame(p, [self = shared_from_this(), p] { self->onDialerProof(p); });
  }

  void onDialerProof(const std::shared_ptr<Pending>& p) {
    const auto type = handshake::decodeFrameHeader(p->header).type;
    if (type == handshake::kReject) {
      return refuse(p, "auth_failed",
                    "it refused our proof (" + handshake::decodeReject(p->body) +
                        "): a different security.key_file there?");
    }
    if (type != handshake::kAuth ||
        !security::verifyHandshakeProof(*options_->psk, p->transcript, p->transcript.dialer,
                                        p->body)) {
      return refuse(p, "auth_failed", "authentication failed (wrong key proof)",
                    "authentication failed");
    }
    const int sender = p->hello->sender;
    auto it = links_.find(sender);
    if (it == links_.end() || !it->second->awaitingDialer()) {
      // A rank is bound to the first peer that authenticates as it.
      return refuse(p, "duplicate_rank", "peer " + std::to_string(sender) + " already connected",
                    "already connected");
    }
    unpend(p);
    it->second->adopt(std::move(p->socket), std::move(p->helloBytes),
                      security::sessionKey(*options_->psk, p->transcript));
  }

  // Drops an accepted connection without ending the bootstrap: logged with the address and the
  // rank it claimed, counted by `reason`, remembered for the deadline's message. `tell` (optional)
  // is the reject's text: it names nothing of ours.
  void refuse(const std::shared_ptr<Pending>& p, const std::string& reason, const std::string& why,
              const std::string& tell = "") {
    unpend(p);
    const auto prefix = handshake::decodeHelloPrefix(p->hello ? p->helloBytes : p->body);
    const int claimed = prefix.isOk() ? prefix->sender : -1;
    ++rejected_[reason];
    // Anyone who reaches the port can cause this: logged at most once a second (83k lines in 12 s
    // from one client slowed the peer 2.5x), counted in rejected() always.
    if (refusedLog_.due()) {
      log::warn("bootstrap: peer ", options_->rank, " rejected a connection from ", p->from,
                " claiming rank ", claimed, ": ", why, refusedLog_.skipped());
    }
    if (claimed >= 0) rejectedFrom_[claimed] = p->from + ": " + why;
    if (tell.empty()) {
      boost::system::error_code ignored;
      p->socket.close(ignored);
      return;
    }
    sendRejectAndClose(p, tell);
  }

  void sendRejectAndClose(const std::shared_ptr<Pending>& p, const std::string& why) {
    auto frame = std::make_shared<std::vector<std::uint8_t>>(
        handshake::encodeFrame(handshake::kReject, handshake::encodeReject(why)));
    asio::async_write(p->socket, asio::buffer(*frame),
                      [p, frame](boost::system::error_code, std::size_t) {
                        boost::system::error_code ignored;
                        p->socket.close(ignored);
                      });
  }

  void rejectPending(const std::shared_ptr<Pending>& p, const std::string& why,
                     const std::string& reason) {
    unpend(p);
    ++rejected_[reason];
    sendRejectAndClose(p, why);
  }

  void onHandshake(ControlLink& link, Status status) {
    if (rejoining_) return onRejoinHandshake(link, std::move(status));
    if (finished_) return;
    if (!status.isOk() && link.dialing() && options_->onRejoin) {
      // Unreachable until the deadline: the bootstrap may start without it (onDeadline).
      unreachable_[link.peer()] = std::move(status);
      return;
    }
    if (!status.isOk() && link.authenticationFailed() && options_->onRejoin) {
      // Whoever answers at the neighbour's address cannot prove the key: that neighbour is absent
      // (anyone who can occupy one address must not end the run). The bootstrap goes on without
      // it at the deadline and redials it afterwards; the real neighbour joins when it answers.
      noteAuthFailure(link.peer(), status);
      unreachable_[link.peer()] = std::move(status);
      return;
    }
    if (!status.isOk()) return finish(std::move(status));
    if (++ready_ < links_.size()) {
      // This peer rejoins a running training (the neighbour is training already): waiting for
      // the others gains nothing. It starts with the ones connected; the others join when they
      // connect (a handshake under way completes as a rejoin; we redial those of higher rank).
      if (options_->onRejoin && link.theirs().runningRound >= 0) {
        runningNow_ = true;
        onDeadline();
      }
      return;
    }
    // Every neighbour agreed: connect the data backend to each.
    complete({}, Status::ok());
  }

  // Connects the data backend to every neighbour not `missing` and completes. With onRejoin, a
  // neighbour whose data connection fails (it exited right after its handshake: the run ended) is
  // missing too, and joins when it connects. With every neighbour missing the bootstrap fails
  // (`firstMissing`, or that connection's error), unless completeAlone.
  void complete(std::set<int> missing, Status firstMissing) {
    std::vector<Neighbour> out;
    for (int n : options_->neighbours) {
      if (missing.count(n)) continue;
      auto conn = connectData(*links_[n]);
      if (conn.isOk()) {
        out.push_back(std::move(conn).value());
        continue;
      }
      if (!options_->onRejoin) return finish(conn.status());
      log::warn("bootstrap: starting without neighbour ", n, " (", conn.status().message(),
                "); it joins when it connects");
      if (firstMissing.isOk()) firstMissing = conn.status();
      missing.insert(n);
    }
    if (out.empty() && !missing.empty() && !options_->completeAlone) {
      return finish(std::move(firstMissing));
    }
    finish(std::move(out), missing);
  }

  // The neighbour of a handshaken link, with a data connection to the address in its hello.
  Result<Neighbour> connectData(ControlLink& l) {
    const int n = l.peer();
    // With a key the data connection is bound to this handshake: only the neighbour that took
    // part in it can present its token (a stranger claiming its rank is closed unread).
    DataBinding binding;
    if (const auto& key = l.sessionKey()) {
      binding.lower = security::dataBindingToken(*key, true);
      binding.higher = security::dataBindingToken(*key, false);
    }
    auto conn = data_.connectBound(n, l.theirs().address, binding);
    if (!conn.isOk()) {
      return Status(conn.status().code(), "data connection to neighbour " + std::to_string(n) +
                                              ": " + conn.status().message());
    }
    Neighbour out{n, l.theirs().incarnation, std::move(conn).value(), l.shared_from_this(),
                  l.sessionKey()};
    out.runningRound = l.theirs().runningRound;
    out.cipher = handshake::negotiatedCipher(l.ours(), l.theirs());
    return out;
  }

  bool isNeighbour(int n) const {
    const auto& ns = options_->neighbours;
    return std::find(ns.begin(), ns.end(), n) != ns.end();
  }

  bool accepting() const { return !finished_ || rejoining_; }

  // After the bootstrap: a rejoin's handshake ended. Agreed: the neighbour gets a new data
  // connection and is handed over (onRejoin). Failed: nothing changes; a redial tries again.
  void onRejoinHandshake(ControlLink& link, Status status) {
    const int n = link.peer();
    auto self = link.shared_from_this();
    if (auto it = links_.find(n); it != links_.end() && it->second.get() == &link) links_.erase(it);
    if (!status.isOk()) {
      if (link.authenticationFailed()) noteAuthFailure(n, status);
      return dropRejoin(n, std::move(status));
    }
    auto neighbour = connectData(link);
    if (!neighbour.isOk()) {
      link.close();
      return dropRejoin(n, neighbour.status());
    }
    redialing_.erase(n);
    link.startHeartbeats();
    log::info("bootstrap: neighbour ", n, " connected again (incarnation ", neighbour->incarnation,
              ")");
    options_->onRejoin(std::move(neighbour).value());
  }

  // A rejoin that did not complete: logged; when we are the dialing side and still want the
  // neighbour, dial again after a pause.
  void dropRejoin(int n, Status why) {
    if (auto it = links_.find(n); it != links_.end() && !it->second->handshakeDone()) {
      if (!it->second->dialing() && !it->second->awaitingDialer()) links_.erase(it);
    }
    log::debug("bootstrap: rejoin of neighbour ", n, " failed: ", why.message());
    if (!redialing_.count(n) || !rejoining_) return;
    auto timer = std::make_shared<asio::steady_timer>(loop_.io());
    timer->expires_after(std::chrono::milliseconds(500));
    timer->async_wait([weak = weak_from_this(), n, timer](boost::system::error_code ec) {
      auto self = weak.lock();
      if (ec || !self || !self->rejoining_ || !self->redialing_.count(n)) return;
      self->dialAgain(n);
    });
  }

  // A handshake (the bootstrap's, or a redial's) whose other end did not prove the key: counted,
  // and logged at the first and then once a minute (a redial every half second would flood the
  // log).
  void noteAuthFailure(int n, const Status& why) {
    const auto now = Clock::now();
    const std::uint64_t count = ++authFailures_[n];
    auto& last = authFailureLogged_[n];
    if (count > 1 && now - last < std::chrono::seconds(60)) return;
    last = now;
    log::warn("bootstrap: ", why.message(), "; neighbour ", n,
              " is treated as absent: the run goes on without it, and it joins when it "
              "authenticates (",
              count, count == 1 ? " failed authentication" : " failed authentications", ")");
  }

  void dialAgain(int n) {
    if (links_.count(n)) return;  // a handshake for it is under way
    auto endpoint = parseEndpoint(options_->peers[n]);
    auto link = makeLink(n);
    if (!endpoint.isOk() || !link.isOk()) {
      log::warn("bootstrap: cannot redial neighbour ", n, ": ",
                (endpoint.isOk() ? link.status() : endpoint.status()).message());
      redialing_.erase(n);
      return;
    }
    links_[n] = *link;
    (*link)->dial(*endpoint, Clock::now() + seconds(options_->connectTimeoutSeconds));
  }

 public:
  void redial(int n) override {
    if (!rejoining_ || n <= options_->rank || !isNeighbour(n) || redialing_.count(n)) return;
    redialing_.insert(n);
    dialAgain(n);
  }

  void stopRedial(int n) override {
    redialing_.erase(n);
    if (auto it = links_.find(n); it != links_.end() && it->second->dialing()) {
      it->second->close();
      links_.erase(it);
    }
  }

  void close() override {
    if (!rejoining_) return;
    rejoining_ = false;
    redialing_.clear();
    boost::system::error_code ec;
    acceptor_.close(ec);
    acceptTimer_.cancel();
    pending_.forEach([](Pending& p) { p.close(); });
    pending_.clear();
    for (auto& [n, l] : links_) l->close();
    links_.clear();
  }

 private:
  // Every neighbour that has not completed its handshake by now is missing. Without onRejoin, or
  // when every neighbour is missing, the bootstrap fails naming the first; otherwise it completes
  // with the others, and the missing ones join when they connect (a rejoin: they dial us, or we
  // redial them).
  void onDeadline() {
    if (finished_) return;
    std::set<int> missing;
    Status first;
    for (int n : options_->neighbours) {
      const auto& l = links_[n];
      if (l->handshakeDone()) continue;
      Status why;
      if (expired_) {
        why = deadlineExceeded("neighbour " + std::to_string(n) +
                               " not waited for (told that it will not come)");
      } else if (runningNow_) {
        why = unavailable("neighbour " + std::to_string(n) +
                          " not connected yet, and the run goes on without waiting");
      } else if (auto u = unreachable_.find(n); u != unreachable_.end()) {
        why = u->second;
      } else if (l->dialing()) {
        why = l->unreachable();
      } else {
        const std::string what = options_->rank < n ? " did not complete the handshake within "
                                                    : " did not connect within ";
        std::string rejectedNote;
        if (auto r = rejectedFrom_.find(n); r != rejectedFrom_.end()) {
          rejectedNote = "; a connection claiming to be it was rejected (" + r->second + ")";
        }
        why =
            deadlineExceeded("neighbour " + std::to_string(n) + " (" + options_->peers[n] + ")" +
                             what + formatSeconds(options_->connectTimeoutSeconds) + rejectedNote);
      }
      if (first.isOk()) first = why;
      missing.insert(n);
      if (options_->onRejoin) {
        log::warn("bootstrap: starting without neighbour ", n, " (", why.message(),
                  "); it joins when it connects");
      }
    }
    if (missing.empty()) return;
    if (!options_->onRejoin) return finish(std::move(first));
    complete(std::move(missing), std::move(first));
  }

  // `missing` (with a result): neighbours the bootstrap completed without (onDeadline).
  void finish(Result<std::vector<Neighbour>> result, const std::set<int>& missing = {}) {
    if (finished_) return;
    finished_ = true;
    deadline_.cancel();
    // With onRejoin the listener stays open for the whole run (neighbours that come back).
    rejoining_ = result.isOk() && options_->onRejoin != nullptr;
    if (rejoining_) {
      // From now on only a neighbour that comes back dials us: a tighter bound.
      pending_.setLimit(kMaxPendingRejoins + lowerNeighbours(*options_), [this](Pending& p) {
        p.hello.reset();
        p.close();
        ++rejected_["pending_limit"];
      });
    } else {
      boost::system::error_code ec;
      acceptor_.close(ec);
      acceptTimer_.cancel();
      // Connections that never identified themselves hold nothing after the bootstrap.
      pending_.forEach([](Pending& p) { p.close(); });
      pending_.clear();
    }
    if (result.isOk()) {
      for (auto& [n, l] : links_) {
        if (!missing.count(n)) l->startHeartbeats();
      }
    } else {
      for (auto& [n, l] : links_) l->closeAfterFlush();
    }
    // A missing neighbour's link stays while it waits for the neighbour's dial or is in the middle
    // of a handshake (it then completes as a rejoin); one still dialing is replaced by redials.
    for (auto it = links_.begin(); it != links_.end();) {
      const bool keep =
          rejoining_ && missing.count(it->first) &&
          (it->second->awaitingDialer() || it->second->state() == ControlLink::State::kHandshaking);
      if (keep) {
        ++it;
        continue;
      }
      if (missing.count(it->first)) it->second->close();
      it = links_.erase(it);
    }
    for (int n : missing) {
      if (rejoining_ && n > options_->rank) redial(n);
    }
    loop_.post([done = std::move(done_), r = std::move(result)]() mutable { done(std::move(r)); });
  }

  Loop& loop_;
  // Shared with the links (they keep a reference to it after the bootstrap object is gone).
  std::shared_ptr<const BootstrapOptions> options_;
  Context& data_;
  BootstrapCallback done_;
  tcp::acceptor acceptor_;
  asio::steady_timer acceptTimer_;  // the EMFILE back-off
  AcceptBackoff backoff_;
  PendingAccepts<Pending> pending_;  // accepted, not yet routed to a link (accept_bounds.h)
  asio::steady_timer deadline_;
  std::map<int, std::shared_ptr<ControlLink>> links_;
  std::size_t ready_ = 0;
  bool finished_ = false;
  bool expired_ = false;  // expire(): the deadline was declared passed early
  // Handshakes with a neighbour's address that failed authentication, and when one was logged.
  std::map<int, std::uint64_t> authFailures_;
  std::map<int, Clock::time_point> authFailureLogged_;
  bool runningNow_ = false;  // a neighbour's hello said the run goes on (onHandshake)
  // After a successful bootstrap with onRejoin: accepting rejoins, and the neighbours we redial.
  bool rejoining_ = false;
  std::set<int> redialing_;
  std::map<int, Status> unreachable_;  // before the deadline: neighbours we could not reach
  std::map<std::string, std::uint64_t> rejected_;  // rejected(): by reason
  log::Throttle refusedLog_;                       // refused connections' log lines
  std::map<int, std::string> rejectedFrom_;        // claimed rank -> the last refusal, for errors
};

}  // namespace

std::string_view buildId() { return GRAPEVINE_BUILD_ID; }

Result<std::shared_ptr<Bootstrap>> Bootstrap::start(Loop& loop, BootstrapOptions options,
                                                    Context& data, BootstrapCallback done) {
  auto b = std::make_shared<BootstrapImpl>(loop, std::move(options), data, std::move(done));
  GV_RETURN_IF_ERROR(b->init());
  return std::shared_ptr<Bootstrap>(b);
}

}  // namespace grapevine::transport
