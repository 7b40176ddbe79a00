// Where a rank learns its place: SLURM's and torchrun's variables (SLURM's
// node-list grammar, which wins, what is refused), the GPU each rank takes,
// the backend a run and build can carry, and the gradient buckets' order.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "tools/train/dist_env.h"
#include "train/dist.h"

namespace shardkit {
namespace {

TEST(DistEnvTest, FirstHostOfNodeListFollowsSlurmsGrammar) {
  const std::pair<const char*, const char*> cases[] = {
      {"node1", "node1"},
      {"node1,node2", "node1"},
      {"n[01-04,07],gpu5", "n01"},
      {"n[07,01-04]", "n07"},
      {"rack[1-2]-n[01-04]", "rack1-n01"},
      {"rack[3,5]-n[009-012],rack7-n1", "rack3-n009"},
      {"gpu-a100-[0003-0010]", "gpu-a100-0003"},
      {"c[1-2]x", "c1x"},
      {"", ""},
  };
  for (const auto& [list, first] : cases) EXPECT_EQ(FirstHostOfNodeList(list), first) << list;
}

// Sets environment variables for one scope, restoring them after.
class ScopedEnv {
 public:
  explicit ScopedEnv(std::vector<std::pair<std::string, const char*>> vars) {
    for (const char* name :
         {"RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT", "SLURM_PROCID",
          "SLURM_NTASKS", "SLURM_LOCALID", "SLURM_JOB_NODELIST", "SLURM_NODELIST", "SLURM_JOB_ID",
          "SLURM_JOB_NUM_NODES", "CUDA_VISIBLE_DEVICES"}) {
      const char* v = std::getenv(name);
      saved_.emplace_back(name, v ? std::optional<std::string>(v) : std::nullopt);
      unsetenv(name);
    }
    for (const auto& [k, v] : vars) setenv(k.c_str(), v, 1);
  }
  ~ScopedEnv() {
    for (const auto& [k, v] : saved_) {
      if (v)
        setenv(k.c_str(), v->c_str(), 1);
      else
        unsetenv(k.c_str());
    }
  }

