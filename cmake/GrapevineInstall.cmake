# `cmake --install build --prefix P` installs what a user of the API needs, and nothing internal:
#   P/lib/libgrapevine.so[.0[.0.1.0]]       the C++ and C APIs (the internal static libraries are
#                                           linked into it; only the API's symbols are exported)
#   P/include/grapevine/*.h, *.hpp          the public headers (include/grapevine/ only)
#   P/lib/cmake/Grapevine/                  the package: find_package(Grapevine) + Grapevine::grapevine
#   P/bin/grapevine                         the CLI
#   P/lib/grapevine/python/                 the Python package (installed by the Python binding's
#                                           CMakeLists into GRAPEVINE_INSTALL_PYTHONDIR)
# tests/install/install_test.cc installs into a fresh prefix and builds examples/cpp and examples/c
# against it.
# GRAPEVINE_INSTALL_CMAKEDIR and GRAPEVINE_INSTALL_PYTHONDIR are set in the top CMakeLists, before
# the subdirectories, so that the Python binding's can use the latter.
include(CMakePackageConfigHelpers)

install(TARGETS grapevine_api EXPORT GrapevineTargets
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
  INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(DIRECTORY ${PROJECT_SOURCE_DIR}/include/grapevine
  DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}
  FILES_MATCHING PATTERN "*.h" PATTERN "*.hpp")
install(EXPORT GrapevineTargets
  NAMESPACE Grapevine::
  DESTINATION ${GRAPEVINE_INSTALL_CMAKEDIR})

configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/GrapevineConfig.cmake.in
  ${PROJECT_BINARY_DIR}/GrapevineConfig.cmake
  INSTALL_DESTINATION ${GRAPEVINE_INSTALL_CMAKEDIR})
# 0.x: a minor version may change the API, so only the same major.minor is compatible.
write_basic_package_version_file(${PROJECT_BINARY_DIR}/GrapevineConfigVersion.cmake
  VERSION ${PROJECT_VERSION}
  COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/GrapevineConfig.cmake
              ${PROJECT_BINARY_DIR}/GrapevineConfigVersion.cmake
  DESTINATION ${GRAPEVINE_INSTALL_CMAKEDIR})

# The CLI finds libgrapevine.so (should it link it) next to itself in the prefix.
set_target_properties(grapevine PROPERTIES INSTALL_RPATH "$ORIGIN/../${CMAKE_INSTALL_LIBDIR}")
install(TARGETS grapevine RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
