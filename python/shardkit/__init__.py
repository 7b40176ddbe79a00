"""shardkit from Python: the C++ loader and shard format, for training scripts.

    import shardkit
    loader = shardkit.Loader("/scratch/imagenet-train", batch_size=256, transform="train")
    for epoch in range(epochs):
        loader.set_epoch(epoch)
        for images, labels in loader:      # uint8 [B, 3, 224, 224], int64 [B]
            ...

Every byte is read, checked, decoded and augmented by the C++ core (the same
code as shardkit-bench and shardkit-train); this module only adapts it to
PyTorch's conventions. Batches are not copied: `images` views the loader's
batch memory, which the loader does not reuse while any tensor views it.
"""
__all__ = ["Loader", "Dataset", "Writer", "CorruptionError", "ResolutionSchedule", "distributed_defaults",
           "normalize", "transforms"]

# The package's modules, one job each (what `import shardkit` offers is the
# names below; the modules are private):
#   _loader           Loader
#   _dataloader_args  DataLoader's arguments translated, a user's sampler checked
#   _samplers         loader.sampler, and a user's sampler as the epochs' order
#   _device           batches copied to a GPU (device=)
#   _dataset          Dataset
#   _writer           Writer
#   _normalize        normalize
#   _environment      distributed_defaults, the CPUs this process may use
#   _convert          arguments as the core takes them (ints, UTF-8, paths)
#   _messages         the "shardkit" logger, messages given once
#   transforms        torchvision transforms translated into the core's plan
from . import transforms
from ._dataset import Dataset
from ._environment import distributed_defaults
from ._loader import Loader
from ._normalize import normalize
from ._schedule import ResolutionSchedule
from ._shardkit import CorruptionError, __version__
from ._writer import Writer

_said = set()  # one-time messages already given in this process (_messages._once)

# shardkit.X in reprs, help() and pickles (a pickled Dataset names
# shardkit.Dataset), wherever X is defined.
for _public in (Dataset, Loader, Writer, distributed_defaults, normalize):
    _public.__module__ = __name__
del _public
