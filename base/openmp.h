// OpenMP shims for the packer and the augmenter (the loader has its own
// WorkerTeam). When the build has no OpenMP (the ThreadSanitizer build, whose
// runtime cannot see libgomp's synchronisation) their parallel loops run
// serially, the two queries shardkit makes fall back to one thread, and
// allowing nested regions (the augmenter's shards and their records) does nothing.
#pragma once

#ifdef _OPENMP
#include <omp.h>
#else
inline int omp_get_thread_num() { return 0; }
inline int omp_get_max_threads() { return 1; }
inline void omp_set_max_active_levels(int) {}
#endif
