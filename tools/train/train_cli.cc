// The flags of shardkit-train, with their ranges (see train/train_options.h).
#include <CLI/CLI.hpp>
#include <string>
#include <vector>

#include "loader/loader.h"
#include "tools/common/cli.h"
#include "tools/train/train_cli.h"

namespace shardkit {

namespace {

// The input's side: fixed (--size) or a schedule over the epochs, and validation's.
void AddInputSizeFlags(CLI::App& app, TrainOptions* o) {
  app.add_option("--size", o->size, "input side for JPEG datasets")
      ->capture_default_str()
      ->check(cli::IntIn(8, 4096));
  app.add_option_function<std::string>(
         "--resolution-schedule",
         [o](const std::string& s) {
           if (auto r = ParseResolutionSchedule(s); r.ok()) o->resolution = *r;
         },
         "JPEG datasets: the training side ramps from MIN (until epoch START) to MAX (from "
         "epoch END) in steps of 32, as FFCV's recipes train (160:192:65:76 for 88 epochs); "
         "replaces --size, epochs count from 0")
      ->type_name("MIN:MAX:START:END")
      ->check(CLI::Validator(
          [](std::string& s) -> std::string {
            // CLI11 names the flag itself: "--resolution-schedule: TEXT: why".
            auto r = ParseResolutionSchedule(s);
            const std::string flag = "--resolution-schedule ";
            std::string why = r.ok() ? "" : r.status().message();
            return why.rfind(flag, 0) == 0 ? why.substr(flag.size()) : why;
          },
          ""));
  app.add_option("--val-size", o->val_size,
                 "JPEG datasets: the validation CenterCrop's side (its Resize: side / 0.875); "
                 "0: the last training side")
      ->capture_default_str()
      ->check(cli::IntIn(0, 4096));
}

}  // namespace

void AddTrainFlags(CLI::App& app, TrainOptions* o, TrainToolFlags* tool) {
  app.add_option("--data", o->data,
                 "training dataset: a directory, or s3://BUCKET/PREFIX or http(s)://HOST/PATH "
                 "(required unless --synthetic)");
  app.add_option("--cache-dir", o->cache_dir,
                 "a --data or --val on object storage is kept in this node-local directory as it "
                 "is read (shared by the node's ranks and by later jobs): epochs after the first "
                 "read it from there");
  cli::AddBytes(&app, "--cache-limit", &o->cache_limit,
                "the node cache's size at most (50G, 512M; default: no limit)");
  app.add_option("--val", o->val,
                 "validation dataset (a directory or URL, as --data; top-1/top-5 every epoch)");
  std::vector<std::string> archs;  // the models' one name table (train/models/model_spec.h)
  std::string arch_help;
  for (const auto& a : kModelArchNames) {
    archs.emplace_back(a.name);
    arch_help += (arch_help.empty() ? "" : " | ") + archs.back();
  }
  app.add_option("--arch", o->arch, arch_help)->capture_default_str()->check(cli::OneOf(archs));
  app.add_option("--epochs", o->epochs, "epochs")
      ->capture_default_str()
      ->check(cli::IntIn(1, 1000000));
  app.add_option("--batch-size", o->batch_size, "batch size per rank")
      ->capture_default_str()
      ->check(cli::IntIn(1, 65536));
  app.add_option("--workers", o->workers, "loader threads per rank")
      ->capture_default_str()
      ->check(cli::IntIn(1, kMaxLoaderWorkers));
  app.add_flag("--no-mmap", tool->no_mmap,
               "read shards with pread, not read-only mappings (shards replaced in place)");
  app.add_option("--lr", o->lr, "learning rate for a global batch of 256 (scaled linearly)")
      ->capture_default_str()
      ->check(cli::RealIn(0, 1000, /*open_lo=*/true));
  app.add_option("--momentum", o->momentum, "SGD momentum")
      ->capture_default_str()
      ->check(cli::RealIn(0, 1));
  app.add_option("--weight-decay", o->weight_decay, "weight decay")
      ->capture_default_str()
      ->check(cli::RealIn(0, 1));
  app.add_flag("--nesterov", o->nesterov, "Nesterov momentum");
  app.add_option("--warmup-epochs", o->warmup_epochs, "linear warmup")
      ->capture_default_str()
      ->check(cli::RealIn(0, 1000000));
  cli::AddEnum(&app, "--schedule", &o->schedule, kLrScheduleNames,
               "learning-rate decay (step: x0.1 at 30/60/80% of training)");
  app.add_option("--label-smoothing", o->label_smoothing, "label smoothing, in [0, 1)")
      ->capture_default_str()
      ->check(cli::RealIn(0, 0.999));
  app.add_flag("--amp", o->amp, "mixed precision on CUDA (autocast; fp16 with loss scaling)");
  cli::AddEnum(&app, "--amp-dtype", &o->amp_dtype, kAmpDtypeNames, "autocast's dtype");
  app.add_flag(
      "--channels-last,!--no-channels-last", o->channels_last,
      "channels-last memory format for 4-d weights and inputs (default; ~10% faster on CPU here)");
  AddInputSizeFlags(app, o);
  app.add_option("--num-classes", o->num_classes,
                 "classifier outputs (0: the dataset's classes; torchvision's resnet50() has 1000, "
                 "whatever the data)")
      ->capture_default_str()
      ->check(cli::IntIn(0, 1 << 20));
  cli::AddEnum(&app, "--stem", &o->stem, kStemNames,
               "ResNet stem: torchvision's 7x7/2 conv + max-pool at every size, the small one "
               "(3x3/1, no max-pool), or auto (small under 64 px)");
  cli::AddEnum(
      &app, "--normalize", &o->normalize, kNormalizeNames,
      "on the device: ImageNet mean/std after /255, or none (/255 only: ToTensor's values)");
  app.add_option("--checkpoint-dir", o->checkpoint_dir,
                 "rank 0 writes last.pt here every epoch and on SIGTERM/SIGUSR1/SIGINT/SIGHUP");
  app.add_flag("--resume", o->resume, "continue from CHECKPOINT_DIR/last.pt if it exists");
  app.add_option("--export", o->export_path,
                 "write the final weights as a state dict torch.load reads");
  app.add_option("--metrics", o->metrics_path, "append one JSON line per epoch (rank 0)");
  app.add_option("--nproc-per-node", tool->nproc,
                 "start N local ranks (like torchrun --nproc-per-node)")
      ->check(cli::IntIn(0, 256));
  app.add_option("--seed", o->seed, "seed (model init, data order, augmentation)")
      ->capture_default_str()
      ->check(cli::Unsigned());
  app.add_option("--max-steps", o->max_steps,
                 "stop after this many optimizer steps in total (0: none)")
      ->check(cli::IntIn(0, 1ll << 50));
  app.add_option("--threads", o->threads, "torch threads per rank (0: cores / local ranks)")
      ->check(cli::IntIn(0, cli::kMaxThreads));
  app.add_option("--timeout", o->timeout_s, "seconds before a rendezvous or collective gives up")
      ->capture_default_str()
      ->check(cli::IntIn(1, 7 * 24 * 3600));
  app.add_option("--bucket-mb", o->bucket_mb, "gradient bucket size")
      ->capture_default_str()
      ->check(cli::RealIn(0, 4096, true));
  app.add_option("--prefetch", o->prefetch, "batches the loader decodes ahead")
      ->capture_default_str()
      ->check(cli::IntIn(1, 1024));
  cli::AddEnum(&app, "--device", &o->device, kTrainDeviceNames, "where to train");
  cli::AddEnum(&app, "--backend", &o->backend, kDistBackendNames,
               "collectives: auto is nccl on CUDA, gloo on CPU; gloo lets ranks share a GPU");
  app.add_flag("--synthetic", o->synthetic,
               "train on random batches made once on the device, without the loader (the ceiling "
               "for data-loading figures); --size, --synthetic-classes, --synthetic-steps");
  app.add_option("--synthetic-classes", o->synthetic_classes, "classes of --synthetic data")
      ->capture_default_str()
      ->check(cli::IntIn(2, 1 << 20));
  app.add_option("--synthetic-steps", o->synthetic_steps, "steps per epoch of --synthetic data")
      ->capture_default_str()
      ->check(cli::IntIn(1, 1ll << 40));
  app.add_option("--print-every", o->print_every, "progress line every N steps")
      ->capture_default_str()
      ->check(cli::IntIn(1, 1 << 30));
  cli::AddEnum(&app, "--on-corrupt", &o->on_corrupt, kCorruptPolicyNames,
               "a corrupt record ends training, or is replaced and counted");
  app.add_option("--skip-budget", o->skip_budget,
                 "with --on-corrupt skip: fail after this many corrupt records or blocks per "
                 "rank (a corrupt compressed block counts once)")
      ->capture_default_str()
      ->check(cli::IntIn(0, 1ll << 40));
  app.add_flag("--quiet", tool->quiet, "no progress line");
}

}  // namespace shardkit
