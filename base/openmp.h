// OpenMP shims for the packer and its sources (the loader has its own
// WorkerTeam). When the build has no OpenMP (the ThreadSanitizer build, whose
// runtime cannot see libgomp's synchronisation) their parallel loops run
// serially and the two queries shardkit makes fall back to one thread.
#pragma once

#ifdef _OPENMP
#include <omp.h>
#else
inline int omp_get_thread_num() { return 0; }
inline int omp_get_max_threads() { return 1; }
#endif
