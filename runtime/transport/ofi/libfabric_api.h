// libfabric, loaded when the libfabric transport is first used rather than with Grapevine.
//
// Linking libfabric loads its PSM provider's libpsm_infinipath and libinfinipath into every
// process that loads Grapevine (the CLI, the Python extension), and libinfinipath's constructor
// replaces the handlers of SIGINT, SIGTERM, SIGABRT and the fatal signals: Ctrl-C then killed a
// Python program at once (no KeyboardInterrupt, no `finally`, no last checkpoint). So the backend
// does not link libfabric: the first probe dlopen()s libfabric.so.1 with every signal disposition
// saved around the call and put back after it (SavedSignalDispositions), and calls libfabric's
// exported functions through this table. Everything else in libfabric's API is inline functions
// of its headers that call through the objects' operation tables, which need no symbol.
//
// Contracts: libfabricApi() loads once per process (thread-safe) and then returns the same table
// or the same error (the dlopen/dlsym message). The library is never unloaded.
#pragma once

#include <rdma/fabric.h>

#include "runtime/common/status.h"

namespace grapevine::transport::ofi {

struct LibfabricApi {
  int (*getinfo)(uint32_t version, const char* node, const char* service, uint64_t flags,
                 const fi_info* hints, fi_info** info) = nullptr;
  void (*freeinfo)(fi_info* info) = nullptr;
  fi_info* (*dupinfo)(const fi_info* info) = nullptr;
  int (*fabric)(fi_fabric_attr* attr, fid_fabric** fabric, void* context) = nullptr;
  const char* (*strerror)(int errnum) = nullptr;

  fi_info* allocinfo() const { return dupinfo(nullptr); }  // fi_allocinfo()
};

// The loaded library's functions, or why libfabric.so.1 could not be loaded.
Result<const LibfabricApi*> libfabricApi();

// The table once libfabricApi() succeeded (checked): for code that runs only after the probe.
const LibfabricApi& loadedLibfabric();

}  // namespace grapevine::transport::ofi
