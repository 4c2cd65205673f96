// The backend registry: one table of {name, factory, availability probe}. backends() and
// makeContext() (transport.h) read it.
//
// Every backend registers the same way, explicitly and by name: registry.cc calls
// register<X>(Registry&) for each backend below, in this order, and nothing else knows which
// backends exist. A backend whose CMake target is not built (an optional library missing or turned
// off) is registered by a stub that runtime/transport/CMakeLists.txt generates from
// not_built.cc.in, whose entry says why ("not built (libucx-dev not found)"), so
// `grapevine info --transports` lists it too and no #if reaches the core.
//
// Every backend folder runtime/transport/<x>/ holds the same files:
//   CMakeLists.txt  the target grapevine_transport_<x> (links grapevine_transport_core; the tagged
//                   backends also link grapevine_transport_tagged, runtime/transport/tagged/)
//   <x>.h           the only public entry: make<X>Context(Loop&, const Options&) (loop thread)
//                   and <x>BackendInfo() (any thread: "usable" or "not usable: why")
//   <x>.cc          Context, Connection (and listener) of the backend, and register<X>(), which
//                   adds {name, make<X>Context, <x>BackendInfo} to the registry
// plus what only that backend needs (tcp: socket and wire helpers; ucx, ofi: native_reference.*,
// the bench's reference tool). Folders: inproc/ ("inproc"), tcp/ ("tcp"), ucx/ ("ucx"), ofi/
// ("libfabric").
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
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
  // Inline, so that a backend's register<X>() links without the registry's own library (tests link
  // a backend target alone).
  void add(BackendEntry entry) { entries_.push_back(std::move(entry)); }
  // An entry for a backend that this build does not contain; its probe reports `reason`.
  void addNotBuilt(std::string name, std::string reason);
  const BackendEntry* find(std::string_view name) const;
  const std::vector<BackendEntry>& entries() const { return entries_; }

  // The process-wide table, filled on first use by registry.cc. Thread-safe.
  static const Registry& instance();

 private:
  std::vector<BackendEntry> entries_;
};

// One per backend, each defined in its folder's <x>.cc (or by the generated "not built" stub).
void registerInproc(Registry& registry);
void registerTcp(Registry& registry);
void registerUcx(Registry& registry);
void registerOfi(Registry& registry);

}  // namespace grapevine::transport
