/* lm_net.c - what only an LM over a difference needs: the net count of a row, and the two
 * questions whose plain answers read the index's ranges alone (lm.c) -- is there exactly one
 * continuation, and which token sits at a given rank. Both walk the continuations in token order
 * with their net counts, as an index rebuilt without the removed documents would hold them.
 */
#include "lm_internal.h"

uint64_t ig_lm_net(ig_lm *lm, const ig_range *rs) {
    int64_t net = 0;
    for (int s = 0; s < lm->SP; s++) net += rs[s].hi - rs[s].lo;
    for (int s = lm->SP; s < lm->S; s++) net -= rs[s].hi - rs[s].lo;
    if (net < 0) {
        lm->src.fail = IG_ERR_ARG;
        return 0;
    }
    return (uint64_t)net;
}

int ig_lm_single_net(ig_lm *lm, const ig_range *rs, int64_t d, int eod) {
    int found = 0;
    uint32_t t;
    for (int s = 0; s < lm->S; s++) lm->cursor[s] = rs[s].lo;
    while (ig_lm_next_follower(lm, rs, d, lm->cursor, lm->child, &t)) {
        if (d > 0 && t == lm->sep && !eod) continue; /* end of document: not a continuation */
        if (rows_total(lm, lm->child) == 0) continue;
        if (found) return 0;
        found = 1;
    }
    return found;
}

uint32_t ig_lm_token_at_net(ig_lm *lm, const ig_range *rs, int64_t d, int eod, uint64_t r) {
    uint32_t t;
    for (int s = 0; s < lm->S; s++) lm->cursor[s] = rs[s].lo;
    while (ig_lm_next_follower(lm, rs, d, lm->cursor, lm->child, &t)) {
        if (d > 0 && t == lm->sep && !eod) continue;
        uint64_t c = rows_total(lm, lm->child);
        if (r < c) return t;
        r -= c;
    }
    return lm->sep; /* not reached: r is below the net continuing total */
}
