// Who this shardkit-train process is, from the launcher's environment:
// torchrun's variables, SLURM's, or neither (a single process). The trainer
// (train/) is told the result as a DistEnv and reads no environment itself.
#pragma once

#include <string>

#include "base/status.h"
#include "train/dist.h"

namespace shardkit {

// RANK/WORLD_SIZE/LOCAL_RANK/MASTER_ADDR/MASTER_PORT if RANK is set; else
// SLURM_PROCID/SLURM_NTASKS/SLURM_LOCALID with the first host of
// SLURM_JOB_NODELIST as master (MASTER_ADDR/MASTER_PORT still override);
// else a single process. Also the job's node count (SLURM_JOB_NUM_NODES, 1
// if unset) and CUDA_VISIBLE_DEVICES. A count that is not one is an error
// naming its variable.
Result<DistEnv> DistEnvFromEnvironment();
// The first host of a SLURM node list: "n[01-04,07],gpu5" -> "n01";
// "rack[1-2]-n[01-04]" -> "rack1-n01"; "node1,node2" -> "node1".
std::string FirstHostOfNodeList(const std::string& nodelist);

}  // namespace shardkit
