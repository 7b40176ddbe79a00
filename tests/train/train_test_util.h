// What the training tests share (one executable, train_test, of every file
// here): the built shardkit-train, a toy dataset and the `tiny` model on it,
// exports read back, and the options of a small in-process run.
#pragma once

#include <map>
#include <string>

#include "train/checkpoint.h"
#include "train/models/models.h"
#include "train/trainer.h"

namespace shardkit::testing {

inline const std::string kTrain = SHARDKIT_TRAIN_TOOL;
constexpr char kPython[] = "/usr/bin/python3";

// A raw dataset of n 8x8x1 images whose mean brightness encodes the label.
void WriteToyDataset(const std::string& dir, int n, int classes = 4,
                     const std::string& class_prefix = "c");

// The tensors of a state dict that shardkit-train exported (--export).
std::map<std::string, torch::Tensor> LoadExport(const std::string& path);
// The largest difference between two state dicts' values (same keys expected).
double MaxDiff(const std::map<std::string, torch::Tensor>& a,
               const std::map<std::string, torch::Tensor>& b);

// The `tiny` model with one input channel, for checkpoint unit tests.
torch::nn::AnyModule TinyModel(int num_classes = 3);
// Reads the position of a checkpoint of the `tiny` model on WriteToyDataset's data.
bool ReadToyCheckpoint(const std::string& path, TrainPosition* pos);

// shardkit-train on `data` with the `tiny` model, one worker and thread, quiet.
std::string TrainCmd(const std::string& data, const std::string& extra);
// The options of an in-process run of the `tiny` model on `data`.
TrainOptions TinyTrainOptions(const std::string& data);

}  // namespace shardkit::testing
