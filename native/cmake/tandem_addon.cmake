# What the two cmake-js projects (the engine in native/, the UCX agent in native/ucx/) build the
# same way: the C++ settings and the N-API .node module. Included by both CMakeLists.txt.

macro(tandem_cxx_defaults)
  set(CMAKE_CXX_STANDARD 17)
  set(CMAKE_CXX_STANDARD_REQUIRED ON)
  set(CMAKE_POSITION_INDEPENDENT_CODE ON)
  if(NOT CMAKE_BUILD_TYPE)
    set(CMAKE_BUILD_TYPE Release)
  endif()
endmacro()

# tandem_napi_addon(<target> <core library> <sources...>): <target>.node linking the core.
# Only when configured by cmake-js, which defines CMAKE_JS_INC; a plain cmake run (the C++
# test binary alone) skips it.
function(tandem_napi_addon target core)
  if(NOT CMAKE_JS_INC)
    return()
  endif()
  add_library(${target} SHARED ${ARGN} ${CMAKE_JS_SRC})
  set_target_properties(${target} PROPERTIES PREFIX "" SUFFIX ".node")
  target_include_directories(${target} PRIVATE ${CMAKE_JS_INC})
  target_compile_definitions(${target} PRIVATE NAPI_VERSION=8 NAPI_CPP_EXCEPTIONS NODE_ADDON_API_DISABLE_DEPRECATED)
  target_compile_options(${target} PRIVATE -O2 -fvisibility=hidden)
  target_link_libraries(${target} PRIVATE ${core} ${CMAKE_JS_LIB})
endfunction()
