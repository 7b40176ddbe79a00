// Training state that survives a restart: the model, the optimizer's momentum
// (train/sgd.h) and the position. Checkpoints are pickled dicts
// (torch::pickle_save), so Python's torch.load reads them: ckpt["model"] is a
// torchvision-compatible state dict. Written atomically (temporary file, fsync, rename): an
// interrupted write leaves the previous checkpoint intact.
#pragma once

#include <torch/torch.h>

#include <map>
#include <string>
#include <vector>

#include "base/status.h"
#include "loader/loader_state.h"
#include "train/sgd.h"

namespace shardkit {

// Where training is: resuming from it continues exactly where it stopped.
// The data position is the loader's own state (LoaderState: epoch, next
// batch, and what decides the batches), checked by the loader on resume.
struct TrainPosition {
  LoaderState data;
  int64_t global_step = 0;  // optimizer steps taken
  // The learning-rate schedule's position: the global batch (ranks x batch)
  // summed over the steps taken, so that a resume with another global batch
  // keeps its place in the schedule (format 3: global_step x its global batch).
  int64_t schedule_samples = 0;
  double loss_scale = 0;  // fp16 dynamic loss scale (0: none)
  std::string arch;
  int64_t num_classes = 0;
  int64_t in_channels = 0;
};

// Model state as a name -> tensor map (parameters and buffers), detached, on CPU.
std::map<std::string, torch::Tensor> StateDict(torch::nn::Module& model);
Status LoadStateDict(torch::nn::Module& model, const std::map<std::string, torch::Tensor>& sd,
                     bool strict = true);

// Checkpoints carry a CRC32C of their tensors and position; LoadCheckpoint
// refuses (Corruption, naming the file) one whose contents do not match.
// SaveCheckpoint keeps the checkpoint it replaces as prev.pt beside it.
// Format 4 holds the LoaderState (as JSON) and the schedule's position;
// formats 3 (no schedule position) and 2 (epoch, batch, seed, world and batch
// size only) are still read.
inline constexpr char kCheckpointFormat[] = "shardkit-checkpoint-4";
inline constexpr char kCheckpointFormat3[] = "shardkit-checkpoint-3";
inline constexpr char kCheckpointFormat2[] = "shardkit-checkpoint-2";
inline constexpr char kPreviousCheckpointName[] = "prev.pt";
Status SaveCheckpoint(const std::string& path, torch::nn::Module& model, Sgd& opt,
                      const TrainPosition& pos);
Status LoadCheckpoint(const std::string& path, torch::nn::Module& model, Sgd* opt,
                      TrainPosition* pos);
// Just the state dict, as a plain dict: model.load_state_dict(torch.load(path)).
Status ExportWeights(const std::string& path, torch::nn::Module& model);

}  // namespace shardkit
