# Every external dependency, found once. Packages come from Debian (tools/install-deps).
find_package(Threads REQUIRED)
find_package(PkgConfig REQUIRED)
find_package(yaml-cpp REQUIRED)          # libyaml-cpp-dev
find_package(Eigen3 3.3 REQUIRED NO_MODULE)  # libeigen3-dev
find_package(CLI11 REQUIRED)             # libcli11-dev
find_package(nlohmann_json 3 REQUIRED)   # nlohmann-json3-dev
find_package(Boost 1.74 REQUIRED)        # libboost-dev (Asio is header-only)
pkg_check_modules(ZSTD REQUIRED IMPORTED_TARGET libzstd)  # libzstd-dev
pkg_check_modules(SODIUM REQUIRED IMPORTED_TARGET libsodium)  # libsodium-dev (keys, MACs, AEAD)
find_package(OpenSSL 3 REQUIRED COMPONENTS Crypto)  # libssl-dev (the seals' ChaCha20-Poly1305)
find_package(BLAS REQUIRED)              # libopenblas-dev
find_package(ZLIB REQUIRED)              # zlib1g-dev (gzip-compressed IDX datasets)
find_package(Catch2 2 REQUIRED)          # catch2
# prometheus-cpp-dev: each peer's /metrics (monitoring.prometheus_port; the metrics and their text
# format; the HTTP endpoint is Grapevine's own, runtime/engine/http_endpoint.h). Required like the others;
# checked here so that a missing package names itself rather than a CMake search path.
find_package(prometheus-cpp CONFIG QUIET)
if(NOT prometheus-cpp_FOUND OR NOT TARGET prometheus-cpp::core)
  message(FATAL_ERROR "prometheus-cpp (core) was not found: install the Debian package "
                      "'prometheus-cpp-dev' (tools/install-deps)")
endif()

# grapevine_optional_dependency(OPTION FOUND PACKAGE) sets GRAPEVINE_HAVE_<X> from an AUTO|ON|OFF option.
macro(grapevine_optional_dependency opt found package)
  string(REPLACE "GRAPEVINE_" "GRAPEVINE_HAVE_" _have ${opt})
  if(${opt} STREQUAL "OFF")
    set(${_have} OFF)
  elseif(${found})
    set(${_have} ON)
  elseif(${opt} STREQUAL "ON")
    message(FATAL_ERROR "${opt}=ON but its dependency was not found: install the Debian package '${package}' (tools/install-deps)")
  else()
    set(${_have} OFF)
  endif()
endmacro()

if(NOT GRAPEVINE_UCX STREQUAL "OFF")
  pkg_check_modules(UCX IMPORTED_TARGET ucx)
endif()
grapevine_optional_dependency(GRAPEVINE_UCX UCX_FOUND libucx-dev)

if(NOT GRAPEVINE_LIBFABRIC STREQUAL "OFF")
  pkg_check_modules(LIBFABRIC IMPORTED_TARGET libfabric)
endif()
grapevine_optional_dependency(GRAPEVINE_LIBFABRIC LIBFABRIC_FOUND libfabric-dev)

set(_cuda_found OFF)
if(NOT GRAPEVINE_CUDA STREQUAL "OFF")
  if(NOT CMAKE_CUDA_COMPILER AND EXISTS /usr/local/cuda/bin/nvcc)
    set(CMAKE_CUDA_COMPILER /usr/local/cuda/bin/nvcc)
  endif()
  include(CheckLanguage)
  check_language(CUDA)
  if(CMAKE_CUDA_COMPILER)
    enable_language(CUDA)
    find_package(CUDAToolkit)
    if(CUDAToolkit_FOUND)
      set(_cuda_found ON)
    endif()
  endif()
endif()
grapevine_optional_dependency(GRAPEVINE_CUDA _cuda_found "the CUDA toolkit at /usr/local/cuda")
