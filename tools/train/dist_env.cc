// Rank, world and master from torchrun's or SLURM's variables.
#include "tools/train/dist_env.h"

#include <cstdlib>

namespace shardkit {
namespace {

const char* EnvVar(const char* name) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0' ? v : nullptr;
}

Status ParseInt(const char* name, const char* value, int* out) {
  char* end = nullptr;
  long v = std::strtol(value, &end, 10);
  if (*end != '\0' || v < 0 || v > (1 << 30)) {
    return Status::InvalidArgument(std::string("environment variable ") + name + "=" + value +
                                   " is not a valid count");
  }
  *out = static_cast<int>(v);
  return Status::OK();
}

}  // namespace

std::string FirstHostOfNodeList(const std::string& list) {
  // SLURM's hostlist grammar: entries separated by commas outside brackets;
  // an entry is text with any number of bracket groups, each a comma list of
  // numbers or ranges ("01-04,07"). The first host takes, in every group,
  // the first number of its first range, zero padding kept:
  // "rack[1-2]-n[01-04],gpu5" -> "rack1-n01".
  std::string host;
  size_t i = 0;
  while (i < list.size() && list[i] != ',') {
    if (list[i] != '[') {
      host += list[i++];
      continue;
    }
    const size_t close = list.find(']', i);
    const std::string group =
        list.substr(i + 1, close == std::string::npos ? std::string::npos : close - i - 1);
    host += group.substr(0, group.find_first_of(",-"));
    if (close == std::string::npos) break;
    i = close + 1;
  }
  return host;
}

Result<DistEnv> DistEnvFromEnvironment() {
  DistEnv e;
  if (EnvVar("RANK") != nullptr) {
    e.source = "torchrun variables";
    SK_RETURN_IF_ERROR(ParseInt("RANK", EnvVar("RANK"), &e.rank));
    if (EnvVar("WORLD_SIZE") == nullptr)
      return Status::InvalidArgument("RANK is set but WORLD_SIZE is not");
    SK_RETURN_IF_ERROR(ParseInt("WORLD_SIZE", EnvVar("WORLD_SIZE"), &e.world_size));
    e.local_rank = e.rank;
    if (EnvVar("LOCAL_RANK"))
      SK_RETURN_IF_ERROR(ParseInt("LOCAL_RANK", EnvVar("LOCAL_RANK"), &e.local_rank));
  } else if (EnvVar("SLURM_PROCID") != nullptr && EnvVar("SLURM_NTASKS") != nullptr) {
    e.source = "SLURM variables";
    SK_RETURN_IF_ERROR(ParseInt("SLURM_PROCID", EnvVar("SLURM_PROCID"), &e.rank));
    SK_RETURN_IF_ERROR(ParseInt("SLURM_NTASKS", EnvVar("SLURM_NTASKS"), &e.world_size));
    if (EnvVar("SLURM_LOCALID"))
      SK_RETURN_IF_ERROR(ParseInt("SLURM_LOCALID", EnvVar("SLURM_LOCALID"), &e.local_rank));
    const char* nodes =
        EnvVar("SLURM_JOB_NODELIST") ? EnvVar("SLURM_JOB_NODELIST") : EnvVar("SLURM_NODELIST");
    if (nodes != nullptr) e.master_addr = FirstHostOfNodeList(nodes);
    // 20000-31999: below Linux's ephemeral ports (32768+), which an outgoing
    // connection on the node may hold. train.sbatch uses the same formula.
    if (EnvVar("SLURM_JOB_ID")) e.master_port = 20000 + std::atoi(EnvVar("SLURM_JOB_ID")) % 12000;
  }
  if (EnvVar("MASTER_ADDR")) e.master_addr = EnvVar("MASTER_ADDR");
  if (EnvVar("MASTER_PORT"))
    SK_RETURN_IF_ERROR(ParseInt("MASTER_PORT", EnvVar("MASTER_PORT"), &e.master_port));
  if (EnvVar("SLURM_JOB_NUM_NODES"))
    SK_RETURN_IF_ERROR(ParseInt("SLURM_JOB_NUM_NODES", EnvVar("SLURM_JOB_NUM_NODES"), &e.nodes));
  if (EnvVar("CUDA_VISIBLE_DEVICES")) e.cuda_visible_devices = EnvVar("CUDA_VISIBLE_DEVICES");
  if (e.world_size < 1 || e.rank >= e.world_size) {
    return Status::InvalidArgument("rank " + std::to_string(e.rank) + " is not below world size " +
                                   std::to_string(e.world_size) + " (from " + e.source + ")");
  }
  return e;
}

}  // namespace shardkit
