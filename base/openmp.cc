// Re-exec with OMP_WAIT_POLICY=passive unless already set.
#include "base/openmp.h"

#include <unistd.h>

#include <cstdlib>

namespace shardkit {

void PreferPassiveOpenMP(char** argv) {
  if (std::getenv("OMP_WAIT_POLICY") != nullptr) return;
  setenv("OMP_WAIT_POLICY", "passive", 1);
  execv("/proc/self/exe", argv);
  // exec failed: carry on with the default policy.
}

}  // namespace shardkit
