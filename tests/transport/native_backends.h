// Test helper: builds a ucx or libfabric context straight from the backend factories (bypassing the
// registry) so the native backends can be tested on their own. Which backends exist is decided by
// CMake (compile definitions on the test target, set only in tests/transport/CMakeLists.txt).
#pragma once

#include <memory>

#include "runtime/transport/transport.h"

namespace grapevine::transport::testing {

// options.backend picks "ucx" or "libfabric"; kUnimplemented when that backend is not built.
Result<std::unique_ptr<Context>> makeNativeContext(Loop& loop, const Options& options);
// Availability of the named native backend ("not built" when CMake left it out).
BackendInfo nativeBackendInfo(const std::string& name);

}  // namespace grapevine::transport::testing
