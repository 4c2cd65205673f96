// The rules that span keys, run once every value has been read and type-checked (loader.cc):
// resolve() first fills what a config leaves to be derived from other keys, then check() runs one
// check function per section (checks.cc: peers first, then the keys the graph depends on, the
// graph, and the rest). Checks only read the config; each error points at the key that is most
// likely wrong. Internal to runtime/config/.
#pragma once

#include "runtime/config/config.h"
#include "runtime/config/report.h"

namespace grapevine::config {

// Fills the values a config may leave to the program: topology.dims of a torus without dims (the
// squarest a x b = peers.count with a, b >= 2). A value it cannot derive stays unset; check()
// reports it.
void resolve(Config& config, const Report& report);

// Every cross-key rule of every section. With `buildTopology`, also builds the graph and checks it
// (connected, weights, a directed graph's use) and the fault schedule's links against it.
void check(const Config& config, Report& report, bool buildTopology);

}  // namespace grapevine::config
