#include "runtime/transport/ofi/libfabric_api.h"

#include <dlfcn.h>

#include <cstdlib>
#include <string>

#include "runtime/common/log.h"
#include "runtime/common/signal_dispositions.h"

namespace grapevine::transport::ofi {

namespace {

constexpr const char* kLibrary = "libfabric.so.1";

template <typename Fn>
bool resolve(void* handle, const char* name, Fn& out, std::string& error) {
  void* symbol = ::dlsym(handle, name);
  if (symbol == nullptr) {
    const char* why = ::dlerror();
    error = std::string(kLibrary) + ": no symbol " + name +
            (why != nullptr ? std::string(" (") + why + ")" : "");
    return false;
  }
  out = reinterpret_cast<Fn>(symbol);
  return true;
}

struct Loaded {
  LibfabricApi api;
  std::string error;  // empty: loaded
};

Loaded load() {
  Loaded out;
  void* handle = nullptr;
  int restored = 0;
  {
    SavedSignalDispositions keep;
    handle = ::dlopen(kLibrary, RTLD_NOW | RTLD_LOCAL);
    restored = keep.restore();
  }
  if (handle == nullptr) {
    const char* why = ::dlerror();
    out.error =
        std::string("cannot load ") + kLibrary + ": " + (why != nullptr ? why : "unknown error");
    return out;
  }
  if (restored > 0)
    log::debug("loading ", kLibrary, " changed ", restored,
               " signal handler(s); put back as they were");
  LibfabricApi& api = out.api;
  if (!resolve(handle, "fi_getinfo", api.getinfo, out.error) ||
      !resolve(handle, "fi_freeinfo", api.freeinfo, out.error) ||
      !resolve(handle, "fi_dupinfo", api.dupinfo, out.error) ||
      !resolve(handle, "fi_fabric", api.fabric, out.error) ||
      !resolve(handle, "fi_strerror", api.strerror, out.error)) {
    out.api = LibfabricApi{};
  }
  return out;
}

const Loaded& loaded() {
  static const Loaded instance = load();
  return instance;
}

}  // namespace

Result<const LibfabricApi*> libfabricApi() {
  const Loaded& l = loaded();
  if (!l.error.empty()) return unavailable(l.error);
  return &l.api;
}

const LibfabricApi& loadedLibfabric() {
  const Loaded& l = loaded();
  if (!l.error.empty()) {
    log::error("libfabric used although it could not be loaded: ", l.error);
    std::abort();
  }
  return l.api;
}

}  // namespace grapevine::transport::ofi
