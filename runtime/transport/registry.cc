// The one place that knows which backends exist. Optional backends are separate CMake targets;
// CMake defines GRAPEVINE_TRANSPORT_WITH_UCX / _OFI for this file only when their target is built,
// and GRAPEVINE_TRANSPORT_{UCX,OFI}_WHY otherwise, naming why it is not built.
#include "runtime/transport/registry.h"

#include <mutex>

#include "runtime/transport/loop.h"

#if GRAPEVINE_TRANSPORT_WITH_UCX
#include "runtime/transport/ucx/factory.h"
#endif
#if GRAPEVINE_TRANSPORT_WITH_OFI
#include "runtime/transport/ofi/factory.h"
#endif

namespace grapevine::transport {

void Registry::add(BackendEntry entry) { entries_.push_back(std::move(entry)); }

void Registry::addNotBuilt(std::string name, std::string reason) {
  BackendInfo info{name, false, "not built (" + reason + ")"};
  entries_.push_back(
      BackendEntry{name,
                   [info](Loop&, const Options&) -> Result<std::unique_ptr<Context>> {
                     return unimplemented(info.name + ": " + info.reason);
                   },
                   [info] { return info; }});
}

const BackendEntry* Registry::find(std::string_view name) const {
  for (const BackendEntry& e : entries_) {
    if (e.name == name) return &e;
  }
  return nullptr;
}

namespace {
Registry buildRegistry() {
  Registry r;
  registerInproc(r);
  registerTcp(r);
#if GRAPEVINE_TRANSPORT_WITH_UCX
  r.add(BackendEntry{"ucx", ucx::makeUcxContext, ucx::ucxBackendInfo});
#else
  r.addNotBuilt("ucx", GRAPEVINE_TRANSPORT_UCX_WHY);
#endif
#if GRAPEVINE_TRANSPORT_WITH_OFI
  r.add(BackendEntry{"libfabric", ofi::makeOfiContext, ofi::ofiBackendInfo});
#else
  r.addNotBuilt("libfabric", GRAPEVINE_TRANSPORT_OFI_WHY);
#endif
  return r;
}
}  // namespace

const Registry& Registry::instance() {
  static const Registry registry = buildRegistry();
  return registry;
}

std::vector<BackendInfo> backends() {
  std::vector<BackendInfo> out;
  for (const BackendEntry& e : Registry::instance().entries()) {
    BackendInfo info = e.probe();
    info.name = e.name;
    out.push_back(std::move(info));
  }
  return out;
}

Result<std::unique_ptr<Context>> makeContext(Loop& loop, const Options& options) {
  const BackendEntry* e = Registry::instance().find(options.backend);
  if (e == nullptr) {
    std::string known;
    for (const BackendEntry& k : Registry::instance().entries())
      known += (known.empty() ? "" : ", ") + k.name;
    return invalidArgument("unknown transport backend '" + options.backend + "' (known: " + known +
                           ")");
  }
  BackendInfo info = e->probe();
  if (!info.usable) return unimplemented(options.backend + ": " + info.reason);
  return e->factory(loop, options);
}

}  // namespace grapevine::transport
