/* diff_internal.h - the net-count primitives of diff.c shared with the drafts over a difference
   (draft.c). Not part of the public API. */
#ifndef IG_DIFF_INTERNAL_H
#define IG_DIFF_INTERNAL_H

#include "query_internal.h"

/* IG_OK when plus and minus may be paired (both open, same token width and vocabulary). */
int ig_diff_check_pair(const ig_index *P, const ig_index *M, char *err, size_t errlen);
/* The IG_ERR_ARG "not a subset" failure (a net count came out negative). */
int ig_diff_not_subset(char *err, size_t errlen);
/* Longest suffix (<= max_len) of p[0..len) with a positive net count; its ranges land in bp / bm
   (tp / tm are scratch). Sets *neg when a net count is negative. */
int64_t ig_net_longest(const ig_index *P, const ig_index *M, const uint32_t *p, int64_t len, int64_t max_len,
                       ig_range *bp, ig_range *bm, ig_range *tp, ig_range *tm, int *neg);

#endif
