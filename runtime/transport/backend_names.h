// The names transport backends register under (registry.cc), in the order configs, docs and
// "expected one of ..." messages list them. A backend is chosen by name
// (transport::Options::backend, the handshake, `grapevine bench transport --backend`), so the name
// stays a string everywhere; this list is what `transport.backend` in a config is validated
// against. Header-only, so the config schema can use it without linking any transport.
// tests/config/enum_names_test.cc checks that the registry registers exactly these names.
#pragma once

#include <array>
#include <string_view>

namespace grapevine::transport {

inline constexpr std::array<std::string_view, 4> kBackendNames = {"ucx", "libfabric", "tcp",
                                                                  "inproc"};

}  // namespace grapevine::transport
