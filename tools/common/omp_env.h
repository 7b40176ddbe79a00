// PreferPassiveOpenMP: libgomp's default is to spin-wait between parallel
// regions, which on a machine with few cores starves the loader's consumer and
// producer threads. libgomp reads OMP_WAIT_POLICY when it loads, before
// main(), so a tool that wants the passive policy must re-execute itself with
// it set. Does nothing if the user has set OMP_WAIT_POLICY.
#pragma once

namespace shardkit {

void PreferPassiveOpenMP(char** argv);

}  // namespace shardkit
