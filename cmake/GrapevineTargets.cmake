# Target-scoped defaults shared by every Grapevine target: language level, warnings, sanitizers.
# No global flags: each target opts in through grapevine_target_defaults().

# GRAPEVINE_DEBUG_INFO (top CMakeLists): the last -g option on a command line is the one that counts,
# and target options come after the build type's flags.
function(grapevine_debug_info target)
  set(level "")
  if(GRAPEVINE_DEBUG_INFO STREQUAL "lines")
    set(level -g1)
  elseif(GRAPEVINE_DEBUG_INFO STREQUAL "none")
    set(level -g0)
  endif()
  if(level)
    target_compile_options(${target} PRIVATE
      $<$<AND:$<COMPILE_LANGUAGE:C,CXX>,$<CONFIG:RelWithDebInfo,Debug>>:${level}>)
  endif()
endfunction()

function(grapevine_target_defaults target)
  target_compile_features(${target} PUBLIC cxx_std_20)
  set_target_properties(${target} PROPERTIES CXX_EXTENSIONS OFF POSITION_INDEPENDENT_CODE ON)
  target_compile_options(${target} PRIVATE
    $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra -Wno-unused-parameter>)
  grapevine_debug_info(${target})
  if(GRAPEVINE_SANITIZE)
    target_compile_options(${target} PRIVATE
      $<$<COMPILE_LANGUAGE:CXX>:-fsanitize=${GRAPEVINE_SANITIZE} -fno-omit-frame-pointer -fno-sanitize-recover=undefined>)
    target_link_options(${target} PRIVATE -fsanitize=${GRAPEVINE_SANITIZE})
  endif()
endfunction()

# grapevine_add_library(NAME SOURCES ... [DEPS ...] [PRIVATE_DEPS ...])
# A static library whose include root is the repository root, so headers are included by path:
#   #include "topology/graph.h"
function(grapevine_add_library name)
  cmake_parse_arguments(ARG "" "" "SOURCES;DEPS;PRIVATE_DEPS" ${ARGN})
  add_library(${name} STATIC ${ARG_SOURCES})
  target_include_directories(${name} PUBLIC ${PROJECT_SOURCE_DIR})
  target_link_libraries(${name} PUBLIC ${ARG_DEPS} PRIVATE ${ARG_PRIVATE_DEPS})
  grapevine_target_defaults(${name})
endfunction()