 private:
  std::vector<std::pair<std::string, std::optional<std::string>>> saved_;
};

TEST(DistEnvTest, TorchrunVariablesWinOverSlurmsAndMasterVariablesOverride) {
  {
    ScopedEnv env({});
    auto e = DistEnvFromEnvironment();
    ASSERT_TRUE(e.ok());
    EXPECT_EQ(e->world_size, 1);
    EXPECT_EQ(e->source, "single process");
    EXPECT_EQ(e->nodes, 1);
    EXPECT_EQ(e->cuda_visible_devices, "");
  }
  {
    ScopedEnv env({{"SLURM_PROCID", "3"},
                   {"SLURM_NTASKS", "8"},
                   {"SLURM_LOCALID", "1"},
                   {"SLURM_JOB_NODELIST", "rack[1-2]-n[01-04]"},
                   {"SLURM_JOB_ID", "12345"},
                   {"SLURM_JOB_NUM_NODES", "2"},
                   {"CUDA_VISIBLE_DEVICES", "3"}});
    auto e = DistEnvFromEnvironment();
    ASSERT_TRUE(e.ok()) << e.status().ToString();
    EXPECT_EQ(e->source, "SLURM variables");
    EXPECT_EQ(e->rank, 3);
    EXPECT_EQ(e->world_size, 8);
    EXPECT_EQ(e->local_rank, 1);
    EXPECT_EQ(e->master_addr, "rack1-n01");
    EXPECT_EQ(e->master_port, 20000 + 12345 % 12000);
    EXPECT_EQ(e->nodes, 2);
    EXPECT_EQ(e->cuda_visible_devices, "3");
  }
  {  // torchrun's variables take precedence; MASTER_* override the node list
    ScopedEnv env({{"RANK", "1"},
                   {"WORLD_SIZE", "2"},
                   {"SLURM_PROCID", "5"},
                   {"SLURM_NTASKS", "8"},
                   {"SLURM_JOB_NODELIST", "n[1-4]"},
                   {"MASTER_ADDR", "10.0.0.7"},
                   {"MASTER_PORT", "29511"}});
    auto e = DistEnvFromEnvironment();
    ASSERT_TRUE(e.ok());
    EXPECT_EQ(e->source, "torchrun variables");
    EXPECT_EQ(e->rank, 1);
    EXPECT_EQ(e->world_size, 2);
    EXPECT_EQ(e->local_rank, 1) << "LOCAL_RANK defaults to RANK";
    EXPECT_EQ(e->master_addr, "10.0.0.7");
    EXPECT_EQ(e->master_port, 29511);
  }
  for (const auto& bad : std::vector<std::vector<std::pair<std::string, const char*>>>{
           {{"RANK", "0"}},                       // no WORLD_SIZE
           {{"RANK", "2"}, {"WORLD_SIZE", "2"}},  // rank not below world
           {{"RANK", "x"}, {"WORLD_SIZE", "2"}},  // not a number
           {{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_PORT", "-1"}},
       }) {
    ScopedEnv env(bad);
    EXPECT_FALSE(DistEnvFromEnvironment().ok());
  }
  ScopedEnv env({{"SLURM_JOB_NUM_NODES", "two"}, {"SLURM_JOB_ID", "1"}});
  auto e = DistEnvFromEnvironment();
  ASSERT_FALSE(e.ok());
  EXPECT_NE(e.status().message().find("SLURM_JOB_NUM_NODES=two"), std::string::npos)
      << e.status().message();
}

TEST(DistEnvTest, GradientBucketsFollowReverseOrderWithASmallFirstBucket) {
  // 6 parameters of 1 MB each (262144 floats): with 1 MB first and 2.5 MB
  // later buckets, reverse order gives buckets {5}, {4, 3}, {2, 1}, {0}.
  std::vector<torch::Tensor> params;
  for (int i = 0; i < 6; ++i) params.push_back(torch::zeros({262144}, torch::requires_grad()));
  GradientReducer r(params, c10::intrusive_ptr<CollectiveGroup>(), 1, 2621440, 1 << 20);
  EXPECT_EQ(r.num_buckets(), 4u);
}

TEST(DistEnvTest, EachRankGetsAGpuOfItsOwnOrANamedRefusal) {
  // One GPU per local rank.
  EXPECT_EQ(*ChooseCudaDevice(0, 4, DistBackend::kNccl, nullptr), 0);
  EXPECT_EQ(*ChooseCudaDevice(3, 4, DistBackend::kNccl, "0,1,2,3"), 3);
  // srun --gpus-per-task: each rank sees only its own GPU.
  EXPECT_EQ(*ChooseCudaDevice(3, 1, DistBackend::kNccl, "5"), 0);
  // More local ranks than GPUs: NCCL refuses by name, Gloo may share.
  auto r = ChooseCudaDevice(2, 2, DistBackend::kNccl, "0,1");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("local rank 2"), std::string::npos) << r.status().message();
  EXPECT_NE(r.status().message().find("--backend gloo"), std::string::npos);
  EXPECT_FALSE(ChooseCudaDevice(1, 1, DistBackend::kNccl, nullptr).ok());
  EXPECT_EQ(*ChooseCudaDevice(1, 1, DistBackend::kGloo, nullptr), 0);
  EXPECT_EQ(*ChooseCudaDevice(3, 2, DistBackend::kGloo, "0,1"), 1);
  EXPECT_FALSE(ChooseCudaDevice(0, 0, DistBackend::kGloo, nullptr).ok());
}

TEST(DistEnvTest, BackendsResolveToWhatTheRunAndBuildCanCarry) {
  auto auto_on_cpu = ResolveBackend(DistBackend::kAuto, false);
  if (BuildHasGloo()) {
    EXPECT_EQ(*auto_on_cpu, DistBackend::kGloo);
  } else {  // pip's LibTorch may ship no Gloo headers
    ASSERT_FALSE(auto_on_cpu.ok());
    EXPECT_NE(auto_on_cpu.status().message().find("no Gloo"), std::string::npos);
  }
  auto nccl_on_cpu = ResolveBackend(DistBackend::kNccl, false);
  ASSERT_FALSE(nccl_on_cpu.ok());
  EXPECT_NE(nccl_on_cpu.status().message().find("needs CUDA"), std::string::npos);
  if (BuildHasNccl()) {
    EXPECT_EQ(*ResolveBackend(DistBackend::kAuto, true), DistBackend::kNccl);
  } else {
    EXPECT_FALSE(ResolveBackend(DistBackend::kNccl, true).ok());
  }
  EXPECT_EQ(ResolveBackend(DistBackend::kGloo, true).ok(), BuildHasGloo());
}

}  // namespace
}  // namespace shardkit
