// OpenMP when the build has it; otherwise (the ThreadSanitizer build, whose
// runtime cannot see libgomp's synchronisation) the parallel loops run serially
// and these stand in for the two queries shardkit makes.
#pragma once

#ifdef _OPENMP
#include <omp.h>
#else
inline int omp_get_thread_num() { return 0; }
inline int omp_get_max_threads() { return 1; }
#endif
