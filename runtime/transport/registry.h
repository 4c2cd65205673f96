// The backend registry: one table of {name, factory, availability probe}. backends() and
// makeContext() (transport.h) read it. Built-in backends (inproc, tcp) and the optional ones (ucx,
// libfabric, each its own CMake target) are added in exactly one place, registry.cc; a backend that
// is not built gets an entry whose probe says why, so `grapevine info --transports` lists it too.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/transport/transport.h"

namespace grapevine::transport {

struct BackendEntry {
  std::string name;
  // Creates a context on the loop thread. Only called after probe() said usable.
  std::function<Result<std::unique_ptr<Context>>(Loop&, const Options&)> factory;
  // Whether the backend can run here, and if not why (BackendInfo::reason). Cheap enough to call
  // from `grapevine info`; may be called from any thread.
  std::function<BackendInfo()> probe;
};

class Registry {
 public:
  void add(BackendEntry entry);
  // An entry for a backend that this build does not contain; its probe reports `reason`.
  void addNotBuilt(std::string name, std::string reason);
  const BackendEntry* find(std::string_view name) const;
  const std::vector<BackendEntry>& entries() const { return entries_; }

  // The process-wide table, filled on first use by registry.cc. Thread-safe.
  static const Registry& instance();

 private:
  std::vector<BackendEntry> entries_;
};

// Built-in registrations (each in its backend's folder).
void registerInproc(Registry& registry);
void registerTcp(Registry& registry);

}  // namespace grapevine::transport
