"""`redis-capped`: Redis Streams whose streams are trimmed to about `cap` entries by default
(XADD MAXLEN ~), a flavour built on streambench's Redis Streams platform through its public
records only."""

from dataclasses import replace

from loadgen.core.platform import parse_non_negative
from loadgen.core.target import OptionSpec
from loadgen.platforms.redis_streams import PLATFORMS as REDIS

_base = REDIS[0]
_options = {k: v for k, v in _base.options.items() if k != "maxlen"}
_options["maxlen"] = OptionSpec("trim each stream to about this many entries", default=100_000,
                                parse=parse_non_negative)

PLATFORMS = [
    replace(_base, name="redis-capped",
            summary="Redis Streams, each stream capped at about 100,000 entries (a plugin)",
            options=_options, faults={"local": ("kill", "start", "restart")}),
]
