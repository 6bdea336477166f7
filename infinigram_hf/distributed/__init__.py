"""∞-gram indexes beyond one machine, on Ray: a distributed build and fan-out serving.

    >>> from infinigram_hf.distributed import build_index, ShardRouter       # doctest: +SKIP
    >>> build_index("corpus/*.jsonl", "/shared/idx", tokenizer=tok, address="auto")  # doctest: +SKIP
    >>> router = ShardRouter.start("/shared/idx", groups=2)                     # doctest: +SKIP
    >>> router.infgram_ntd(tok.encode("def main("))                             # doctest: +SKIP

Needs the `ray` extra (pip install 'infinigram-hf[ray]'); this is the only package that imports
Ray. See README "Beyond one machine" and docs/SCALE.md.
"""
from ._ray import require_ray

require_ray()

from .build import build_index  # noqa: E402
from .serving import DeadlineExceeded, ShardGroup, ShardGroupUnavailable, ShardRouter, open_shards  # noqa: E402

__all__ = ["build_index", "ShardRouter", "ShardGroup", "ShardGroupUnavailable", "DeadlineExceeded", "open_shards"]
