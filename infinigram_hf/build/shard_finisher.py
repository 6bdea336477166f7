"""Full shards finished (suffix array, files) one after the other, or two at a time on two
threads when the memory budget holds two shards' build peaks (see ShardFinisher)."""
from __future__ import annotations

import threading
from typing import Optional

from .shard_writer import ShardWriter, shard_peak_bytes


class ShardFinisher:
    """Finishes full shards (suffix array, files), in order of the shards.

    Finishing a shard runs mostly on one core (SA-IS is sequential), taking documents in on
    one more. When two shards' build peaks fit the memory budget together (shards capped well
    below it with max_shard_tokens) and the machine has a second CPU, a full shard is finished on a
    background thread while the next one fills, and the last shard is finished while the one
    before it may still run: at most two shards are held at a time, so the budget holds. The C
    call releases the GIL. Otherwise (the default: one shard uses the whole budget) shards are
    finished one after the other, as they fill."""

    def __init__(self, concurrent: bool):
        self.concurrent = concurrent
        self.entries: list[dict] = []
        self._thread: Optional[threading.Thread] = None
        self._outcome: list = []  # [entry] or [None, exception] of the shard in the background

    def _run(self, writer: ShardWriter) -> None:
        try:
            self._outcome = [writer.finish()]
        except BaseException as exc:  # (re-raised by wait(), on the building thread)
            self._outcome = [None, exc]

    def wait(self) -> None:
        """Wait for the shard finishing in the background and record it (or raise its error)."""
        if self._thread is None:
            return
        self._thread.join()
        self._thread, outcome, self._outcome = None, self._outcome, []
        if len(outcome) != 1:
            raise outcome[1]
        self.entries.append(outcome[0])

    def finish(self, writer: ShardWriter, last: bool) -> None:
        if not self.concurrent:
            self.entries.append(writer.finish())
        elif last:  # (alongside the one before it, if that is still running)
            try:
                entry = writer.finish()
            finally:
                self.wait()
            self.entries.append(entry)
        else:
            self.wait()  # (at most one shard in the background)
            self._thread = threading.Thread(target=self._run, args=(writer,), name="infinigram-shard-finish",
                                            daemon=True)
            self._thread.start()

    def abandon(self) -> None:
        """After a failure: let a background finish end (its files are about to be removed)."""
        if self._thread is not None:
            self._thread.join()
            self._thread = None


def concurrent_finish_fits(budget: int, shard_cap: int, width: int, cpus: int) -> bool:
    """Whether two shards may be built at once: two build peaks within the budget, two CPUs."""
    return cpus > 1 and 2 * shard_peak_bytes(shard_cap, width) <= budget
