"""The shard writer, re-exported: it lives in _core (a thin owner of the C writer) so that the
index layer can build an official index's sidecar (index/official_sidecar.py) at open."""
from .._core.shard_writer import ShardWriter, shard_peak_bytes

__all__ = ["ShardWriter", "shard_peak_bytes"]
