/* Grapevine from a C99 training loop, through the C API (grapevine/grapevine.h). Each peer trains
 * two tensors on a loss of its own,
 *   f_r(x) = 1/2 ||x - c_r||^2   (gradient x - c_r),
 * whose optimum c_r differs from peer to peer. Gossip pulls the peers together; the model they are
 * after is the minimiser of the average loss, the mean of the c_r, and finalize with averaging
 * leaves every peer holding the average of their models.
 *
 *   example_c [CONFIG [KEY=VALUE ...]]
 * CONFIG defaults to $GRAPEVINE_CONFIG (which `grapevine launch` sets); KEY=VALUE pairs override
 * config keys as `--set` does. The rank comes from GRAPEVINE_RANK (or SLURM_PROCID, ...).
 *
 * Prints the values of every parameter before and after finalize (registration order), which
 * tests/install/install_test.cc reads. */
#include <grapevine/grapevine.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#define WEIGHTS 6
#define BIASES 3

/* Peer r's optimum for parameter k (of all parameters, in registration order). */
static float target(int rank, size_t k) { return 0.5f * (float)(rank + 1) + 0.1f * (float)k; }

/* Gradient of f_r at x[0..n) (parameters offset.. of the model) into g; returns the loss. */
static double gradient(int rank, const float* x, size_t n, size_t offset, float* g) {
  double loss = 0;
  size_t k;
  for (k = 0; k < n; ++k) {
    g[k] = x[k] - target(rank, offset + k);
    loss += 0.5 * g[k] * g[k];
  }
  return loss;
}

static void print(const char* label, const float* weight, const float* bias) {
  int k;
  printf("%s:", label);
  for (k = 0; k < WEIGHTS; ++k) printf(" %.9g", weight[k]);
  for (k = 0; k < BIASES; ++k) printf(" %.9g", bias[k]);
  printf("\n");
}

/* Prints the last error and leaves when a call fails. */
static void check(grapevine_status status, const char* call) {
  if (status != GRAPEVINE_OK) {
    fprintf(stderr, "example_c: %s: %s: %s\n", call, grapevine_status_name(status),
            grapevine_last_error());
    exit(1);
  }
}

int main(int argc, char** argv) {
  grapevine_options* options = NULL;
  grapevine_peer* peer = NULL;
  const char* config = argc > 1 ? argv[1] : getenv("GRAPEVINE_CONFIG");
  float weight[WEIGHTS], bias[BIASES], grad_weight[WEIGHTS], grad_bias[BIASES];
  const float* grads[2];
  const char* metric_names[1] = {"distance_to_optimum"};
  double metric_values[1];
  int rank = 0, world_size = 0, i, k;
  int64_t rounds = 0, t;
  double loss = 0, distance = 0;
  grapevine_stats stats;
  const char* out_dir = NULL;

  check(grapevine_options_create(&options), "options_create");
  check(grapevine_options_set_config_path(options, config ? config : ""), "set_config_path");
  for (i = 2; i < argc; ++i) check(grapevine_options_add_override(options, argv[i]), "override");
  check(grapevine_peer_create(options, &peer), "peer_create");
  grapevine_options_destroy(options);

  check(grapevine_peer_rank(peer, &rank), "rank");
  check(grapevine_peer_world_size(peer, &world_size), "world_size");
  /* Starting values differ by rank; start() replaces them with the lowest rank's. */
  for (k = 0; k < WEIGHTS; ++k) weight[k] = (float)rank;
  for (k = 0; k < BIASES; ++k) bias[k] = -(float)rank;
  check(grapevine_peer_add_tensor(peer, "weight", weight, WEIGHTS), "add_tensor weight");
  check(grapevine_peer_add_tensor(peer, "bias", bias, BIASES), "add_tensor bias");
  check(grapevine_peer_start(peer), "start");

  check(grapevine_peer_planned_rounds(peer, &rounds), "planned_rounds");
  grads[0] = grad_weight;
  grads[1] = grad_bias;
  for (t = 0; t < rounds; ++t) {
    loss = gradient(rank, weight, WEIGHTS, 0, grad_weight) +
           gradient(rank, bias, BIASES, WEIGHTS, grad_bias);
    check(grapevine_peer_step(peer, grads, 2, loss), "step"); /* optimizer step + gossip round */
  }

  /* Distance to the mean of every peer's optimum, reported into the final record. */
  for (k = 0; k < WEIGHTS + BIASES; ++k) {
    const float v = k < WEIGHTS ? weight[k] : bias[k - WEIGHTS];
    double mean = 0;
    for (i = 0; i < world_size; ++i) mean += target(i, (size_t)k);
    mean /= world_size;
    distance += (v - mean) * (v - mean);
  }
  distance = sqrt(distance);
  metric_values[0] = distance;
  check(grapevine_peer_report(peer, metric_names, metric_values, 1), "report");
  check(grapevine_peer_stats(peer, &stats), "stats");
  printf("rank %d of %d: %lld rounds, loss %.6g, distance to the optimum %.6g, %llu bytes sent\n",
         rank, world_size, (long long)stats.rounds, loss, distance,
         (unsigned long long)stats.bytes_sent);
  print("before finalize", weight, bias);
  check(grapevine_peer_finalize(peer, 1), "finalize");
  print("after finalize", weight, bias);
  check(grapevine_peer_out_dir(peer, &out_dir), "out_dir");
  printf("records in %s\n", out_dir);
  grapevine_peer_destroy(peer);
  return 0;
}
