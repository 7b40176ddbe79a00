// OpenMP helpers. When the build has no OpenMP (the ThreadSanitizer build,
// whose runtime cannot see libgomp's synchronisation) the parallel loops run
// serially and the two queries shardkit makes fall back to one thread.
#pragma once

#ifdef _OPENMP
#include <omp.h>
#else
inline int omp_get_thread_num() { return 0; }
inline int omp_get_max_threads() { return 1; }
#endif

namespace shardkit {

// libgomp's default is to spin-wait between parallel regions, which on a
// machine with few cores starves the loader's producer and consumer threads.
// libgomp reads OMP_WAIT_POLICY when it loads, before main(), so a tool that
// wants the passive policy re-executes itself with it set. Does nothing if the
// user has set OMP_WAIT_POLICY; returns (keeping the default) if exec fails.
void PreferPassiveOpenMP(char** argv);

}  // namespace shardkit
