// shardkit's one version number: CMake's project(VERSION) reaches every
// module as SHARDKIT_VERSION, and from here the tools' --version, the
// manifests' created_by, the Python package and the installed CMake package.
#pragma once

#ifndef SHARDKIT_VERSION
#error "SHARDKIT_VERSION comes from CMake's project(VERSION ...)"
#endif

namespace shardkit {

inline constexpr const char kVersion[] = SHARDKIT_VERSION;

}  // namespace shardkit
