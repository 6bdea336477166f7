/* shard_pool.h - running one step of a query on every shard of an index at once (internal).

   A query over several shards repeats one step (a search, a narrowing, a walk) per shard and
   adds the answers up. Warm, a step takes microseconds and runs best on the calling thread.
   Cold (files not in the page cache), a step is a chain of dependent page reads, milliseconds
   per shard, and running the shards one after another adds the chains up: a 4-shard index was
   1.6-4x one shard's cold latency (eval/RESULTS.md, "Growth to 1B tokens"). So each index with
   several shards owns a small pool of sleeping threads (one per shard but the first, started at
   the first need), and a step runs on the pool while the index looks cold: the step then costs
   the slowest shard's chain, not the sum. The calling thread takes shards too, so a step never
   waits for a worker that has nothing to do.

   The policy (IG_SHARDS_AUTO, the default): steps run serially and are timed (a vDSO clock
   read, ~20 ns); a step slower than IG_COLD_STEP_NS during which the process took major page
   faults (getrusage, asked only after a slow step) marks the index cold for the next
   IG_COLD_CREDIT steps, which run on the pool; every pool step as slow renews that credit, every
   fast one uses one up. IG_SHARDS_SERIAL / IG_SHARDS_PARALLEL fix the choice (ig_set_shard_mode).

   Answers never depend on the choice: a step writes only its own shard's slot, and the caller
   combines the slots in shard order afterwards. The pool is used by one query at a time (the
   others run serially); it is re-created in a forked child (whose threads do not exist) and
   stopped and joined by ig_close. */
#ifndef IG_SHARD_POOL_H
#define IG_SHARD_POOL_H

#include <stdint.h>

#include "common.h"

/* One shard's part of a step: fn(ctx, shard). */
typedef void (*ig_shard_fn)(void *ctx, int shard);

/* Run fn for every shard of ix (serially, or on the index's pool: see above). */
void ig_each_shard(const ig_index *ix, ig_shard_fn fn, void *ctx);

/* The pool's state, owned by the index (NULL for one shard). */
typedef struct ig_shard_pool ig_shard_pool;
ig_shard_pool *ig_shard_pool_new(int n_shards);
void ig_shard_pool_free(ig_shard_pool *p);

#endif
