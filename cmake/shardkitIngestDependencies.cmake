# The imported target PkgConfig::MATIO (libmatio, the MATLAB .mat reader
# ingest/ links where it is found), for shardkit's own build
# (ingest/CMakeLists.txt) and for find_package(shardkit COMPONENTS ingest)
# in a consumer's: through pkg-config where it is, else by matio.h and the
# library on CMAKE_PREFIX_PATH. No target where neither finds it.
find_package(PkgConfig QUIET)
if(PkgConfig_FOUND)
  pkg_check_modules(MATIO QUIET IMPORTED_TARGET matio)
endif()
if(NOT TARGET PkgConfig::MATIO)
  find_path(SHARDKIT_MATIO_INCLUDE matio.h)
  find_library(SHARDKIT_MATIO_LIBRARY matio)
  if(SHARDKIT_MATIO_INCLUDE AND SHARDKIT_MATIO_LIBRARY)
    add_library(PkgConfig::MATIO INTERFACE IMPORTED)
    set_target_properties(PkgConfig::MATIO PROPERTIES
      INTERFACE_INCLUDE_DIRECTORIES "${SHARDKIT_MATIO_INCLUDE}"
      INTERFACE_LINK_LIBRARIES "${SHARDKIT_MATIO_LIBRARY}")
  endif()
endif()
