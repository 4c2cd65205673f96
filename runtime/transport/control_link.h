// One bootstrap control connection to one neighbour: dialing with backoff (the lower rank), the
// handshake (hellos cross, each side compares), then, once the bootstrap hands it out, heartbeats,
// liveness events and small control messages until it closes. The bootstrap (bootstrap.cc) decides
// who dials whom and collects the links; the bytes are handshake.h's.
//
// State: one enum that only moves forward (like Gloo's tcp::Pair). A backwards transition is a bug
// and aborts in every build type:
//
//   kIdle --dial()--> kDialing --connected--> kHandshaking --their hello agrees--> kHandshaken
//   kIdle --adopt()-----------------------> kHandshaking
//   kHandshaken --startHeartbeats()--> kConnected
//
// With a pre-shared key (BootstrapOptions::psk) the dialer stays in kHandshaking after the
// acceptor's hello until the acceptor's proof verified; only then does it compare the hellos, send
// its own proof and move on. The accepting side's proofs are exchanged by the bootstrap before
// adopt() (bootstrap.cc), so an adopted socket is already authenticated.
//   any --> kClosing (flush the queued reject, then close) --> kClosed
//   any --> kClosed
//
// Thread: everything runs on the Loop thread: every method below is called there (the bootstrap
// runs there; a ControlChannel's user calls send()/close() there, or while no thread runs the
// loop), and every Asio completion and callback (HandshakeDone, onEvent, onMessage) runs there,
// never inline in the method that caused it except where a method says so.
#pragma once

#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "runtime/common/log.h"
#include "runtime/common/status.h"
#include "runtime/transport/bootstrap.h"
#include "runtime/transport/handshake.h"
#include "runtime/transport/handshake_check.h"
#include "runtime/transport/loop.h"

namespace grapevine::transport {

// How long one connect attempt of a dial waits for an answer before a fresh socket dials again:
// two SYNs (the kernel resends one after 1 s), a round trip of up to a second.
inline constexpr double kConnectAttemptSeconds = 2.0;

// "1.5 s": how the bootstrap's messages print durations.
std::string formatSeconds(double seconds);

class ControlLink : public ControlChannel, public std::enable_shared_from_this<ControlLink> {
 public:
  enum class State : std::uint8_t {
    kIdle,         // created; the accepting side waits here for the dialer's socket (adopt)
    kDialing,      // connect attempts with capped backoff and jitter until the deadline
    kHandshaking,  // socket open, our hello queued, waiting for theirs
    kHandshaken,   // their hello agreed with ours; waiting for the bootstrap to hand us out
    kConnected,    // handed out: heartbeats, liveness events, user messages
    kClosing,      // writing what is queued (a reject), then closing; reads nothing more
    kClosed,
  };
  using Clock = std::chrono::steady_clock;
  // Runs at most once, on the Loop thread: ok when their hello agreed, else why the handshake
  // failed. Not called after shutdown()/closeAfterFlush()/startHeartbeats().
  using HandshakeDone = std::function<void(ControlLink&, Status)>;

  // `ours` is our hello to this peer (its receiver field names it) and `oursEncoded` its bytes.
  ControlLink(Loop& loop, int peer, std::shared_ptr<const BootstrapOptions> options,
              std::shared_ptr<const handshake::Hello> ours, std::vector<std::uint8_t> oursEncoded,
              HandshakeDone onHandshake);

  // --- for the bootstrap (Loop thread)
  // ------------------------------------------------------------

  // kIdle -> kDialing: connects to `endpoint`, retrying until `deadline` (the last attempt is made
  // at the deadline itself); then HandshakeDone gets unreachable(). Non-blocking.
  void dial(boost::asio::ip::tcp::endpoint endpoint, Clock::time_point deadline);
  // kIdle -> kHandshaking: an accepted socket whose first frame, the dialer's hello, was already
  // read. Answers with our hello and checks theirs; HandshakeDone may run inline here. With
  // `sessionKey` the bootstrap has already authenticated the socket and sent our hello and proof.
  void adopt(boost::asio::ip::tcp::socket socket, std::vector<std::uint8_t> hello,
             std::optional<security::Key> sessionKey = std::nullopt);
  // kHandshaken -> kConnected: starts liveness events once the bootstrap handed the channel to the
  // caller. (Our heartbeats are sent from the handshake on, so that a neighbour whose bootstrap
  // ended first does not count us silent while we still wait for another neighbour.) No effect on a
  // link that already closed.
  void startHeartbeats();
  // Closes once the queued frames (a reject) are written, so that the peer gets to read why.
  // Reports nothing. Idempotent.
  void closeAfterFlush();

