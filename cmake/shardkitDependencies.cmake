# The imported targets PkgConfig::ZSTD and PkgConfig::TURBOJPEG, for
# shardkit's own build and for find_package(shardkit) in a consumer's.
# Through pkg-config where it is, else by their header and
# library on CMAKE_PREFIX_PATH (a GPU machine with the dependencies unpacked
# by scripts/gpu_kit.sh has no pkg-config): the same target names either way.
find_package(PkgConfig QUIET)
foreach(_sk_dep "ZSTD;libzstd;zstd.h;zstd" "TURBOJPEG;libturbojpeg;turbojpeg.h;turbojpeg")
  list(GET _sk_dep 0 _sk_var)
  list(GET _sk_dep 1 _sk_pc)
  list(GET _sk_dep 2 _sk_header)
  list(GET _sk_dep 3 _sk_lib)
  if(PkgConfig_FOUND)
    pkg_check_modules(${_sk_var} QUIET IMPORTED_TARGET ${_sk_pc})
  endif()
  if(NOT TARGET PkgConfig::${_sk_var})
    find_path(SHARDKIT_${_sk_var}_INCLUDE ${_sk_header})
    find_library(SHARDKIT_${_sk_var}_LIBRARY ${_sk_lib})
    if(NOT SHARDKIT_${_sk_var}_INCLUDE OR NOT SHARDKIT_${_sk_var}_LIBRARY)
      message(FATAL_ERROR "shardkit needs ${_sk_pc} (${_sk_header}): apt-get install ${_sk_pc}-dev, "
                          "or scripts/gpu_kit.sh fetch and -DCMAKE_PREFIX_PATH=.deps/usr")
    endif()
    add_library(PkgConfig::${_sk_var} INTERFACE IMPORTED)
    set_target_properties(PkgConfig::${_sk_var} PROPERTIES
      INTERFACE_INCLUDE_DIRECTORIES "${SHARDKIT_${_sk_var}_INCLUDE}"
      INTERFACE_LINK_LIBRARIES "${SHARDKIT_${_sk_var}_LIBRARY}")
  endif()
endforeach()
