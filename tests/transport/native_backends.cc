#include "tests/transport/native_backends.h"

#if GRAPEVINE_TEST_HAVE_UCX
#include "runtime/transport/ucx/ucx.h"
#endif
#if GRAPEVINE_TEST_HAVE_LIBFABRIC
#include "runtime/transport/ofi/ofi.h"
#endif

namespace grapevine::transport::testing {

Result<std::unique_ptr<Context>> makeNativeContext(Loop& loop, const Options& options) {
#if GRAPEVINE_TEST_HAVE_UCX
  if (options.backend == "ucx") return ucx::makeUcxContext(loop, options);
#endif
#if GRAPEVINE_TEST_HAVE_LIBFABRIC
  if (options.backend == "libfabric") return ofi::makeOfiContext(loop, options);
#endif
  return unimplemented("backend " + options.backend + " not built");
}

BackendInfo nativeBackendInfo(const std::string& name) {
#if GRAPEVINE_TEST_HAVE_UCX
  if (name == "ucx") return ucx::ucxBackendInfo();
#endif
#if GRAPEVINE_TEST_HAVE_LIBFABRIC
  if (name == "libfabric") return ofi::ofiBackendInfo();
#endif
  return {name, false, "not built"};
}

}  // namespace grapevine::transport::testing
