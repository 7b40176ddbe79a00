"""The package's logger, and messages given once per process."""
import logging
import sys

_log = logging.getLogger("shardkit")


def _once(key, log, message):
    """log(message) the first time `key` comes in this process. The keys
    given are kept in the package's ``shardkit._said``, looked up at each
    call, so that replacing it (as a test does) starts afresh."""
    said = sys.modules[__package__]._said
    if key not in said:
        said.add(key)
        log(message)
