"""shardkit.ResolutionSchedule: the core's class, its arguments taken as the
package takes every integer (exactly, or a ValueError naming them)."""
from ._convert import _int
from ._shardkit import ResolutionSchedule as _CoreSchedule


class ResolutionSchedule(_CoreSchedule):
    __doc__ = _CoreSchedule.__doc__
    __module__ = "shardkit"

    def __init__(self, min_size, max_size, start_epoch, end_epoch):
        super().__init__(_int("min_size", min_size), _int("max_size", max_size),
                         _int("start_epoch", start_epoch), _int("end_epoch", end_epoch))

    def __call__(self, epoch):
        return super().__call__(_int("epoch", epoch))
