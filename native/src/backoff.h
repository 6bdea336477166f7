/* backoff.h - the ∞-gram state machine's back-off, shared by dense scoring, decoding states and
   drafting (internal).

   The state of a context is its longest suffix C that occurs (length l) and C's suffix-array
   ranges. A new token t extends the state with one narrowing while C + t occurs. When it does
   not, the new state is the longest suffix of C + t that occurs: a suffix C[l-L+1..l) + t of at
   most l tokens. Searching such a suffix from scratch reads it token by token, so a context that
   keeps failing while staying long -- a query longer than a run of one repeated token, or a
   periodic stretch, in the corpus -- made every position cost O(l log N): dense scoring was
   quadratic in the query length (run 20,000, query 40,000: 68.6 s).

   A long back-off (l > IG_BACKOFF_SHORT) therefore never reads the query. C occurs, at a known
   text position w (any suffix-array entry of its ranges, the "witness"), so every candidate
   C[l-L+1..l) is the text at w + l - L + 1: a candidate is found by a binary search comparing
   text with text, and those comparisons are longest-common-extension (LCE) queries between two
   text positions. Their answers are remembered for the rest of the call, per diagonal (the
   offset between the two positions) and, for a stretch found periodic, per period (the probes
   of one binary search all lie on different diagonals, but in a run or a periodic stretch they
   agree up to its end): a repetitive stretch of corpus is compared about once instead of once
   per query position. Searches also start each comparison at the lcp of their bounds
   (Manber-Myers' "mlr" rule), so a search costs O(log N) comparisons plus the tokens not seen
   before. The new length is galloped down from l (in a repetitive stretch it is l or close to
   it), then bisected. Short back-offs keep the query-reading search of query.c
   (ig_longest_suffix), whose cost is bounded by IG_BACKOFF_SHORT.
*/
#ifndef IG_BACKOFF_H
#define IG_BACKOFF_H

#include "query_internal.h"

/* Back-offs from at most this many tokens search the query directly (ig_longest_suffix). */
#ifndef IG_BACKOFF_SHORT
#define IG_BACKOFF_SHORT 32
#endif

/* Memo of LCE answers for one call (allocated on the first long back-off; NULL = none yet). */
typedef struct ig_lce_memo ig_lce_memo;
void ig_lce_memo_free(ig_lce_memo *m);

/* Long back-off over the net counts of P minus M (M = NULL: plain counts of P).
   In: curp / curm = ranges of C = ctx[len-1-l .. len-1) (l > short_max), t = ctx[len-1], and
   C + t has no (net) occurrence. Out: the longest suffix of ctx[0..len) with a positive count,
   when it is longer than short_max: its length is returned and its ranges are in curp / curm.
   Returns -1 when that suffix has at most short_max tokens (the caller searches those) and -2
   when C has no occurrence in P to take a witness from (a forged state; the caller searches).
   tmpp / tmpm are scratch of P's / M's shard count; *memo is created as needed (free it with
   ig_lce_memo_free); *neg is set when a net count is negative. */
int64_t ig_backoff_long(const ig_index *P, const ig_index *M, const uint32_t *ctx, int64_t len, int64_t l,
                        int64_t short_max, ig_range *curp, ig_range *curm, ig_range *tmpp, ig_range *tmpm,
                        ig_lce_memo **memo, int *neg);

/* The whole back-off for plain counts: the longest suffix (at most l tokens) of ctx[0..len) that
   occurs, given cur = ranges of ctx[len-1-l .. len-1) whose extension by ctx[len-1] does not
   occur. The result's ranges land in cur (tmp is scratch). */
int64_t ig_backoff(const ig_index *ix, const uint32_t *ctx, int64_t len, int64_t l, ig_range *cur, ig_range *tmp,
                   ig_lce_memo **memo);

/* Cooperative cancellation: long loops read *cancel (when not NULL) every IG_CANCEL_EVERY
   tokens and stop with IG_ERR_CANCELLED once another thread has set it. */
#define IG_CANCEL_EVERY 1024
static inline int ig_cancelled(const int *cancel) {
    return cancel && *(const volatile int *)cancel != 0;
}

#endif
