# pip's LibTorch exports copies of libstdc++'s std::filesystem
# (pytorch/pytorch#133437): a program linking it after its own code binds its
# std::filesystem calls to them, and with torch 2.11 on Ubuntu 24.04 remove_all
# there jumped to address 0. The shared libstdc++, named ahead of every
# library, is found first, for LibTorch's own calls too. It is named by its
# path, as a shared object (-Bdynamic): a compiler that links libstdc++
# statically (a wrapper on the GPU machine did, and turned a plain -lstdc++
# into the archive) would otherwise leave a second C++ runtime in the program
# beside the one LibTorch loads. A program's link options come before its
# objects and libraries.
#
# shardkit_libstdcxx_link_option(VAR): the option for this project's C++
# compiler (its libstdc++.so.6, or -lstdc++ where it does not say, and when
# cross-compiling: asked without the toolchain's target and sysroot, the
# compiler would name the host's), empty off Linux. Used by train/CMakeLists.txt for shardkit's own programs and by
# shardkitConfig.cmake for a find_package(shardkit COMPONENTS train) consumer,
# each with its own compiler: the path is never carried from one machine to
# another.
function(shardkit_libstdcxx_link_option var)
  set(${var} "" PARENT_SCOPE)
  if(NOT CMAKE_SYSTEM_NAME STREQUAL "Linux" OR NOT CMAKE_CXX_COMPILER)
    return()
  endif()
  set(so "")
  if(NOT CMAKE_CROSSCOMPILING)
    execute_process(COMMAND ${CMAKE_CXX_COMPILER} -print-file-name=libstdc++.so.6
                    OUTPUT_VARIABLE so OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
  endif()
  if(NOT IS_ABSOLUTE "${so}" OR NOT EXISTS "${so}")
    set(so "-lstdc++")  # by name: the linker searches the target's libraries
  endif()
  # Quoted: SHELL: splits on spaces, and a toolchain's path may have some.
  set(${var} "SHELL:-Wl,--push-state,--no-as-needed,-Bdynamic \"${so}\" -Wl,--pop-state"
      PARENT_SCOPE)
endfunction()