  State state() const { return state_; }
  bool awaitingDialer() const { return state_ == State::kIdle; }
  bool dialing() const { return state_ == State::kDialing; }
  // The handshake failed because the other end did not prove the key (another key, none, or not a
  // peer of this run): for the bootstrap an absent neighbour, not a fatal error.
  bool authenticationFailed() const { return authFailed_; }
  // True once their hello agreed with ours; stays true after a close.
  bool handshakeDone() const { return theirs_.has_value(); }
  // Their hello; only when handshakeDone().
  const handshake::Hello& theirs() const { return *theirs_; }
  // Our hello to this peer (nonce and all, as the dialer sends it).
  const handshake::Hello& ours() const { return *ours_; }
  // The edge's session key; set once an authenticated handshake is done.
  const std::optional<security::Key>& sessionKey() const { return sessionKey_; }
  // With a key: frames after the handshake dropped because their seal did not verify.
  std::uint64_t droppedFrames() const { return droppedFrames_; }
  // "neighbour 1 at 10.0.0.2:7000 unreachable for 10.0 s: Connection refused (12 attempts)"
  Status unreachable() const;

  // --- ControlChannel (Loop thread)
  // ---------------------------------------------------------------

  int peer() const override { return peer_; }
  Status send(std::uint16_t type, std::span<const std::uint8_t> payload) override;
  // Any state -> kClosed at once; reports nothing. Idempotent.
  void close() override { shutdown(); }
  void heardFrom() override;

 private:
  void moveTo(State next);  // forward only; aborts otherwise
  bool socketOpen() const { return state_ >= State::kHandshaking && state_ < State::kClosed; }

  void attemptConnect();
  void retryConnect();  // after a failed attempt: backoff, then the next one, or unreachable()
  void handshakeFailed(Status status);
  void queue(std::uint16_t type, std::span<const std::uint8_t> payload);
  void writeNext();
  void readFrame();
  void onFrame(std::uint16_t type, std::span<const std::uint8_t> body);
  void onHandshakeFrame(std::uint16_t type, std::span<const std::uint8_t> body);
  void handshakeAgreed(handshake::Hello theirs);
  // `tell` (when tellPeer): the reject's text; empty: the status message.
  void protocolError(Status status, bool tellPeer, const std::string& tell = "");
  void lost(const std::string& why);
  void shutdown();
  // Something authentic came from the neighbour: silence ends (kHeartbeatsResumed after a miss).
  void noteHeard();
  void emit(ControlEventKind kind, double silent, std::string message);
  void tick();

  Loop& loop_;
  const int peer_;
  std::shared_ptr<const BootstrapOptions> optionsHolder_;  // shared with the bootstrap and links
  const BootstrapOptions& options_;
  std::shared_ptr<const handshake::Hello> ours_;
  std::vector<std::uint8_t> oursEncoded_;
  // Right before our hello goes out: the round we train at now (BootstrapOptions::runningRound),
  // not the one of when the link was made (a link made before the first round, or long before the
  // neighbour came, would tell it that the run has not started).
  void refreshRunningRound();
  HandshakeDone onHandshake_;
  State state_ = State::kIdle;
  boost::asio::ip::tcp::socket socket_;
  boost::asio::steady_timer timer_;  // connect backoff, then the heartbeat interval

  // Dialing.
  std::mt19937_64 rng_;
  boost::asio::ip::tcp::endpoint endpoint_;
  Clock::time_point deadline_{};
  int attempts_ = 0;
  int attemptTimedOut_ = 0;  // the attempt the attempt timer gave up on
  std::string lastError_;

  // Frames out: one async_write at a time, in order.
  std::deque<std::vector<std::uint8_t>> out_;
  bool writing_ = false;
  // Frames in.
  std::uint8_t header_[handshake::kFrameHeaderBytes];
  std::vector<std::uint8_t> body_;
  std::optional<handshake::Hello> theirs_;
  // The handshake frames' checks (handshake_check.h), and the edge's session key once it is done
  // (the acceptor's: set by adopt(), from the bootstrap's check of the dialer's proof).
  HandshakeCheck check_;
  std::optional<security::Key> sessionKey_;
  // With a key, after the handshake: the key sealing control frames, and the frames sealed by us
  // and verified from them so far (each side's nonce count).
  std::optional<security::Key> controlKey_;
  std::uint64_t sealedOut_ = 0;
  std::uint64_t sealedIn_ = 0;
  std::uint64_t droppedFrames_ = 0;  // frames after the handshake whose seal did not verify
  log::Throttle droppedLog_;         // their log lines
  // Frames refused since the last one that verified (tick() closes a link that only gets those).
  std::uint64_t unverifiedSinceHeard_ = 0;
  Clock::time_point lastVerified_ = Clock::now();  // the last sealed frame that verified
  // How many counts past the next one a sealed frame may carry (frames lost to alteration).
  static constexpr std::uint64_t kSealWindow = 8;

  // Liveness (kConnected).
  Clock::time_point lastHeard_ = Clock::now();
  bool authFailed_ = false;  // authenticationFailed()
  bool missed_ = false;      // kMissedHeartbeats raised, kHeartbeatsResumed not yet
};

}  // namespace grapevine::transport
