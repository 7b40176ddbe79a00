// Checkpoint (de)serialisation through the pickle format.
#include "train/checkpoint.h"

#include <fcntl.h>
#include <unistd.h>

#include <cstdio>
#include <new>

#include "base/crc32c.h"
#include "shard/manifest.h"
#include "storage/file_io.h"
#include "storage/output_file.h"

namespace shardkit {
namespace {

// What a checkpoint stores: a contiguous (NCHW) host copy whatever the
// training layout or device, which is what Python expects.
torch::Tensor HostCopy(const torch::Tensor& t) {
  return t.detach().to(torch::kCPU).clone(torch::MemoryFormat::Contiguous);
}

std::string DirName(const std::string& path) {
  const size_t slash = path.rfind('/');
  return slash == std::string::npos ? "." : path.substr(0, slash);
}

}  // namespace

std::map<std::string, torch::Tensor> StateDict(torch::nn::Module& model) {
  std::map<std::string, torch::Tensor> sd;
  for (const auto& p : model.named_parameters()) sd[p.key()] = HostCopy(p.value());
  for (const auto& b : model.named_buffers()) sd[b.key()] = HostCopy(b.value());
  return sd;
}

Status LoadStateDict(torch::nn::Module& model, const std::map<std::string, torch::Tensor>& sd,
                     bool strict) {
  torch::NoGradGuard no_grad;
  size_t used = 0;
  auto load = [&](const std::string& name, torch::Tensor t) -> Status {
    auto it = sd.find(name);
    if (it == sd.end()) {
      return strict ? Status::InvalidArgument("checkpoint has no '" + name + "'") : Status::OK();
    }
    if (it->second.sizes() != t.sizes()) {
      return Status::InvalidArgument("'" + name + "' has shape " + c10::str(it->second.sizes()) +
                                     " in the checkpoint, " + c10::str(t.sizes()) +
                                     " in the model");
    }
    t.copy_(it->second);
    ++used;
    return Status::OK();
  };
  for (auto& p : model.named_parameters()) SK_RETURN_IF_ERROR(load(p.key(), p.value()));
  for (auto& b : model.named_buffers()) SK_RETURN_IF_ERROR(load(b.key(), b.value()));
  if (strict && used != sd.size()) {
    return Status::InvalidArgument("checkpoint has " + std::to_string(sd.size() - used) +
                                   " entries the model lacks");
  }
  return Status::OK();
}

namespace {

c10::Dict<std::string, torch::Tensor> ToDict(const std::map<std::string, torch::Tensor>& m) {
  c10::Dict<std::string, torch::Tensor> d;
  for (const auto& [k, v] : m) d.insert(k, v);
  return d;
}

// CRC32C over what a checkpoint holds, in a fixed order: every tensor's name,
// dtype, shape and bytes (model, then momentum, each sorted by name), then
// the position. The pickle format has no checksum of its own, so a flipped
// bit in a tensor would otherwise load silently.
uint32_t ContentChecksum(const std::map<std::string, torch::Tensor>& model,
                         const std::map<std::string, torch::Tensor>& momentum,
                         const std::string& position) {
  uint32_t crc = 0;
  auto add = [&](const void* p, size_t n) { crc = crc32c::Extend(crc, p, n); };
  for (const auto* m : {&model, &momentum}) {
    for (const auto& [name, t] : *m) {
      const torch::Tensor c = t.detach().to(torch::kCPU).contiguous();
      add(name.data(), name.size());
      const int8_t dtype = static_cast<int8_t>(c.scalar_type());
      add(&dtype, 1);
      for (int64_t d : c.sizes()) add(&d, sizeof(d));
      add(c.data_ptr(), c.numel() * c.element_size());
    }
  }
  add(position.data(), position.size());
  return crc;
}

// What the checksum covers besides the tensors. `loader_json` is the loader
// state as stored (format 3 and later), so that older states check out as
// they were written.
std::string PositionString(const TrainPosition& p, int format, const std::string& loader_json) {
  char buf[512];
  if (format == 2) {
    const LoaderState& d = p.data;
    std::snprintf(buf, sizeof(buf), "%lld/%lld/%lld/%lld/%lld/%lld/%.17g/%s/%lld/%lld",
                  (long long)d.epoch, (long long)d.batch, (long long)p.global_step,
                  (long long)d.seed, (long long)d.world_size, (long long)d.batch_size, p.loss_scale,
                  p.arch.c_str(), (long long)p.num_classes, (long long)p.in_channels);
    return buf;
  }
  std::snprintf(buf, sizeof(buf), "%lld/%.17g/%s/%lld/%lld/", (long long)p.global_step,
                p.loss_scale, p.arch.c_str(), (long long)p.num_classes, (long long)p.in_channels);
  std::string s = buf + loader_json;
  if (format >= 4) s += "/" + std::to_string(p.schedule_samples);
  return s;
}

std::map<std::string, torch::Tensor> FromDict(const c10::IValue& v) {
  std::map<std::string, torch::Tensor> m;
  for (const auto& e : v.toGenericDict()) m[e.key().toStringRef()] = e.value().toTensor();
  return m;
}

Status WritePickle(const std::string& path, const c10::IValue& value) {
  std::vector<char> bytes;
  try {
    bytes = torch::pickle_save(value);
  } catch (const std::exception& e) {
    return Status::IOError(path + ": serialising failed: " + e.what());
  }
  return WriteOutputFile(path, std::string_view(bytes.data(), bytes.size()));
}

}  // namespace

Status SaveCheckpoint(const std::string& path, torch::nn::Module& model, Sgd& opt,
                      const TrainPosition& pos) {
  c10::impl::GenericDict meta(c10::StringType::get(), c10::AnyType::get());
  const std::string loader_json = LoaderStateToJson(pos.data);
  meta.insert("loader_state", loader_json);
  meta.insert("epoch", static_cast<int64_t>(pos.data.epoch));  // for a reader's eyes
  meta.insert("global_step", pos.global_step);
  meta.insert("schedule_samples", pos.schedule_samples);
  meta.insert("loss_scale", pos.loss_scale);
  meta.insert("arch", pos.arch);
  meta.insert("num_classes", pos.num_classes);
  meta.insert("in_channels", pos.in_channels);
  std::map<std::string, torch::Tensor> mom;
  for (const auto& [k, v] : opt.momentum()) mom[k] = HostCopy(v);
  const std::map<std::string, torch::Tensor> sd = StateDict(model);
  c10::impl::GenericDict top(c10::StringType::get(), c10::AnyType::get());
  top.insert("model", ToDict(sd));
  top.insert("momentum", ToDict(mom));
  top.insert("meta", meta);
  top.insert("format", std::string(kCheckpointFormat));
  top.insert("crc32c",
             static_cast<int64_t>(ContentChecksum(sd, mom, PositionString(pos, 4, loader_json))));
  // The checkpoint being replaced stays as prev.pt (a hard link, so last.pt
  // is never missing): a later damaged last.pt leaves a good one to go back to.
  if (Env::Default()->FileExists(path)) {
    const std::string prev = JoinPath(DirName(path), kPreviousCheckpointName);
    Env::Default()->RemoveFile(prev + ".tmp").IgnoreError();
    // The file last.pt names (a link to a checkpoint elsewhere is followed:
    // prev.pt must hold the old bytes, not the link that will show the new).
    if (::linkat(AT_FDCWD, path.c_str(), AT_FDCWD, (prev + ".tmp").c_str(), AT_SYMLINK_FOLLOW) == 0)
      Env::Default()->RenameFile(prev + ".tmp", prev).IgnoreError();
    // rename() between two links to one file (prev.pt already last.pt's,
    // after a save that failed) does nothing and leaves the source.
    Env::Default()->RemoveFile(prev + ".tmp").IgnoreError();
  }
  return WritePickle(path, top);
}

Status LoadCheckpoint(const std::string& path, torch::nn::Module& model, Sgd* opt,
                      TrainPosition* pos) {
  std::vector<char> bytes;
  {  // read once into what pickle_load takes: the file is in memory once, not twice
    SK_ASSIGN_OR_RETURN(auto f, Env::Default()->OpenForReads(path));
    if (f->size() > (16ull << 30)) {
      return Status::InvalidArgument(path + ": " + std::to_string(f->size()) +
                                     " bytes, more than a checkpoint (16 GiB) can be");
    }
    try {
      bytes.resize(static_cast<size_t>(f->size()));
    } catch (const std::bad_alloc&) {
      return Status::IOError(path + ": no memory to read its " + std::to_string(f->size()) +
                             " bytes");
    }
    SK_RETURN_IF_ERROR(f->Read(0, bytes.size(), bytes.data()));
  }
  try {
    c10::IValue v = torch::pickle_load(bytes);
    std::vector<char>().swap(bytes);
    if (!v.isGenericDict()) {
      return Status::Corruption(path + ": not a shardkit checkpoint (it holds a " + v.tagKind() +
                                ", not a dict)");
    }
    auto top = v.toGenericDict();
    const std::string format =
        top.contains("format") && top.at("format").isString() ? top.at("format").toStringRef() : "";
    const int version = format == kCheckpointFormat    ? 4
                        : format == kCheckpointFormat3 ? 3
                        : format == kCheckpointFormat2 ? 2
                                                       : 0;
    if (version == 0) {
      return Status::Corruption(path + ": not a shardkit checkpoint (format " + kCheckpointFormat +
                                ")");
    }
    for (const char* key : {"model", "momentum", "meta", "crc32c"}) {
      if (!top.contains(key)) {
        return Status::Corruption(path + ": checkpoint has no '" + key + "'");
      }
      const c10::IValue& v = top.at(key);
      if (std::string(key) == "crc32c" ? !v.isInt() : !v.isGenericDict()) {
        return Status::Corruption(path + ": checkpoint's '" + key + "' is a " + v.tagKind() +
                                  ", not " + (std::string(key) == "crc32c" ? "an int" : "a dict"));
      }
    }
    for (const char* key : {"model", "momentum"}) {
      for (const auto& e : top.at(key).toGenericDict()) {
        if (!e.key().isString() || !e.value().isTensor()) {
          return Status::Corruption(path + ": checkpoint's '" + key +
                                    "' holds an entry that is not a named tensor");
        }
      }
    }
    const std::map<std::string, torch::Tensor> sd = FromDict(top.at("model"));
    const std::map<std::string, torch::Tensor> mom = FromDict(top.at("momentum"));
    auto meta = top.at("meta").toGenericDict();
    std::string loader_json;
    if (version == 2) {  // the data position without what decides the batches: not compared
      pos->data = LoaderState();
      pos->data.epoch = static_cast<uint64_t>(meta.at("epoch").toInt());
      pos->data.batch = static_cast<uint64_t>(meta.at("batch_index").toInt());
      pos->data.seed = static_cast<uint64_t>(meta.at("seed").toInt());
      pos->data.world_size = static_cast<uint64_t>(meta.at("world_size").toInt());
      pos->data.batch_size = static_cast<uint64_t>(meta.at("batch_size").toInt());
    } else {
      loader_json = meta.at("loader_state").toStringRef();
      Result<LoaderState> data = LoaderStateFromJson(loader_json);
      if (!data.ok()) return Status::Corruption(path + ": " + data.status().message());
      pos->data = *data;
    }
    pos->global_step = meta.at("global_step").toInt();
    pos->schedule_samples =
        version >= 4
            ? meta.at("schedule_samples").toInt()
            : pos->global_step * static_cast<int64_t>(pos->data.world_size * pos->data.batch_size);
    pos->loss_scale = meta.at("loss_scale").toDouble();
    pos->arch = meta.at("arch").toStringRef();
    pos->num_classes = meta.at("num_classes").toInt();
    pos->in_channels = meta.at("in_channels").toInt();
    const uint32_t want = static_cast<uint32_t>(top.at("crc32c").toInt());
    const uint32_t got = ContentChecksum(sd, mom, PositionString(*pos, version, loader_json));
    if (got != want) {
      return Status::Corruption(path + ": checkpoint is damaged (content checksum " +
                                Crc32cHex(got) + ", written as " + Crc32cHex(want) +
                                "); the previous one, if any, is " +
                                JoinPath(DirName(path), kPreviousCheckpointName));
    }
    SK_RETURN_IF_ERROR(LoadStateDict(model, sd).WithContext(path));
    auto device = model.parameters().front().device();
    if (opt != nullptr) {
      // Momentum only for parameters the model has, each of its shape (the
      // checksum proves the bytes, not that they fit this model).
      std::map<std::string, torch::Tensor> params;
      for (const auto& p : model.named_parameters()) params[p.key()] = p.value();
      for (const auto& [k, t] : mom) {
        auto it = params.find(k);
        if (it == params.end()) {
          return Status::Corruption(path + ": momentum for '" + k + "', which the model lacks");
        }
        if (it->second.sizes() != t.sizes()) {
          return Status::Corruption(path + ": momentum '" + k + "' has shape " +
                                    c10::str(t.sizes()) + ", the parameter " +
                                    c10::str(it->second.sizes()));
        }
      }
      opt->momentum().clear();
      for (const auto& [k, t] : mom) opt->momentum()[k] = t.to(device);
    }
  } catch (const std::exception& e) {
    // LibTorch's type checks throw "INTERNAL ASSERT FAILED ... report a bug
    // to PyTorch" with a backtrace: a wrong-typed field, said as one.
    std::string why = e.what();
    why = why.substr(0, why.find('\n'));
    if (why.find("INTERNAL ASSERT") != std::string::npos || why.find("Expected") == 0) {
      why = "a field holds a value of the wrong type (not a checkpoint shardkit-train wrote)";
    }
    return Status::Corruption(path + ": cannot read checkpoint: " + why);
  }
  return Status::OK();
}

Status ExportWeights(const std::string& path, torch::nn::Module& model) {
  return WritePickle(path, ToDict(StateDict(model)));
}

}  // namespace shardkit
