// DDP: N ranks train exactly like one rank with the whole batch, ranks
// started by torchrun's variables or a bare srun, a run stopped mid-epoch
// resumed on another number of ranks, a failing or stopped rank ending the
// others, a rendezvous with a peer that is no store, and every collective on
// the training device.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "storage/env.h"
#include "tests/common/test_util.h"
#include "tests/train/train_test_util.h"
#include "train/checkpoint.h"
#include "train/dist.h"
#include "train/trainer.h"

namespace shardkit {
namespace {

using testing::kPython;
using testing::kTrain;
using testing::LoadExport;
using testing::MaxDiff;
using testing::ReadToyCheckpoint;
using testing::RunCommand;
using testing::Spawn;
using testing::TempDir;
using testing::TinyTrainOptions;
using testing::TrainCmd;
using testing::WaitExit;
using testing::WaitForText;
using testing::WriteToyDataset;

TEST(TrainTest, TwoRanksEqualOneRankWithTheWholeBatch) {
  TempDir dir;
  WriteToyDataset(dir / "data", 256);
  auto one = RunCommand(
      TrainCmd(dir / "data", "--batch-size 16 --max-steps 6 --export " + dir / "one.pt"));
  ASSERT_EQ(one.exit_code, 0) << one.out;
  auto two = RunCommand(TrainCmd(
      dir / "data", "--batch-size 8 --max-steps 6 --nproc-per-node 2 --export " + dir / "two.pt"));
  ASSERT_EQ(two.exit_code, 0) << two.out;
  auto a = LoadExport(dir / "one.pt"), b = LoadExport(dir / "two.pt");
  auto init = LoadExport(dir / "one.pt");
  EXPECT_LT(MaxDiff(a, b), 1e-5) << "2 ranks x 8 must train exactly like 1 rank x 16";
}

// Rank `rank` of 2 on dir/data (batch 4, progress every step, checkpoints
// in dir/ck), rendezvousing through environment variables as torchrun's do.
std::string RankCmd(const TempDir& dir, int rank, const std::string& extra) {
  const std::string port = std::to_string(testing::TrainingPort());
  return "env RANK=" + std::to_string(rank) +
         " WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=" + port + " " + kTrain + " --data " +
         dir / "data" +
         " --arch tiny --workers 1 --threads 1 --batch-size 4 --print-every 1 --checkpoint-dir " +
         dir / "ck" + " " + extra;
}

// Ranks as a bare `srun` starts them: SLURM_PROCID, SLURM_NTASKS,
// SLURM_LOCALID, the job's node list and id, no torchrun variables.
std::string SrunRankCmd(const TempDir& dir, int rank, const std::string& nodes) {
  // shardkit-train's port is 20000 + job % 12000.
  const std::string job = std::to_string(testing::TrainingPort() - 20000);
  return "env -u RANK -u WORLD_SIZE -u LOCAL_RANK -u MASTER_ADDR -u MASTER_PORT SLURM_PROCID=" +
         std::to_string(rank) + " SLURM_NTASKS=2 SLURM_LOCALID=" + std::to_string(rank) +
         " SLURM_JOB_NODELIST=" + nodes + " SLURM_JOB_ID=" + job + " " + kTrain + " --data " +
         dir / "data" +
         " --arch tiny --workers 1 --threads 1 --batch-size 4 --epochs 1 --backend gloo";
}

TEST(TrainTest, RanksStartedByABareSrunTrainOverGlooAndAnUnknownHostFailsAtOnce) {
  TempDir dir;
  WriteToyDataset(dir / "data", 64);
  const int r0 = Spawn(SrunRankCmd(dir, 0, "localhost"), dir / "log0");
  const int r1 = Spawn(SrunRankCmd(dir, 1, "localhost"), dir / "log1");
  EXPECT_EQ(WaitExit(r0, 600), 0) << testing::ReadFile(dir / "log0");
  EXPECT_EQ(WaitExit(r1, 600), 0) << testing::ReadFile(dir / "log1");
  EXPECT_NE(testing::ReadFile(dir / "log0").find("DDP over gloo: 2 ranks (SLURM variables)"),
            std::string::npos)
      << testing::ReadFile(dir / "log0");
  // A node list whose first host does not resolve: a clear error before any wait.
  auto r = RunCommand(SrunRankCmd(dir, 1, "no-such-host-shardkit[1-2]"));
  EXPECT_EQ(r.exit_code, 2) << r.out;
  EXPECT_NE(r.out.find("cannot resolve the rendezvous host 'no-such-host-shardkit1'"),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("MASTER_ADDR"), std::string::npos) << r.out;
}

// The last JSON line of a metrics file.
nlohmann::json LastMetrics(const std::string& path) {
  std::string last;
  std::istringstream in(testing::ReadFile(path));
  for (std::string line; std::getline(in, line);) {
    if (!line.empty()) last = line;
  }
  return nlohmann::json::parse(last, nullptr, false);
}

// Elastic resume: a 2-rank run stopped by SIGTERM mid-epoch (as SLURM
// preempts) resumes on 1 rank and on 3 ranks, with other batch sizes and
// worker counts, and each finishes the epoch with exactly the records the
// 2-rank run had not read (the metrics count them, padding aside).
TEST(TrainTest, SigtermMidEpochOnTwoRanksResumesOnOneAndOnThreeRanks) {
  TempDir dir;
  // 300 steps per epoch at 2 x 4: the signal, sent at step 20, lands mid-epoch
  // even when this process is descheduled for a long while after seeing it.
  const int kRecords = 2400;
  WriteToyDataset(dir / "data", kRecords);
  auto cmd = [&](int rank) { return RankCmd(dir, rank, "--epochs 1 --timeout 300"); };
  const int r0 = Spawn(cmd(0), dir / "log0");
  const int r1 = Spawn(cmd(1), dir / "log1");
  ASSERT_TRUE(WaitForText(dir / "log0", "step 20/", 600)) << testing::ReadFile(dir / "log0");
  kill(r0, SIGTERM);
  kill(r1, SIGTERM);
  EXPECT_EQ(WaitExit(r0, 600), 75) << testing::ReadFile(dir / "log0");
  EXPECT_EQ(WaitExit(r1, 600), 75) << testing::ReadFile(dir / "log1");
  TrainPosition pos;
  ASSERT_TRUE(ReadToyCheckpoint(dir / "ck/last.pt", &pos));
  ASSERT_EQ(pos.data.epoch, 0u);
  ASSERT_GE(pos.data.batch, 20u);
  ASSERT_LT(pos.data.batch, 300u) << "stopped mid-epoch";
  ASSERT_EQ(pos.data.world_size, 2u);
  const uint64_t read = 2 * 4 * pos.data.batch;  // strided shares: the first 8k of the order
  EXPECT_EQ(pos.schedule_samples, static_cast<int64_t>(read));
  // The run was cut before the epoch's end: nothing read twice after it (the
  // loader tests check which records; here the trainer's count).
  ASSERT_EQ(RunCommand("cp -r " + dir / "ck" + " " + dir / "ck3").exit_code, 0);
  struct Resume {
    std::string ck, how;
    int world;
  };
  for (const Resume& r : {Resume{"ck", "--nproc-per-node 1 --batch-size 6 --workers 2", 1},
                          Resume{"ck3", "--nproc-per-node 3 --batch-size 5 --workers 1", 3}}) {
    SCOPED_TRACE(r.how);
    const std::string metrics = dir / (r.ck + ".jsonl");
    auto out = RunCommand(kTrain + " --data " + dir / "data" +
                          " --arch tiny --threads 1 --epochs 1 --print-every 1000 --resume " +
                          r.how + " --checkpoint-dir " + dir / r.ck + " --metrics " + metrics);
    ASSERT_EQ(out.exit_code, 0) << out.out;
    EXPECT_NE(out.out.find("the epoch's " + std::to_string(kRecords - read) +
                           " remaining records continue on " + std::to_string(r.world) + " rank"),
              std::string::npos)
        << out.out;
    const nlohmann::json m = LastMetrics(metrics);
    ASSERT_TRUE(m.is_object()) << testing::ReadFile(metrics);
    EXPECT_EQ(m["epoch"], 1);
    EXPECT_EQ(m["world_size"], r.world);
    // Exactly the rest of the epoch, in the full batches the trainer takes
    // (drop_last): per rank floor(rest / W') samples, in whole batches of B'.
    const uint64_t rest = kRecords - read, b1 = r.world == 1 ? 6 : 5;
    const uint64_t want = rest / r.world / b1 * b1 * r.world;
    EXPECT_EQ(m["records"], want) << "the rest of the epoch: " << rest;
    EXPECT_LT(rest - want, r.world * b1 + r.world);
    TrainPosition end;
    ASSERT_TRUE(ReadToyCheckpoint(dir / r.ck + "/last.pt", &end));
    EXPECT_EQ(end.data.epoch, 1u);
    EXPECT_TRUE(end.data.positions.empty());
    // The schedule counts samples: the saved ones, then this run's global batch per step.
    const int64_t global_batch = r.world * (r.world == 1 ? 6 : 5);
    EXPECT_EQ(end.schedule_samples,
              pos.schedule_samples + (end.global_step - pos.global_step) * global_batch);
  }
}

TEST(TrainTest, OneRankFailingEndsTheOthersWithAnErrorAndResumeCompletes) {
  TempDir dir;
  WriteToyDataset(dir / "data", 800);  // 100 steps per epoch at 2 x 4
  auto cmd = [&](int rank) { return RankCmd(dir, rank, "--epochs 50 --timeout 120"); };
  const int r0 = Spawn(cmd(0), dir / "log0");
  const int r1 = Spawn(cmd(1), dir / "log1");
  // Past the first epoch's checkpoint, in the middle of the second epoch.
  ASSERT_TRUE(WaitForText(dir / "log0", "epoch 2/50  step 40/", 600))
      << testing::ReadFile(dir / "log0");
  kill(r1, SIGKILL);  // a crash: no checkpoint, no goodbye
  WaitExit(r1, 60);
  const int code = WaitExit(r0, 600);
  EXPECT_NE(code, 0) << "the surviving rank must fail, not hang or succeed";
  EXPECT_NE(code, -1) << "the surviving rank did not exit within 600 s";
  EXPECT_NE(testing::ReadFile(dir / "log0").find("error"), std::string::npos)
      << testing::ReadFile(dir / "log0");
  // Resume from the last checkpoint, an epoch's end (epoch 1's, or a later
  // one if this process was descheduled long enough after seeing the line),
  // and finish two more epochs.
  TrainPosition pos;
  ASSERT_TRUE(ReadToyCheckpoint(dir / "ck/last.pt", &pos));
  EXPECT_GE(pos.data.epoch, 1u);
  EXPECT_EQ(pos.data.batch, 0);
  auto r = RunCommand(kTrain + " --nproc-per-node 2 --data " + dir / "data" +
                      " --arch tiny --workers 1 --threads 1 --batch-size 4 --epochs " +
                      std::to_string(pos.data.epoch + 2) +
                      " --print-every 1000 --resume --checkpoint-dir " + dir / "ck");
  EXPECT_EQ(r.exit_code, 0) << r.out;
  EXPECT_NE(r.out.find("resumed from"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("\"epoch\":" + std::to_string(pos.data.epoch + 2)), std::string::npos)
      << r.out;
}

// A peer that accepts connections and never answers: not a c10d store.
// A TCP server that accepts connections and never answers; it prints
// "accepted N" after its Nth connection. `name` tells two apart in one dir.
int StartSilentServer(const std::string& dir, int* port, const std::string& name = "silent") {
  testing::WriteFile(
      dir + "/" + name + ".py",
      "import socket, sys\n"
      "s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n"
      "s.bind(('127.0.0.1', 0)); s.listen(16)\n"
      "print('port', s.getsockname()[1], 'listening', flush=True)\n"
      "held = []\n"
      "while True:\n"
      "    c, _ = s.accept(); held.append(c)\n"
      "    print('accepted', len(held), flush=True)\n");
  const std::string log = dir + "/" + name + ".log";
  const int pid = Spawn(std::string(kPython) + " " + dir + "/" + name + ".py", log);
  // The whole line, number included, before it is read (however busy the machine).
  EXPECT_TRUE(WaitForText(log, " listening", 300)) << testing::ReadFile(log);
  *port = std::atoi(testing::ReadFile(log).substr(5).c_str());
  return pid;
}

TEST(TrainTest, RendezvousWithAPeerThatIsNotAStoreHonoursTimeoutAndSigterm) {
  TempDir dir;
  WriteToyDataset(dir / "data", 64);
  int port = 0;
  const int server = StartSilentServer(dir.path(), &port);
  ASSERT_GT(port, 0);
  const std::string env =
      "env RANK=1 WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=" + std::to_string(port) + " ";
  // The watchdog's KILL would be exit 137: the message and exit 2 say that
  // --timeout ended the rendezvous (no bound on the seconds it took).
  auto r = RunCommand("timeout -s KILL 600 " + env +
                      TrainCmd(dir / "data", "--batch-size 8 --timeout 3"));
  EXPECT_EQ(r.exit_code, 2) << r.out;
  EXPECT_NE(r.out.find("timed out after 3 s"), std::string::npos) << r.out;
  kill(server, SIGKILL);
  WaitExit(server, 10);
  // SIGTERM while waiting: the rank stops promptly (exit 75: requeue and
  // resume). Sent once the rank is inside the rendezvous (the server has its
  // connection), so after its handlers are installed, however busy the machine.
  int port2 = 0;
  const int server2 = StartSilentServer(dir.path(), &port2, "silent2");
  ASSERT_GT(port2, 0);
  const int pid =
      Spawn("env RANK=1 WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=" + std::to_string(port2) +
                " " + TrainCmd(dir / "data", "--batch-size 8 --timeout 600"),
            dir / "term.log");
  ASSERT_TRUE(WaitForText(dir / "silent2.log", "accepted 1", 300))
      << testing::ReadFile(dir / "term.log");
  kill(pid, SIGTERM);
  EXPECT_EQ(WaitExit(pid, 600), 75) << testing::ReadFile(dir / "term.log");
  EXPECT_NE(testing::ReadFile(dir / "term.log").find("stopped by a signal during the rendezvous"),
            std::string::npos)
      << testing::ReadFile(dir / "term.log");
  kill(server2, SIGKILL);
  WaitExit(server2, 10);
}

// The sockets process `pid` holds (a rank holds none before the rendezvous;
// inside it, one for the rendezvous and one for watching for a stop).
int SocketsHeld(int pid) {
  auto fds = Env::Default()->ListDir("/proc/" + std::to_string(pid) + "/fd");
  int n = 0;
  if (!fds.ok()) return 0;
  for (const std::string& fd : *fds) {
    char buf[64];
    const ssize_t len =
        ::readlink(("/proc/" + std::to_string(pid) + "/fd/" + fd).c_str(), buf, sizeof(buf) - 1);
    if (len > 7 && std::string(buf, 7) == "socket:") ++n;
  }
  return n;
}

// A rank stopped by a signal while its siblings wait in the rendezvous (here
// for a third rank that never comes) tells them through the store: they stop
// too (exit 75, naming it) instead of waiting out --timeout. Rank 1 stopped,
// then rank 0 (whose store goes with it: it waits for the others to read).
TEST(TrainTest, ARankStoppedDuringTheRendezvousStopsTheOthers) {
  TempDir dir;
  WriteToyDataset(dir / "data", 64);
  for (const int victim : {1, 0}) {
    SCOPED_TRACE("rank " + std::to_string(victim) + " stopped");
    const std::string env = "env WORLD_SIZE=3 MASTER_ADDR=127.0.0.1 MASTER_PORT=" +
                            std::to_string(testing::TrainingPort()) + " ";
    const std::string cmd = TrainCmd(dir / "data", "--batch-size 8 --timeout 600");
    const int r[2] = {Spawn(env + "RANK=0 " + cmd, dir / "log0"),
                      Spawn(env + "RANK=1 " + cmd, dir / "log1")};
    bool inside = false;
    for (int i = 0; i < 6000 && !inside; ++i) {  // up to 300 s on a busy machine
      inside = SocketsHeld(r[0]) >= 2 && SocketsHeld(r[1]) >= 2;
      if (!inside) std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    ASSERT_TRUE(inside) << testing::ReadFile(dir / "log1");
    const int other = 1 - victim;
    const std::string other_log = dir / ("log" + std::to_string(other));
    kill(r[victim], SIGTERM);
    EXPECT_EQ(WaitExit(r[victim], 300), 75);
    // Well inside --timeout 600: ended by the stopped rank's word, as it says.
    EXPECT_EQ(WaitExit(r[other], 300), 75) << testing::ReadFile(other_log);
    EXPECT_NE(testing::ReadFile(other_log).find("rank " + std::to_string(victim) +
                                                " was stopped by a signal during the rendezvous"),
              std::string::npos)
        << testing::ReadFile(other_log);
  }
}

// A process group of one rank that records every collective's tensors (their
// device, dtype and size) and completes it at once: a sum or broadcast over
// one rank leaves the tensors as they are. NCCL takes CUDA tensors only, so a
// collective on the wrong device is a failure of the first multi-GPU run.
class RecordingGroup : public CollectiveGroup {
 public:
  struct Call {
    std::string op;
    torch::Device device;
    int64_t numel;
  };
  RecordingGroup() : CollectiveGroup(0, 1) {}
  const std::string getBackendName() const override { return "recording"; }
  c10::intrusive_ptr<CollectiveWork> broadcast(std::vector<at::Tensor>& t,
                                               const c10d::BroadcastOptions&) override {
    return Record("broadcast", t);
  }
  c10::intrusive_ptr<CollectiveWork> allreduce(std::vector<at::Tensor>& t,
                                               const c10d::AllreduceOptions&) override {
    return Record("allreduce", t);
  }
  std::vector<Call> calls;

 private:
  struct Done : CollectiveWork {
    bool wait(std::chrono::milliseconds) override { return true; }
    bool isCompleted() override { return true; }
  };
  c10::intrusive_ptr<CollectiveWork> Record(const char* op, std::vector<at::Tensor>& t) {
    for (const auto& x : t) calls.push_back({op, x.device(), x.numel()});
    return c10::make_intrusive<Done>();
  }
};

// Every collective the trainer issues (the initial broadcast, BN buffers each
// step, gradient buckets, the epoch's figures, the evaluation's hits) gets
// tensors on the training device: CPU here, the rank's GPU where one is.
TEST(TrainTest, EveryCollectiveTakesTensorsOnTheTrainingDevice) {
  TempDir dir;
  WriteToyDataset(dir / "data", 64);
  WriteToyDataset(dir / "val", 24);
  std::vector<torch::Device> devices = {torch::kCPU};
  if (torch::cuda::is_available()) devices.push_back(torch::Device(torch::kCUDA, 0));
  for (const torch::Device& device : devices) {
    SCOPED_TRACE(device.str());
    TrainOptions o = TinyTrainOptions(dir / "data");
    o.val = dir / "val";
    o.epochs = 2;
    o.device = device.is_cuda() ? TrainDevice::kCuda : TrainDevice::kCpu;
    auto group = c10::make_intrusive<RecordingGroup>();
    const Status s = Train(o, DistEnv{}, group);
    ASSERT_TRUE(s.ok()) << s.ToString();
    int broadcasts = 0, reductions = 0, figures = 0, hits = 0;
    for (const auto& c : group->calls) {
      EXPECT_EQ(c.device, device) << c.op << " of " << c.numel << " elements";
      if (c.op == "broadcast") ++broadcasts;
      if (c.op == "allreduce") ++reductions;
      if (c.op == "allreduce" && c.numel == 12) ++figures;  // the epoch's figures (12 sums)
      if (c.op == "allreduce" && c.numel == 3) ++hits;      // top-1, top-5, count
    }
    const int steps = 2 * 64 / 8;
    EXPECT_GE(broadcasts, 1);  // the model once (and BN buffers every step, where there are any)
    EXPECT_GE(reductions, steps + 2 * 2);
    EXPECT_EQ(figures, 2);
    EXPECT_EQ(hits, 2);
  }
}

}  // namespace
}  // namespace shardkit
