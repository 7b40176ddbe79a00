"""What the process's surroundings say: its rank and world size
(torch.distributed, torchrun, SLURM) and its share of the CPUs."""
import os


def _env_int(*names):
    for name in names:
        value = os.environ.get(name)
        if value not in (None, ""):
            try:
                return int(value)
            except ValueError:
                raise ValueError("%s=%r is not an integer" % (name, value)) from None
    return None


def _distributed_defaults():
    """(rank, world_size, where they came from, or None for the fallback)."""
    try:
        import torch.distributed as dist

        if dist.is_available() and dist.is_initialized():
            return dist.get_rank(), dist.get_world_size(), "torch.distributed"
    except ImportError:
        pass
    rank, world = _env_int("RANK"), _env_int("WORLD_SIZE")
    if rank is not None and world is not None:
        return rank, world, "RANK/WORLD_SIZE"
    rank, world = _env_int("SLURM_PROCID"), _env_int("SLURM_NTASKS")
    if rank is not None and world is not None:
        return rank, world, "SLURM_PROCID/SLURM_NTASKS"
    return 0, 1, None


def distributed_defaults():
    """(rank, world_size): torch.distributed's when it is initialised, else
    torchrun's RANK/WORLD_SIZE, else SLURM's SLURM_PROCID/SLURM_NTASKS, else (0, 1)."""
    return _distributed_defaults()[:2]


def _default_workers():
    """This process's share of the CPUs it may run on: the cores of its
    affinity mask divided among the ranks of this node."""
    try:
        cpus = len(os.sched_getaffinity(0))
    except AttributeError:
        cpus = os.cpu_count() or 1
    local = _env_int("LOCAL_WORLD_SIZE", "SLURM_NTASKS_PER_NODE") or 1
    return max(1, cpus // max(1, local))
