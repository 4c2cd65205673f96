/* Grapevine's C API (C99): the C++ API of grapevine.hpp behind opaque handles, for C programs and
 * for other languages' foreign-function interfaces.
 *
 *   grapevine_options* o = NULL;
 *   grapevine_peer* peer = NULL;
 *   grapevine_options_create(&o);
 *   grapevine_options_set_config_path(o, "run.yaml");   // the same YAML as `grapevine launch`
 *   if (grapevine_peer_create(o, &peer) != GRAPEVINE_OK) {
 *     fprintf(stderr, "%s\n", grapevine_last_error());
 *   }
 *   grapevine_options_destroy(o);                       // the peer keeps what it needs
 *   grapevine_peer_add_tensor(peer, "w", w, n);         // every parameter tensor, fp32
 *   grapevine_peer_start(peer);                         // connects; all start from the lowest rank
 *   grapevine_peer_planned_rounds(peer, &rounds);
 *   for (int64_t t = 0; t < rounds; ++t) {
 *     double loss = compute_gradient(w, g);             // at the current values of w
 *     const float* grads[1] = {g};
 *     grapevine_peer_step(peer, grads, 1, loss);        // optimizer step + one gossip round
 *   }
 *   grapevine_peer_finalize(peer, 1);                   // every live peer ends with the average
 *   grapevine_peer_destroy(peer);
 *
 * Contracts (the same as grapevine.hpp's, see there and docs/api.md for what each call does):
 *   - Every call but the destroy functions, grapevine_last_error() and grapevine_status_name()
 *     returns a grapevine_status; GRAPEVINE_OK is 0 and the other values equal the C++
 *     grapevine::Error::Code's. No C++ exception ever crosses this boundary.
 *   - On failure, grapevine_last_error() returns the message of this thread's last failed call
 *     (successful calls leave it unchanged). Output arguments are written only on success.
 *   - A handle is used from one thread at a time. Different handles may be used from different
 *     threads. Strings returned through the API belong to the handle (see each call).
 *   - Memory registered with grapevine_peer_add_tensor() stays the caller's; it must stay valid
 *     until grapevine_peer_finalize() (or destroy) returns.
 */
#ifndef GRAPEVINE_GRAPEVINE_H_
#define GRAPEVINE_GRAPEVINE_H_

#include <stddef.h>
#include <stdint.h>

#if defined(_WIN32)
#define GRAPEVINE_C_EXPORT
#else
#define GRAPEVINE_C_EXPORT __attribute__((visibility("default")))
#endif

/* Bumped when a call or a struct of this header changes. */
#define GRAPEVINE_C_API_VERSION 1

