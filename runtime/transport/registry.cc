// The one place that lists the backends (registry.h says how they register).
#include "runtime/transport/registry.h"

#include "runtime/transport/loop.h"

namespace grapevine::transport {

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
  registerUcx(r);
  registerOfi(r);
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
  GV_CHECK_LOOP_THREAD(loop);
  BackendInfo info = e->probe();
  if (!info.usable) return unimplemented(options.backend + ": " + info.reason);
  return e->factory(loop, options);
}

}  // namespace grapevine::transport
