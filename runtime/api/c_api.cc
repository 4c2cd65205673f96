// The C API (include/grapevine/grapevine.h) over grapevine::Peer. Every entry point runs its body
// through guard(), which turns any exception into a status and this thread's last error message:
// nothing thrown by the C++ side (or by the standard library) crosses the C boundary.
#include <algorithm>
#include <cstdint>
#include <deque>
#include <exception>
#include <memory>
#include <new>
#include <string>
#include <utility>
#include <vector>

#include "grapevine/grapevine.h"
#include "grapevine/grapevine.hpp"

struct grapevine_options {
  grapevine::Options options;
};

struct grapevine_peer {
  std::unique_ptr<grapevine::Peer> peer;
  // Strings handed out through the C API live here (their lifetimes are stated in the header).
  std::string outDir;
  std::string configYaml;
  std::deque<grapevine::Event> pendingEvents;  // polled, not yet returned (capacity was short)
  std::vector<std::string> eventMessages;      // of the events returned by the last poll
};

namespace grapevine::api {
namespace {

static_assert(GRAPEVINE_INVALID_ARGUMENT == static_cast<int>(Error::Code::kInvalidArgument));
static_assert(GRAPEVINE_NOT_FOUND == static_cast<int>(Error::Code::kNotFound));
static_assert(GRAPEVINE_FAILED_PRECONDITION == static_cast<int>(Error::Code::kFailedPrecondition));
static_assert(GRAPEVINE_UNAVAILABLE == static_cast<int>(Error::Code::kUnavailable));
static_assert(GRAPEVINE_ABORTED == static_cast<int>(Error::Code::kAborted));
static_assert(GRAPEVINE_INTERNAL == static_cast<int>(Error::Code::kInternal));
static_assert(GRAPEVINE_EVENT_SUSPECT == static_cast<int>(EventKind::kSuspect));
static_assert(GRAPEVINE_EVENT_DEAD == static_cast<int>(EventKind::kDead));
static_assert(GRAPEVINE_EVENT_DIVERGED == static_cast<int>(EventKind::kDiverged));
static_assert(GRAPEVINE_EVENT_REVIVED == static_cast<int>(EventKind::kRevived));

thread_local std::string lastError;

grapevine_status fail(grapevine_status status, const char* message) noexcept {
  try {
    lastError = message;
  } catch (...) {
    // Out of memory for the message itself: keep the previous one; the status still tells.
  }
  return status;
}

// Runs `body` (which returns void or throws); maps what it throws to a status.
template <typename Body>
grapevine_status guard(Body&& body) noexcept {
  try {
    body();
    return GRAPEVINE_OK;
  } catch (const Error& e) {
    return fail(static_cast<grapevine_status>(e.code()), e.what());
  } catch (const std::bad_alloc&) {
    return fail(GRAPEVINE_INTERNAL, "out of memory");
  } catch (const std::exception& e) {
    return fail(GRAPEVINE_INTERNAL, e.what());
  } catch (...) {
    return fail(GRAPEVINE_INTERNAL, "unknown exception");
  }
}

// A null handle or output pointer is the caller's bug: say which argument of which call.
grapevine_status nullArgument(const char* function, const char* argument) noexcept {
  try {
    lastError = std::string(function) + ": " + argument + " is NULL";
  } catch (...) {
  }
  return GRAPEVINE_INVALID_ARGUMENT;
}

#define GV_C_REQUIRE(arg)                                                      \
  do {                                                                         \
    if ((arg) == nullptr) return grapevine::api::nullArgument(__func__, #arg); \
  } while (0)

std::vector<const float*> gradientList(const float* const* grads, std::size_t count) {
  if (grads == nullptr && count > 0) {
    throw Error(Error::Code::kInvalidArgument,
                "grapevine_peer_step: grads is NULL, count " + std::to_string(count));
  }
  return count == 0 ? std::vector<const float*>{} : std::vector<const float*>(grads, grads + count);
}

}  // namespace
}  // namespace grapevine::api

using grapevine::api::guard;

extern "C" {

const char* grapevine_last_error(void) { return grapevine::api::lastError.c_str(); }

const char* grapevine_status_name(grapevine_status status) {
  switch (status) {
    case GRAPEVINE_OK:
      return "ok";
    case GRAPEVINE_INVALID_ARGUMENT:
      return "invalid argument";
    case GRAPEVINE_NOT_FOUND:
      return "not found";
    case GRAPEVINE_FAILED_PRECONDITION:
      return "failed precondition";
    case GRAPEVINE_UNAVAILABLE:
      return "unavailable";
    case GRAPEVINE_ABORTED:
      return "aborted";
    case GRAPEVINE_INTERNAL:
      return "internal";
  }
  return "unknown";
}

int grapevine_api_version(void) { return GRAPEVINE_C_API_VERSION; }

// ---- Options ----

grapevine_status grapevine_options_create(grapevine_options** out) {
  GV_C_REQUIRE(out);
  return guard([&] { *out = new grapevine_options(); });
}

void grapevine_options_destroy(grapevine_options* options) { delete options; }

grapevine_status grapevine_options_set_config_path(grapevine_options* options, const char* path) {
  GV_C_REQUIRE(options);
  return guard([&] { options->options.configPath = path ? path : ""; });
}

grapevine_status grapevine_options_set_config_text(grapevine_options* options, const char* yaml) {
  GV_C_REQUIRE(options);
  return guard([&] { options->options.configText = yaml ? yaml : ""; });
}

grapevine_status grapevine_options_add_override(grapevine_options* options, const char* key_value) {
  GV_C_REQUIRE(options);
  GV_C_REQUIRE(key_value);
  return guard([&] { options->options.overrides.emplace_back(key_value); });
}

grapevine_status grapevine_options_set_rank(grapevine_options* options, int rank) {
  GV_C_REQUIRE(options);
  options->options.rank = rank;
  return GRAPEVINE_OK;
}

grapevine_status grapevine_options_set_out_dir(grapevine_options* options, const char* dir) {
  GV_C_REQUIRE(options);
  return guard([&] { options->options.outDir = dir ? dir : ""; });
}

grapevine_status grapevine_options_set_incarnation(grapevine_options* options,
                                                   uint32_t incarnation) {
  GV_C_REQUIRE(options);
  options->options.incarnation = incarnation;
  return GRAPEVINE_OK;
}

grapevine_status grapevine_options_set_resume(grapevine_options* options, int resume) {
  GV_C_REQUIRE(options);
  options->options.resume = resume != 0;
  return GRAPEVINE_OK;
}

// ---- Peer ----

grapevine_status grapevine_peer_create(const grapevine_options* options, grapevine_peer** out) {
  GV_C_REQUIRE(options);
  GV_C_REQUIRE(out);
  return guard([&] {
    auto handle = std::make_unique<grapevine_peer>();
    handle->peer = std::make_unique<grapevine::Peer>(options->options);
    handle->outDir = handle->peer->outDir();
    handle->configYaml = handle->peer->configYaml();
    *out = handle.release();
  });
}

void grapevine_peer_destroy(grapevine_peer* peer) {
  // ~Peer never throws (grapevine.hpp); the handle's own members do not either.
  delete peer;
}

grapevine_status grapevine_peer_rank(const grapevine_peer* peer, int* out) {
  GV_C_REQUIRE(peer);
  GV_C_REQUIRE(out);
  return guard([&] { *out = peer->peer->rank(); });
}

grapevine_status grapevine_peer_world_size(const grapevine_peer* peer, int* out) {
  GV_C_REQUIRE(peer);
  GV_C_REQUIRE(out);
  return guard([&] { *out = peer->peer->worldSize(); });
}

grapevine_status grapevine_peer_planned_rounds(const grapevine_peer* peer, int64_t* out) {
  GV_C_REQUIRE(peer);
  GV_C_REQUIRE(out);
  return guard([&] { *out = peer->peer->plannedRounds(); });
}

grapevine_status grapevine_peer_out_dir(const grapevine_peer* peer, const char** out) {
  GV_C_REQUIRE(peer);
  GV_C_REQUIRE(out);
  *out = peer->outDir.c_str();
  return GRAPEVINE_OK;
}

grapevine_status grapevine_peer_config_yaml(const grapevine_peer* peer, const char** out) {
  GV_C_REQUIRE(peer);
  GV_C_REQUIRE(out);
  *out = peer->configYaml.c_str();
  return GRAPEVINE_OK;
}

grapevine_status grapevine_peer_add_tensor(grapevine_peer* peer, const char* name, float* data,
                                           size_t count) {
  GV_C_REQUIRE(peer);
  GV_C_REQUIRE(name);
  return guard([&] { peer->peer->addTensor(name, data, count); });
}

grapevine_status grapevine_peer_parameter_count(const grapevine_peer* peer, size_t* out) {
  GV_C_REQUIRE(peer);
  GV_C_REQUIRE(out);
  return guard([&] { *out = peer->peer->parameterCount(); });
}

grapevine_status grapevine_peer_start(grapevine_peer* peer) {
  GV_C_REQUIRE(peer);
  return guard([&] { peer->peer->start(); });
}

grapevine_status grapevine_peer_bind(grapevine_peer* peer, const char* name, float** out) {
  GV_C_REQUIRE(peer);
  GV_C_REQUIRE(name);
  GV_C_REQUIRE(out);
  return guard([&] { *out = peer->peer->bind(name); });
}

grapevine_status grapevine_peer_step(grapevine_peer* peer, const float* const* grads, size_t count,
                                     double loss) {
  GV_C_REQUIRE(peer);
  return guard([&] { peer->peer->step(grapevine::api::gradientList(grads, count), loss); });
}

grapevine_status grapevine_peer_mix(grapevine_peer* peer, double loss) {
  GV_C_REQUIRE(peer);
  return guard([&] { peer->peer->mix(loss); });
}

grapevine_status grapevine_peer_start_step(grapevine_peer* peer, const float* const* grads,
                                           size_t count, double loss) {
  GV_C_REQUIRE(peer);
  return guard([&] { peer->peer->startStep(grapevine::api::gradientList(grads, count), loss); });
}

grapevine_status grapevine_peer_start_mix(grapevine_peer* peer, double loss) {
  GV_C_REQUIRE(peer);
  return guard([&] { peer->peer->startMix(loss); });
}

grapevine_status grapevine_peer_wait(grapevine_peer* peer) {
  GV_C_REQUIRE(peer);
  return guard([&] { peer->peer->wait(); });
}

grapevine_status grapevine_peer_report(grapevine_peer* peer, const char* const* names,
                                       const double* values, size_t count) {
  GV_C_REQUIRE(peer);
  if (count > 0) {
    GV_C_REQUIRE(names);
    GV_C_REQUIRE(values);
  }
  return guard([&] {
    std::vector<std::pair<std::string, double>> metrics;
    metrics.reserve(count);
    for (std::size_t k = 0; k < count; ++k) {
      if (names[k] == nullptr) {
        throw grapevine::Error(grapevine::Error::Code::kInvalidArgument,
                               "grapevine_peer_report: names[" + std::to_string(k) + "] is NULL");
      }
      metrics.emplace_back(names[k], values[k]);
    }
    peer->peer->report(metrics);
  });
}

grapevine_status grapevine_peer_poll_events(grapevine_peer* peer, grapevine_event* events,
                                            size_t capacity, size_t* count) {
  GV_C_REQUIRE(peer);
  GV_C_REQUIRE(count);
  if (capacity > 0) GV_C_REQUIRE(events);
  return guard([&] {
    for (grapevine::Event& e : peer->peer->pollEvents())
      peer->pendingEvents.push_back(std::move(e));
    // Messages of the previous poll may be released now (the header's lifetime rule).
    std::vector<std::string> messages;
    const std::size_t n = std::min(capacity, peer->pendingEvents.size());
    messages.reserve(n);
    for (std::size_t k = 0; k < n; ++k) messages.push_back(peer->pendingEvents[k].message);
    // Nothing below allocates or throws: the events leave the queue only once they are delivered.
    peer->eventMessages = std::move(messages);
    for (std::size_t k = 0; k < n; ++k) {
      const grapevine::Event& e = peer->pendingEvents.front();
      events[k].kind = static_cast<grapevine_event_kind>(e.kind);
      events[k].peer = e.peer;
      events[k].round = e.round;
      events[k].message = peer->eventMessages[k].c_str();
      peer->pendingEvents.pop_front();
    }
    *count = n;
  });
}

grapevine_status grapevine_peer_stats(const grapevine_peer* peer, grapevine_stats* out) {
  GV_C_REQUIRE(peer);
  GV_C_REQUIRE(out);
  return guard([&] {
    const grapevine::Stats s = peer->peer->stats();
    grapevine_stats c{};
    c.rounds = s.rounds;
    c.bytes_sent = s.bytesSent;
    c.bytes_received = s.bytesReceived;
    c.bytes_dense_equivalent = s.bytesDenseEquivalent;
    c.dropped_frames = s.droppedFrames;
    c.suspect_rounds = s.suspectRounds;
    c.neighbours = s.neighbours;
    c.live_neighbours = s.liveNeighbours;
    c.consensus_step = s.consensusStep;
    c.lr = s.lr;
    c.loss = s.loss;
    *out = c;
  });
}

grapevine_status grapevine_peer_finalize(grapevine_peer* peer, int average) {
  GV_C_REQUIRE(peer);
  return guard([&] { peer->peer->finalize(average != 0); });
}

}  // extern "C"
