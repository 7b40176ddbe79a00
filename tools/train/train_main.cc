// shardkit-train: per-rank ResNet training under DDP, or, with
// --nproc-per-node N, a launcher that starts N local ranks (like torchrun).
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include <netinet/in.h>
#include <sys/socket.h>
#if defined(__GLIBC__)
#include <malloc.h>
#endif

#include "base/humanize.h"
#include "loader/loader.h"
#include "tools/common/cli.h"
#include "tools/train/dist_env.h"
#include "tools/train/train_cli.h"
#include "train/trainer.h"

namespace shardkit {
namespace {

// A free TCP port on this host for the local rendezvous.
int FreePort() {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a = {};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = 0;
  socklen_t len = sizeof(a);
  int port = 29500;
  if (fd >= 0 && bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0 &&
      getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0) {
    port = ntohs(a.sin_port);
  }
  if (fd >= 0) close(fd);
  return port;
}

volatile sig_atomic_t g_forward_signal = 0;
void RememberSignal(int sig) { g_forward_signal = sig; }

// Starts N copies of this program as ranks 0..N-1 and supervises them: a
// signal is forwarded to every rank; when one rank fails, the others are
// terminated (then killed after a grace period), as torchrun does.
int Launch(int nproc, int argc, char** argv) {
  std::vector<std::string> args;
  for (int i = 0; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--nproc-per-node") {
      ++i;
      continue;
    }
    if (a.rfind("--nproc-per-node=", 0) == 0) continue;
    args.push_back(a);
  }
  const int port = FreePort();
  std::vector<pid_t> pids;
  for (int r = 0; r < nproc; ++r) {
    pid_t pid = fork();
    if (pid == 0) {
      setenv("RANK", std::to_string(r).c_str(), 1);
      setenv("LOCAL_RANK", std::to_string(r).c_str(), 1);
      setenv("WORLD_SIZE", std::to_string(nproc).c_str(), 1);
      setenv("LOCAL_WORLD_SIZE", std::to_string(nproc).c_str(), 1);
      setenv("MASTER_ADDR", "127.0.0.1", 1);
      setenv("MASTER_PORT", std::to_string(port).c_str(), 1);
      std::vector<char*> cargs;
      for (auto& a : args) cargs.push_back(a.data());
      cargs.push_back(nullptr);
      execv("/proc/self/exe", cargs.data());
      std::perror("shardkit-train: exec");
      _exit(127);
    }
    pids.push_back(pid);
  }
  struct sigaction sa = {};
  sa.sa_handler = RememberSignal;
  sigaction(SIGTERM, &sa, nullptr);
  sigaction(SIGUSR1, &sa, nullptr);
  sigaction(SIGINT, &sa, nullptr);
  int result = 0;
  size_t alive = pids.size();
  auto deadline = std::chrono::steady_clock::time_point::max();
  while (alive > 0) {
    if (g_forward_signal != 0) {
      for (pid_t p : pids) {
        if (p > 0) kill(p, g_forward_signal == SIGINT ? SIGTERM : g_forward_signal);
      }
      g_forward_signal = 0;
    }
    int status = 0;
    pid_t done = waitpid(-1, &status, WNOHANG);
    if (done > 0) {
      for (auto& p : pids) {
        if (p == done) p = -1;
      }
      --alive;
      const int code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      if (code != 0 && result == 0) {
        result = code;
        if (code != kExitCheckpointedOnSignal) {
          std::fprintf(stderr,
                       "shardkit-train: a rank exited with status %d; stopping the others\n", code);
          for (pid_t p : pids) {
            if (p > 0) kill(p, SIGTERM);
          }
          deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
        }
      }
      continue;
    }
    if (std::chrono::steady_clock::now() > deadline) {
      for (pid_t p : pids) {
        if (p > 0) kill(p, SIGKILL);
      }
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return result;
}

// The trainer's events as shardkit-train prints them: notes and warnings on
// stderr, a progress line there (rewritten in place on a terminal), each
// epoch's JSON line on stdout. --quiet keeps the epochs' lines only.
class TrainPrinter {
 public:
  explicit TrainPrinter(bool quiet) : quiet_(quiet), tty_(isatty(2) != 0) {}

  TrainEvents Events() {
    TrainEvents e;
    e.epoch_end = [this](const EpochReport& r) { Epoch(r); };
    if (quiet_) return e;
    e.note = e.warning = [this](const std::string& line) { Line(line); };
    e.progress = [this](const StepProgress& p) { Progress(p); };
    return e;
  }

 private:
  void Line(const std::string& line) {
    EndProgressLine();
    std::fprintf(stderr, "%s\n", line.c_str());
  }
  void Progress(const StepProgress& p) {
    std::fprintf(stderr,
                 "%sepoch %llu/%d  step %lld/%lld  loss %.4f  lr %.4f  %.0f img/s  data-wait "
                 "%.0f%%  ETA %s%s",
                 tty_ ? "\r" : "", (unsigned long long)p.epoch, p.epochs, (long long)p.batch,
                 (long long)p.batches_per_epoch, p.loss, p.lr, p.images_per_sec,
                 100 * p.data_wait_fraction, FormatDuration(p.eta_seconds).c_str(),
                 tty_ ? "   " : "\n");
    std::fflush(stderr);
    open_line_ = tty_;
  }
  void Epoch(const EpochReport& r) {
    EndProgressLine();
    std::printf("%s\n", EpochReportJson(r).c_str());
    std::fflush(stdout);
  }
  // A progress line rewritten in place ends before anything else is printed.
  void EndProgressLine() {
    if (!open_line_) return;
    std::fprintf(stderr, "\n");
    open_line_ = false;
  }

  const bool quiet_, tty_;
  bool open_line_ = false;
};

}  // namespace
}  // namespace shardkit

// Every step allocates and frees the same activation and gradient tensors, a
// few MB each. With glibc's defaults the larger ones come from fresh mmaps
// and the heap's freed top goes back to the kernel, so each step faults the
// same memory in again: 10% of the time of a ResNet-20 step on CPU went to
// page faults. Keep freed memory in the heap for the next step instead.
static void KeepFreedMemoryForReuse() {
#if defined(__GLIBC__)
  mallopt(M_MMAP_THRESHOLD, 32 << 20);  // glibc's maximum; larger blocks are still mapped
  mallopt(M_TRIM_THRESHOLD, 1 << 30);
#endif
}

int main(int argc, char** argv) {
  using namespace shardkit;
  KeepFreedMemoryForReuse();
  TrainOptions o;
  TrainToolFlags tool;
  CLI::App app{
      "shardkit-train: train a ResNet from shards, one process per GPU (or CPU rank), under DDP.\n"
      "Rank and world come from torchrun's variables (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR,\n"
      "MASTER_PORT) or SLURM's (SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID, the job's node list)."};
  AddTrainFlags(app, &o, &tool);
  if (int rc = cli::Parse(app, argc, argv, "shardkit-train"); rc >= 0) return rc;
  o.mmap = !tool.no_mmap;
  if (o.synthetic && (!o.data.empty() || !o.val.empty())) {
    return cli::Fail("shardkit-train",
                     "--synthetic trains on random batches: give no --data or --val");
  }
  if (!o.synthetic && o.data.empty()) {
    return cli::Fail("shardkit-train", "--data is required (or --synthetic)",
                     "run shardkit-train --help for the flags");
  }

  if (tool.nproc > 0 && std::getenv("RANK") == nullptr) return Launch(tool.nproc, argc, argv);

  auto env = DistEnvFromEnvironment();
  if (!env.ok()) return cli::Fail("shardkit-train", env.status());
  if (o.threads == 0) {
    const char* local = std::getenv("LOCAL_WORLD_SIZE");
    const char* slurm_local = std::getenv("SLURM_NTASKS_PER_NODE");
    int per_node = local ? std::atoi(local) : (slurm_local ? std::atoi(slurm_local) : 1);
    o.threads = std::max<int>(
        1, static_cast<int>(std::thread::hardware_concurrency()) / std::max(1, per_node));
  }
  InstallStopSignalHandlers();
  Status s;
  // LibTorch and c10d report with exceptions: one line for users, no backtrace.
  try {
    TrainPrinter printer(tool.quiet);
    s = Train(o, *env, printer.Events());
  } catch (const c10::Error& e) {
    s = Status::IOError(e.what_without_backtrace());
  } catch (const std::exception& e) {
    s = Status::IOError(e.what());
  }
  // A rendezvous that timed out or was stopped may leave a helper thread
  // blocked in c10d; leave without running static destructors under it.
  std::fflush(nullptr);
  if (s.IsAborted()) {
    std::fprintf(stderr, "shardkit-train: rank %d: %s\n", env->rank, s.message().c_str());
    std::fflush(stderr);
    std::_Exit(kExitCheckpointedOnSignal);
  }
  if (!s.ok()) {
    std::string msg = s.message().substr(0, s.message().find('\n'));
    if (msg.size() > 2000) msg = msg.substr(0, 2000) + "...";
    const int rc = cli::Fail(("shardkit-train: rank " + std::to_string(env->rank)).c_str(), msg,
                             env->world_size > 1
                                 ? "when one rank fails the others stop at their next collective; "
                                   "look for the first rank's error"
                                 : "");
    std::fflush(nullptr);
    std::_Exit(rc);
  }
  return 0;
}