#ifdef __cplusplus
extern "C" {
#endif

/* What went wrong; the values equal grapevine::Error::Code's (grapevine.hpp). */
typedef enum grapevine_status {
  GRAPEVINE_OK = 0,
  GRAPEVINE_INVALID_ARGUMENT = 1,    /* a bad config, override, tensor, rank or argument */
  GRAPEVINE_NOT_FOUND = 2,           /* a file or tensor that does not exist */
  GRAPEVINE_FAILED_PRECONDITION = 3, /* a call in the wrong state (e.g. step before start) */
  GRAPEVINE_UNAVAILABLE = 4,         /* the network: a bootstrap that failed, a port in use */
  GRAPEVINE_ABORTED = 5,             /* training diverged (here or at a peer that told us) */
  GRAPEVINE_INTERNAL = 6             /* a bug (or out of memory): please report it */
} grapevine_status;

/* The message of this thread's last failed call ("" when none failed yet). Valid until the next
 * failed call on this thread. Never NULL. */
GRAPEVINE_C_EXPORT const char* grapevine_last_error(void);
/* "ok", "invalid argument", ... ("unknown" for a value outside the enum). Never NULL. */
GRAPEVINE_C_EXPORT const char* grapevine_status_name(grapevine_status status);
/* GRAPEVINE_C_API_VERSION of the library actually loaded. */
GRAPEVINE_C_EXPORT int grapevine_api_version(void);

/* ---- Options: how to open a peer (grapevine::Options) ---- */

typedef struct grapevine_options grapevine_options;

/* Defaults: no config, no overrides, rank -1 (from GRAPEVINE_RANK, SLURM_PROCID,
 * OMPI_COMM_WORLD_RANK, PMIX_RANK), out dir from GRAPEVINE_OUT or the config's output.dir,
 * incarnation 0. */
GRAPEVINE_C_EXPORT grapevine_status grapevine_options_create(grapevine_options** out);
/* NULL is ignored. */
GRAPEVINE_C_EXPORT void grapevine_options_destroy(grapevine_options* options);
/* A YAML config file; or (when no path is set) the YAML text itself. The strings are copied. */
GRAPEVINE_C_EXPORT grapevine_status grapevine_options_set_config_path(grapevine_options* options,
                                                                      const char* path);
GRAPEVINE_C_EXPORT grapevine_status grapevine_options_set_config_text(grapevine_options* options,
                                                                      const char* yaml);
/* Appends one "key=value" override, applied last as `--set` does (e.g. "optimizer.lr=0.05"). */
GRAPEVINE_C_EXPORT grapevine_status grapevine_options_add_override(grapevine_options* options,
                                                                   const char* key_value);
/* -1: from the environment (see grapevine_options_create). */
GRAPEVINE_C_EXPORT grapevine_status grapevine_options_set_rank(grapevine_options* options,
                                                               int rank);
/* Where records and the final model go; NULL or "": GRAPEVINE_OUT, else output.dir. */
GRAPEVINE_C_EXPORT grapevine_status grapevine_options_set_out_dir(grapevine_options* options,
                                                                  const char* dir);
/* Restart count of this peer. */
GRAPEVINE_C_EXPORT grapevine_status grapevine_options_set_incarnation(grapevine_options* options,
                                                                      uint32_t incarnation);
/* Nonzero: continue from the checkpoints (checkpoint.every), as Options::resume in grapevine.hpp;
 * GRAPEVINE_RESUME=1 does the same. */
GRAPEVINE_C_EXPORT grapevine_status grapevine_options_set_resume(grapevine_options* options,
                                                                 int resume);

/* ---- Peer (grapevine::Peer) ---- */

typedef struct grapevine_peer grapevine_peer;

/* Loads and validates the config (workload.name must be `external`) and resolves the rank; does not
 * connect yet. A bad config is GRAPEVINE_INVALID_ARGUMENT with every diagnostic in the message.
 * `options` may be destroyed right after. */
GRAPEVINE_C_EXPORT grapevine_status grapevine_peer_create(const grapevine_options* options,
                                                          grapevine_peer** out);
/* Finalizes without averaging when the run is still open, then frees the handle. NULL is ignored.
 */
GRAPEVINE_C_EXPORT void grapevine_peer_destroy(grapevine_peer* peer);

GRAPEVINE_C_EXPORT grapevine_status grapevine_peer_rank(const grapevine_peer* peer, int* out);
GRAPEVINE_C_EXPORT grapevine_status grapevine_peer_world_size(const grapevine_peer* peer, int* out);
/* run.rounds: every peer steps this many times. */
GRAPEVINE_C_EXPORT grapevine_status grapevine_peer_planned_rounds(const grapevine_peer* peer,
                                                                  int64_t* out);
/* The strings belong to the peer and stay valid until it is destroyed. */
GRAPEVINE_C_EXPORT grapevine_status grapevine_peer_out_dir(const grapevine_peer* peer,
                                                           const char** out);
/* The resolved config (defaults and overrides applied) as YAML. */
GRAPEVINE_C_EXPORT grapevine_status grapevine_peer_config_yaml(const grapevine_peer* peer,
                                                               const char** out);

/* Registers a parameter tensor: `count` fp32 values at `data`. Names are unique; the order of
 * registration is the model's layout (and the order of step()'s gradients). Before start. */
GRAPEVINE_C_EXPORT grapevine_status grapevine_peer_add_tensor(grapevine_peer* peer,
                                                              const char* name, float* data,
                                                              size_t count);
GRAPEVINE_C_EXPORT grapevine_status grapevine_peer_parameter_count(const grapevine_peer* peer,
                                                                   size_t* out);
/* Connects to the neighbours (blocks until the bootstrap is done); every peer then starts from the
 * lowest live rank's values, written back into the registered memory. */
GRAPEVINE_C_EXPORT grapevine_status grapevine_peer_start(grapevine_peer* peer);
/* Moves tensor `name` into Grapevine's buffer: *out is its storage from then on (valid until the
 * peer is destroyed) and no copy is made for it around rounds. After start. */
GRAPEVINE_C_EXPORT grapevine_status grapevine_peer_bind(grapevine_peer* peer, const char* name,
                                                        float** out);

/* `loss` is the minibatch loss (records, divergence detection); pass NAN (math.h) when unknown. */

/* One round with Grapevine's optimizer (optimizer.* of the config): grads[k] is the gradient of
 * tensor k in registration order (NULL: zero), computed at the tensors' current values;
 * `count` must equal the number of registered tensors. */
GRAPEVINE_C_EXPORT grapevine_status grapevine_peer_step(grapevine_peer* peer,
                                                        const float* const* grads, size_t count,
                                                        double loss);
/* One round with the caller's optimizer: the tensors hold the values after the caller's step. */
GRAPEVINE_C_EXPORT grapevine_status grapevine_peer_mix(grapevine_peer* peer, double loss);
/* The first halves of step and mix: take the step and send the round's messages (the tensors then
 * hold the values before mixing); grapevine_peer_wait() receives and mixes. Exactly one wait per
 * start. */
GRAPEVINE_C_EXPORT grapevine_status grapevine_peer_start_step(grapevine_peer* peer,
                                                              const float* const* grads,
                                                              size_t count, double loss);
GRAPEVINE_C_EXPORT grapevine_status grapevine_peer_start_mix(grapevine_peer* peer, double loss);
GRAPEVINE_C_EXPORT grapevine_status grapevine_peer_wait(grapevine_peer* peer);

/* Adds the caller's metrics (names[k] = values[k], e.g. "test_accuracy" = 0.87) to the next record
 * this peer writes (and to the final record and summary when given before finalize). */
GRAPEVINE_C_EXPORT grapevine_status grapevine_peer_report(grapevine_peer* peer,
                                                          const char* const* names,
                                                          const double* values, size_t count);

typedef enum grapevine_event_kind {
  GRAPEVINE_EVENT_SUSPECT = 1,  /* a neighbour's message missed a round; the round went on */
  GRAPEVINE_EVENT_DEAD = 2,     /* a neighbour's edge was dropped (closed, crashed, silent) */
  GRAPEVINE_EVENT_DIVERGED = 3, /* training diverged: the run stops */
  GRAPEVINE_EVENT_REVIVED = 4 /* a neighbour dropped for silence answers again: its edge is back */
} grapevine_event_kind;

typedef struct grapevine_event {
  grapevine_event_kind kind;
  int peer;            /* the neighbour (or the origin of a divergence) */
  int64_t round;       /* the round in which it was seen */
  const char* message; /* owned by the peer: valid until its next poll_events call or destroy */
} grapevine_event;

/* Writes up to `capacity` events that happened since the last call, oldest first, into `events`
 * and their number into *count. Events that do not fit are kept for the next call. */
GRAPEVINE_C_EXPORT grapevine_status grapevine_peer_poll_events(grapevine_peer* peer,
                                                               grapevine_event* events,
                                                               size_t capacity, size_t* count);

typedef struct grapevine_stats {
  int64_t rounds; /* completed gossip rounds */
  uint64_t bytes_sent;
  uint64_t bytes_received;
  uint64_t bytes_dense_equivalent; /* what the same messages would take uncompressed */
  uint64_t dropped_frames;         /* by every reason (corrupt, duplicate, ...) */
  uint64_t suspect_rounds;         /* (neighbour, round) pairs that missed their round */
  int neighbours;                  /* in the topology (union over a time-varying one) */
  int live_neighbours;
  double consensus_step; /* gamma in use (NaN: none) */
  double lr;             /* of the last round */
  double loss;           /* the last reported loss (NaN: none) */
} grapevine_stats;

GRAPEVINE_C_EXPORT grapevine_status grapevine_peer_stats(const grapevine_peer* peer,
                                                         grapevine_stats* out);

/* Ends the run: with `average` nonzero, every live peer ends holding the average of the live
 * peers' models (identical values on every peer), written back into the tensors. Writes the final
 * record, the model file and peer-<rank>.final.json, and disconnects. Idempotent. */
GRAPEVINE_C_EXPORT grapevine_status grapevine_peer_finalize(grapevine_peer* peer, int average);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* GRAPEVINE_GRAPEVINE_H_ */
