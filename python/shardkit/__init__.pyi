# Type information for editors and type checkers (PEP 561: py.typed).
import os
from typing import Any, Dict, Iterable, Iterator, List, Optional, Sequence, Tuple, Union

import torch

from . import transforms as transforms

__version__: str
_Path = Union[str, bytes, "os.PathLike[str]", "os.PathLike[bytes]"]
_Transform = Union[str, None, "transforms.Compose", Sequence[Any], Any]

class CorruptionError(RuntimeError): ...

class ResolutionSchedule:
    min_size: int
    max_size: int
    start_epoch: int
    end_epoch: int
    def __init__(self, min_size: int, max_size: int, start_epoch: int, end_epoch: int) -> None: ...
    def __call__(self, epoch: int) -> int: ...

def distributed_defaults() -> Tuple[int, int]: ...
def normalize(
    images: torch.Tensor,
    mean: Union[float, Sequence[float]] = ...,
    std: Union[float, Sequence[float]] = ...,
    dtype: Optional[torch.dtype] = ...,
    memory_format: Optional[torch.memory_format] = ...,
) -> torch.Tensor: ...

# loader.sampler without a sampler given (shardkit._samplers._Sampler).
class _Sampler:
    def set_epoch(self, epoch: int) -> None: ...
    def __iter__(self) -> Iterator[int]: ...
    @property
    def epoch(self) -> int: ...
    def __len__(self) -> int: ...

class Loader:
    path: str
    batch_size: int
    seed: int
    rank: int
    world_size: int
    transform: str
    drop_last: bool
    pin_memory: bool
    def __init__(
        self,
        path: _Path,
        batch_size: int = ...,
        *,
        workers: Optional[int] = ...,
        transform: _Transform = ...,
        size: Union[int, ResolutionSchedule] = ...,
        rank: Optional[int] = ...,
        world_size: Optional[int] = ...,
        seed: int = ...,
        shuffle: Union[bool, str] = ...,
        drop_last: bool = ...,
        layout: str = ...,
        prefetch: int = ...,
        on_corrupt: str = ...,
        skip_budget: int = ...,
        pin_memory: bool = ...,
        num_workers: Optional[int] = ...,
        prefetch_factor: Optional[int] = ...,
        read_depth: Optional[int] = ...,
        cache_dir: Optional[Union[str, os.PathLike]] = ...,
        cache_limit: int = ...,
        read_ahead_bytes: int = ...,
        distributed: Optional[bool] = ...,
        sampler: Optional[Iterable[int]] = ...,
        batch_sampler: Optional[Iterable[Sequence[int]]] = ...,
        generator: Optional[torch.Generator] = ...,
        device: Optional[Union[str, torch.device]] = ...,
        persistent_workers: bool = ...,
        multiprocessing_context: Any = ...,
        timeout: float = ...,
        pin_memory_device: str = ...,
    ) -> None: ...
    def __len__(self) -> int: ...
    def __iter__(self) -> Iterator[Tuple[torch.Tensor, torch.Tensor]]: ...
    def batches(self) -> Iterator[Tuple[torch.Tensor, torch.Tensor, torch.Tensor, int]]: ...
    @property
    def samples_per_epoch(self) -> int: ...
    @property
    def shuffle_mode(self) -> str: ...
    @property
    def shape(self) -> Tuple[int, int, int]: ...
    @property
    def epoch(self) -> int: ...
    def set_epoch(self, epoch: int) -> None: ...
    def set_size(self, size: int) -> None: ...
    # The sampler given (or the one inside the batch_sampler given), else the
    # loader's own order.
    @property
    def sampler(self) -> Union[_Sampler, Any]: ...
    @property
    def batch_sampler(self) -> Optional[Any]: ...
    @property
    def dataset(self) -> Dataset: ...
    def state_dict(self) -> Dict[str, Any]: ...
    def load_state_dict(self, state: Dict[str, Any]) -> None: ...
    # Seconds per stage, counts, and under on_corrupt='skip': corrupt_records
    # (distinct), samples_replaced (corrupt_skipped: its old name),
    # corrupt_units, corrupt_messages; fills_alone, fills_shared and
    # fill_settled (how the producer filled: alone or with the team).
    def stats(self) -> Dict[str, Any]: ...
    def reset_stats(self) -> None: ...

class Dataset:
    path: str
    manifest: Dict[str, Any]
    block_cache_bytes: int
    def __init__(self, path: _Path, *, block_cache_bytes: int = ...) -> None: ...
    def __len__(self) -> int: ...
    def __getitem__(self, index: int) -> Tuple[Any, int]: ...
    def key(self, index: int) -> str: ...
    @property
    def classes(self) -> List[str]: ...
    @property
    def kind(self) -> str: ...
    @property
    def shape(self) -> Optional[Tuple[int, int, int]]: ...

class Writer:
    path: str
    def __init__(
        self,
        path: _Path,
        kind: str = ...,  # "jpeg", "raw_u8" (or "raw") or "bytes"
        *,
        shape: Optional[Sequence[int]] = ...,
        classes: Sequence[str] = ...,
        shard_size: int = ...,
        compression: str = ...,
        overwrite: bool = ...,
    ) -> None: ...
    def add(self, data: Any, label: int, key: Optional[Union[str, bytes]] = ...) -> None: ...
    @property
    def records(self) -> int: ...
    @property
    def converted(self) -> int: ...
    def close(self) -> None: ...
    def __enter__(self) -> "Writer": ...
    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> bool: ...
