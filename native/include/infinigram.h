/* infinigram.h - the public C API of the infinigram_hf core. Include this header only.
 *
 * It holds the conventions and what every part of the API shares (versions, error codes, the
 * index handle, a probability's pieces), then includes one header per area. The area headers
 * are parts of this one: they refuse to be included on their own.
 *
 *   infinigram_build.h   writing a shard                 ig_writer_*
 *   infinigram_index.h   opening an index; its sizes,    ig_open, ig_open_at, ig_close, ig_get_info,
 *                        positions and documents         ig_shard_info, ig_locate, ig_sa_position,
 *                                                        ig_get_doc
 *   infinigram_query.h   one query, answered exactly     ig_find, ig_count, ig_count_fast, ig_ntd,
 *                                                        ig_infgram_suffix, ig_infgram_prob,
 *                                                        ig_ngram_prob, ig_score
 *   infinigram_batch.h   many queries in one call        ig_count_batch, ig_prob_batch,
 *                        (loop in C, threads)            ig_score_batch, ig_ntd_batch_*, ig_cpu_count
 *   infinigram_state.h   decoding states                 ig_state_*
 *   infinigram_draft.h   drafts for speculative decoding ig_draft_*
 *   infinigram_search.h  document search                 ig_search_docs, ig_doc_spans
 *   infinigram_diff.h    one index minus another         ig_diff_*
 *   infinigram_lm.h      the standalone LM's hot loops   ig_lm_*, ig_diff_lm_*
 *   infinigram_trace.h   tracing texts to the corpus     ig_creativity_batch, ig_attribute_batch,
 *                        (creativity, attribution)       ig_locate_ranges, ig_doc_window
 *   infinigram_mixing.h  learned mixing weights and the  ig_mixing_lambdas, ig_mixing_weights,
 *                        mixtures on float32 rows        ig_mix_sparse_f32, ig_mix_sum_f32,
 *                                                        ig_mix_step_f32
 *
 * Next-token distributions have four doors: ig_ntd (one context, fixed n, caller buffers),
 * ig_ntd_batch_run (many queries, fixed n or ∞-gram), ig_ntd_batch_tails (suffixes of the rows of
 * a matrix of ids) and ig_ntd_batch_states (many decoding states). The Python package uses the
 * batch runs (a single context is a batch of one).
 *
 * Conventions (see docs/FORMAT.md for the files):
 *  - Token ids cross the API as uint32_t whatever the on-disk width; lengths are explicit.
 *  - Every function that can fail returns IG_OK (0) or a negative IG_ERR_* code; when `err` is
 *    given it receives a NUL-terminated message of at most `errlen` bytes.
 *  - Handles are opaque and created/freed in pairs. An open index is read-only and safe to
 *    query from many threads at once. No global mutable state.
 *  - Outputs are caller-owned buffers with explicit capacities.
 */
#ifndef INFINIGRAM_H
#define INFINIGRAM_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The version of this API: raised whenever a declaration or a constant of these headers
   changes, so that a program (the Python package included) can refuse a core built from other
   headers. ig_api_version() is the IG_API_VERSION the library was compiled with. */
#define IG_API_VERSION 10
int ig_api_version(void);

#define IG_OK 0
#define IG_ERR_ARG (-1)       /* bad argument (id out of range, NULL, bad length) */
#define IG_ERR_IO (-2)        /* open/read/write/mmap failed */
#define IG_ERR_FORMAT (-3)    /* a file is not a valid index file */
#define IG_ERR_NOMEM (-4)     /* allocation failed */
#define IG_ERR_CAPACITY (-5)  /* an output buffer is too small (the call says what it needs) */
#define IG_ERR_LIMIT (-6)     /* a work cap was hit */
#define IG_ERR_CANCELLED (-7) /* the caller set the call's cancel flag */

/* A short description of an IG_* code (a static string). */
const char *ig_strerror(int code);

#define IG_FORMAT_VERSION 1
#define IG_HEADER_SIZE 64
#define IG_MAX_SHARD_TOKENS ((int64_t)2147483646) /* SA-IS works on int32 positions */

/* An open index: one or more shards queried as one corpus (infinigram_index.h). */
typedef struct ig_index ig_index;

/* P(token | context) as counts: count of (suffix + token), count of the suffix, the suffix
   length and whether the estimate is sparse (exactly one distinct next token). The suffix is
   the context's longest occurring one for the ∞-gram, the whole context for fixed n. */
typedef struct {
    uint64_t count;        /* cnt(suffix + token) */
    uint64_t prompt_count; /* cnt(suffix) */
    int64_t suffix_len;
    int sparse;
} ig_prob;

#ifdef __cplusplus
}
#endif

#include "infinigram_build.h"
#include "infinigram_index.h"
#include "infinigram_query.h"
#include "infinigram_batch.h"
#include "infinigram_state.h"
#include "infinigram_draft.h"
#include "infinigram_search.h"
#include "infinigram_diff.h"
#include "infinigram_lm.h"
#include "infinigram_trace.h"
#include "infinigram_mixing.h"

#endif /* INFINIGRAM_H */
