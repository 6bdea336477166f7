/* test_core.c - C-level tests of the engine, meant to run under AddressSanitizer and
 * UndefinedBehaviorSanitizer (native/tests/run.sh, `make native-test`):
 *
 *  - every query type against brute force on small corpora (widths 1, 2, 4; one and three shards;
 *    several shards both one after another and on the shard pool);
 *  - batches and decoding states against the single calls, for several thread counts;
 *  - hostile arguments: NULLs, negative and huge lengths, forged states and offsets, NaN options
 *    (including the cases fuzzing found, see fuzz/regressions/);
 *  - damaged files: every file of a shard truncated at many sizes and bit-flipped at many
 *    offsets: opening fails with a message naming the file, or the queries answer without any
 *    read outside the mappings (the sanitizers watch).
 *
 * The corpora and brute-force references are native/tests/reference.h (shared with fuzz/).
 * Exit status 0 when every check passed.
 */
#include <math.h>

#include "reference.h"

#include "check.h"

/* ------------------------------------------------------------------ queries vs brute force */

static void test_queries(const ref_corpus *c, ig_index *ix) {
    /* every n-gram (n <= 4) starting at every 3rd position, plus one token changed */
    uint32_t toks[1024];
    uint64_t cnts[1024];
    for (int s = 0; s < c->n_shards; s++) {
        for (int64_t p = 0; p < c->text_len[s]; p += 3) {
            for (int64_t len = 0; len <= 4 && p + len <= c->text_len[s]; len++) {
                uint32_t q[5];
                memcpy(q, c->text[s] + p, (size_t)len * sizeof *q);
                if (len && (p & 1)) q[len - 1] = (q[len - 1] + 1) % c->vocab;
                if (!ref_valid_ids(c, q, len)) break;
                uint64_t cnt = 0, want = ref_naive_count(c, q, len), total;
                CHECK(ig_count(ix, q, len, &cnt, err, sizeof err) == IG_OK && cnt == want, "count %llu want %llu",
                      (unsigned long long)cnt, (unsigned long long)want);
                int64_t n = 0;
                int rc = ig_ntd(ix, q, len, toks, cnts, 1024, &n, &total, err, sizeof err);
                CHECK(rc == IG_OK && total == want, "ntd rc %d", rc);
                uint64_t sum = 0;
                for (int64_t i = 0; rc == IG_OK && i < n; i++) {
                    uint64_t w = len ? ref_naive_count_next(c, q, len, toks[i]) : ref_naive_count(c, &toks[i], 1);
                    CHECK(cnts[i] == w, "ntd entry");
                    sum += cnts[i];
                }
                CHECK(sum == total, "ntd sum");
                int64_t sl = -1;
                ig_infgram_suffix(ix, q, len, &sl, err, sizeof err);
                CHECK(sl == ref_naive_suffix(c, q, len, len), "suffix");
            }
        }
    }
    /* dense scoring of whole documents == per-position ∞-gram probabilities */
    for (int64_t d = 0; d < c->n_docs; d += 5) {
        const uint32_t *x = c->ids + c->offsets[d];
        int64_t n = c->offsets[d + 1] - c->offsets[d];
        uint64_t *num = malloc((size_t)(n + 1) * sizeof *num), *den = malloc((size_t)(n + 1) * sizeof *den);
        int64_t *sl = malloc((size_t)(n + 1) * sizeof *sl);
        CHECK(ig_score(ix, x, n, num, den, sl, NULL, err, sizeof err) == IG_OK, "score");
        for (int64_t i = 0; i < n; i++) {
            ig_prob p;
            ig_infgram_prob(ix, x, i, x[i], &p, err, sizeof err);
            CHECK(p.count == num[i] && p.prompt_count == den[i] && p.suffix_len == sl[i], "score position");
        }
        free(num);
        free(den);
        free(sl);
    }
}

/* ------------------------------------------------------------------ decoding steps */

/* ig_draft_step over a sequence of model ids cut by document boundaries (eos_id, ids the index
   cannot hold): after every step the state is that of the context after the last boundary, and
   an ∞-gram-only draft is ig_draft_chain's from that state; a state whose matched suffix would
   hold a boundary is refused. */
static void test_draft_steps(const ref_corpus *c, ig_index *ix) {
    enum { SEQ = 400 };
    int64_t seq[SEQ], eos = c->vocab > 3 ? 3 : 0;
    uint64_t x = 7;
    for (int64_t i = 0; i < SEQ; i++) { /* corpus text, now and then a boundary */
        x ^= x << 13; x ^= x >> 7; x ^= x << 17;
        seq[i] = x % 23 == 0 ? eos : x % 31 == 0 ? (int64_t)c->vocab + (int64_t)(x % 3) : (int64_t)c->ids[i % c->offsets[c->n_docs]];
    }
    ig_draft_params p = {6, 1, 0.0, 1, 0.0, 0.0, 0, 0, IG_DRAFT_INFGRAM, eos, -1, -1};
    int64_t st[8], want[8], out[6], n_out, match;
    uint64_t counts[6], totals[6];
    int source;
    uint32_t ctx[SEQ], chain[6];
    CHECK(ig_state_init(ix, NULL, 0, st, ig_state_size(ix), err, sizeof err) == IG_OK, "%s", err);
    for (int64_t n = 0, step = 0; n < SEQ; step++) {
        int64_t add = 1 + step % 4;
        if (n + add > SEQ) add = SEQ - n;
        n += add;
        CHECK(ig_draft_step(ix, st, ig_state_size(ix), seq, n, add, &p, 6, out, counts, totals, &n_out, &match,
                            &source, err, sizeof err) ==
                  IG_OK, "draft_step at %lld: %s", (long long)n, err);
        int64_t b = n; /* the context after the last boundary */
        while (b > 0 && !(seq[b - 1] == eos || seq[b - 1] >= (int64_t)c->vocab)) b--;
        for (int64_t i = b; i < n; i++) ctx[i - b] = (uint32_t)seq[i];
        ig_state_init(ix, ctx, n - b, want, ig_state_size(ix), err, sizeof err);
        CHECK(!memcmp(st, want, (size_t)ig_state_size(ix) * sizeof *st), "draft_step state at %lld", (long long)n);
        int64_t nc = 0;
        ig_draft_chain(ix, st, ig_state_size(ix), 6, 1, 0.0, 0.0, eos, chain, NULL, NULL, &nc, err, sizeof err);
        int same = nc == n_out && (n_out == 0 || (source == IG_DRAFT_INFGRAM && match == st[0]));
        for (int64_t i = 0; same && i < n_out; i++) same = out[i] == (int64_t)chain[i];
        CHECK(same, "draft_step draft at %lld: %lld tokens, chain %lld", (long long)n, (long long)n_out, (long long)nc);
    }
    /* the state of one token, stepped over a sequence whose token before the new one is eos */
    uint32_t t = c->ids[0];
    int64_t bad[3] = {(int64_t)t, eos, (int64_t)t};
    if (c->offsets[c->n_docs] > 0 && (int64_t)t != eos && ig_state_init(ix, &t, 1, st, ig_state_size(ix), err,
                                                                        sizeof err) == IG_OK &&
        st[0] == 1)
        CHECK(ig_draft_step(ix, st, ig_state_size(ix), bad, 3, 1, &p, 6, out, NULL, NULL, &n_out, &match, &source, err,
                            sizeof err) ==
                  IG_ERR_ARG && strstr(err, "matched suffix holds"), "boundary inside the matched suffix: %s", err);
}

/* ig_draft_step_batch against ig_draft_step row by row: rows of different lengths in a strided
   buffer, growing by different numbers of tokens per step (boundaries among them), per-row
   limits and caps, sources that use the state or not, 1 and 3 threads; then refused arguments. */
static void test_draft_step_batch(const ref_corpus *c, ig_index *ix) {
    enum { ROWS = 7, STRIDE = 160, MAXD = 6 };
    int64_t size = ig_state_size(ix), eos = c->vocab > 3 ? 3 : 0;
    int64_t seqs[ROWS * STRIDE], lens[ROWS], n_new[ROWS], limits[ROWS], caps[2 * ROWS];
    int64_t *st = malloc((size_t)(ROWS * size) * sizeof *st), *one = malloc((size_t)(ROWS * size) * sizeof *one);
    uint64_t x = 11;
    for (int64_t i = 0; i < ROWS * STRIDE; i++) {
        x ^= x << 13; x ^= x >> 7; x ^= x << 17;
        seqs[i] = x % 29 == 0 ? eos : x % 37 == 0 ? (int64_t)c->vocab + 1 : (int64_t)c->ids[(i * 3) % c->offsets[c->n_docs]];
    }
    for (int src = IG_DRAFT_LONGEST; src <= IG_DRAFT_LOOKUP; src++)
        for (int threads = 1; threads <= 3; threads += 2) {
            ig_draft_params p = {MAXD, 1, src == IG_DRAFT_LONGEST ? 2.0 : 0.0, 1, 0.1, 0.0, 1, 32, src, eos, -1, -1};
            for (int r = 0; r < ROWS; r++) {
                lens[r] = 0;
                CHECK(ig_state_init(ix, NULL, 0, st + r * size, size, err, sizeof err) == IG_OK, "%s", err);
            }
            memcpy(one, st, (size_t)(ROWS * size) * sizeof *st);
            for (int step = 0; step < 20; step++) {
                for (int r = 0; r < ROWS; r++) {
                    n_new[r] = (r + step) % 5 == 4 ? 0 : 1 + (r * step) % 7;
                    if (lens[r] + n_new[r] > STRIDE) n_new[r] = STRIDE - lens[r];
                    lens[r] += n_new[r];
                    limits[r] = (r + step) % 4 == 0 ? 2 : 100;
                    caps[2 * r] = (r + step) % 3 - 1;
                    caps[2 * r + 1] = (r + 2 * step) % 3 - 1;
                }
                int64_t out[ROWS * MAXD], n_out[ROWS], match[ROWS];
                uint64_t cnt[ROWS * MAXD], tot[ROWS * MAXD];
                int source[ROWS];
                int rc = ig_draft_step_batch(ix, st, ROWS * size, seqs, STRIDE, lens, n_new, ROWS, &p, limits, caps,
                                             out, cnt, tot, MAXD, n_out, match, source, threads, err, sizeof err);
                CHECK(rc == IG_OK, "draft_step_batch: %s", err);
                for (int r = 0; r < ROWS && rc == IG_OK; r++) {
                    ig_draft_params q = p;
                    q.infgram_cap = caps[2 * r];
                    q.lookup_cap = caps[2 * r + 1];
                    int64_t o[MAXD], no, m;
                    uint64_t cn[MAXD], tt[MAXD];
                    int so;
                    CHECK(ig_draft_step(ix, one + r * size, size, seqs + r * STRIDE, lens[r], n_new[r], &q, limits[r],
                                        o, cn, tt, &no, &m, &so, err, sizeof err) == IG_OK, "draft_step: %s", err);
                    int same = no == n_out[r] && m == match[r] && so == source[r];
                    for (int64_t i = 0; same && i < no; i++)
                        same = o[i] == out[r * MAXD + i] && cn[i] == cnt[r * MAXD + i] && tt[i] == tot[r * MAXD + i];
                    if (src != IG_DRAFT_LOOKUP) same = same && !memcmp(one + r * size, st + r * size, (size_t)size * 8);
                    CHECK(same, "source %d, %d threads, step %d, row %d: batch differs from the row alone", src,
                          threads, step, r);
                }
            }
        }
    /* refused: a row longer than the stride, n_new above the length, outputs too narrow, states short */
    ig_draft_params p = {MAXD, 1, 0.0, 1, 0.0, 0.0, 1, 32, IG_DRAFT_LONGEST, eos, -1, -1};
    int64_t out[ROWS * MAXD], n_out[ROWS], match[ROWS], len1[1] = {STRIDE + 1}, new1[1] = {0}, lim[1] = {MAXD};
    int source[ROWS];
    CHECK(ig_draft_step_batch(ix, st, size, seqs, STRIDE, len1, new1, 1, &p, lim, NULL, out, NULL, NULL, MAXD, n_out,
                              match, source, 1, err, sizeof err) == IG_ERR_ARG && strstr(err, "row 0"), "%s", err);
    len1[0] = 2;
    new1[0] = 3;
    CHECK(ig_draft_step_batch(ix, st, size, seqs, STRIDE, len1, new1, 1, &p, lim, NULL, out, NULL, NULL, MAXD, n_out,
                              match, source, 1, err, sizeof err) == IG_ERR_ARG, "n_new > len: %s", err);
    new1[0] = 0;
    CHECK(ig_draft_step_batch(ix, st, size, seqs, STRIDE, len1, new1, 1, &p, lim, NULL, out, NULL, NULL, MAXD - 1,
                              n_out, match, source, 1, err, sizeof err) == IG_ERR_ARG, "narrow output: %s", err);
    CHECK(ig_draft_step_batch(ix, st, size - 1, seqs, STRIDE, len1, new1, 1, &p, lim, NULL, out, NULL, NULL, MAXD,
                              n_out, match, source, 1, err, sizeof err) == IG_ERR_ARG, "short states: %s", err);
    st[2] = -5; /* a forged state: the worker's failure names the row */
    CHECK(ig_draft_step_batch(ix, st, size, seqs, STRIDE, len1, new1, 1, &p, lim, NULL, out, NULL, NULL, MAXD, n_out,
                              match, source, 1, err, sizeof err) == IG_ERR_ARG && strstr(err, "row 0: state"), "%s", err);
    double acc[3] = {1.2, 0.0, 3.0}, rej[3] = {0.8, 0.0, 0.001};
    int64_t cp[3];
    ig_draft_adaptive_caps(acc, rej, 3, 8, 0.05, cp);
    CHECK(cp[0] == 5 && cp[1] == 8 && cp[2] == 8, "adaptive caps %lld %lld %lld", (long long)cp[0], (long long)cp[1],
          (long long)cp[2]);
    free(st);
    free(one);
}

/* ------------------------------------------------------------------ drafts over a difference */

/* The documents d of c with (d % 3 == 0) == removed, as a one-shard corpus written as `name`. */
static int sub_corpus(const ref_corpus *c, int removed, const char *name, ref_corpus *out, ig_index **ix) {
    memset(out, 0, sizeof *out);
    out->width = c->width;
    out->vocab = c->vocab;
    out->sep = c->sep;
    out->offsets = calloc((size_t)c->n_docs + 1, sizeof(int64_t));
    out->ids = malloc((size_t)(c->offsets[c->n_docs] + 1) * sizeof(uint32_t));
    int64_t k = 0, n = 0;
    for (int64_t d = 0; d < c->n_docs; d++) {
        if ((d % 3 == 0) != removed) continue;
        for (int64_t i = c->offsets[d]; i < c->offsets[d + 1]; i++) out->ids[k++] = c->ids[i];
        out->offsets[++n] = k;
    }
    out->n_docs = n;
    out->n_shards = 1;
    out->shard_doc[0] = 0;
    out->shard_doc[1] = n;
    ref_corpus_texts(out);
    return ref_corpus_write(out, ref_tmpdir(), name, 0) || ref_corpus_open(out, ix);
}

/* The LM over ix minus rm answers as the LM over keep (the kept documents in one shard): scores,
   distributions and per-level statistics bit for bit for every method, seeded generation token
   for token, count-of-counts; the reverse difference (not a subset) fails with IG_ERR_ARG. */
static void test_diff_lm(const ref_corpus *c, ig_index *ix, ig_index *rm, ig_index *keep) {
    ig_lm *ld = NULL, *lk = NULL, *bad = NULL;
    CHECK(ig_diff_lm_new(&ld, ix, rm, 12, 0, err, sizeof err) == IG_OK, "diff lm: %s", err);
    CHECK(ig_lm_new(&lk, keep, 12, 0, err, sizeof err) == IG_OK, "keep lm: %s", err);
    CHECK(ig_diff_lm_new(&bad, ix, NULL, 12, 0, err, sizeof err) == IG_ERR_ARG && !bad, "diff lm without minus");
    if (!ld || !lk) goto done;
    enum { N = 120 };
    uint32_t q[N];
    int64_t total = c->offsets[c->n_docs];
    for (int64_t i = 0; i < N; i++) q[i] = i % 41 == 40 ? c->vocab - 1 : c->ids[(i * 7 + i / 13) % total];
    double d1[2] = {0.6, 0.8}, d2[2] = {1.1, 1.3}, d3[2] = {1.5, 2.0}, th[2] = {0.5, 0.0};
    size_t slots = (size_t)c->vocab + 1;
    double *pd = malloc(N * sizeof *pd), *pk = malloc(N * sizeof *pk);
    double *dd = malloc(slots * sizeof *dd), *dk = malloc(slots * sizeof *dk);
    int64_t sld[N], slk[N];
    uint8_t spd[N], spk[N];
    for (int v = 0; v < 5 && pd && pk && dd && dk; v++) {
        for (int eod = 0; eod < 2; eod++) {
            ig_lm_config cfg = {v < 2 ? v : IG_LM_SMOOTH, 12, eod, v == 1 ? 2 : -1, 0.5, 0.0,
                                {v == 4 ? 3 : 12, v == 4, 0, v == 3, 2, d1, d2, d3, th}};
            int a = ig_lm_score(ld, &cfg, q, N, pd, sld, spd, err, sizeof err);
            int b = ig_lm_score(lk, &cfg, q, N, pk, slk, spk, err, sizeof err);
            int same = a == IG_OK && b == IG_OK;
            for (int64_t i = 0; same && i < N; i++) same = pd[i] == pk[i] && sld[i] == slk[i] && spd[i] == spk[i];
            CHECK(same, "diff lm score, variant %d eod %d", v, eod);
            for (int64_t n = 0; n < N; n += 29) {
                a = ig_lm_distribution(ld, &cfg, q, n, dd, err, sizeof err);
                b = ig_lm_distribution(lk, &cfg, q, n, dk, err, sizeof err);
                CHECK(a == IG_OK && b == IG_OK && !memcmp(dd, dk, slots * sizeof *dd), "diff lm distribution, "
                      "variant %d eod %d context %lld", v, eod, (long long)n);
            }
            ig_lm_sampling smp = {0, v == 2 ? 0.8 : 1.0, v == 2 ? 3 : 0, 1.0};
            uint64_t rd[4] = {1, 2, 3, (uint64_t)v}, rk[4] = {1, 2, 3, (uint64_t)v}, md[16], mk[16];
            uint32_t gd[16], gk[16];
            int64_t gsd[16], gsk[16], nd = -1, nk = -1;
            int ed = -1, ek = -1;
            a = ig_lm_generate(ld, &cfg, &smp, q, 10, 16, rd, NULL, 0, gd, gsd, md, &nd, &ed, err, sizeof err);
            b = ig_lm_generate(lk, &cfg, &smp, q, 10, 16, rk, NULL, 0, gk, gsk, mk, &nk, &ek, err, sizeof err);
            same = a == IG_OK && b == IG_OK && nd == nk && ed == ek;
            for (int64_t i = 0; same && i < nd; i++) same = gd[i] == gk[i] && gsd[i] == gsk[i] && md[i] == mk[i];
            CHECK(same, "diff lm generate, variant %d eod %d", v, eod);
        }
    }
    enum { CAP = 12 * (N + 1) };
    int64_t *rows_d = malloc(CAP * IG_LM_NSTAT * sizeof(int64_t)), *rows_k = malloc(CAP * IG_LM_NSTAT * sizeof(int64_t));
    int64_t nrd = -1, nrk = -1, nxd = -1, nxk = -1;
    if (rows_d && rows_k) {
        int a = ig_lm_levels(ld, q, N, 0, N, 12, 0, 1, rows_d, CAP, &nrd, &nxd, err, sizeof err);
        int b = ig_lm_levels(lk, q, N, 0, N, 12, 0, 1, rows_k, CAP, &nrk, &nxk, err, sizeof err);
        CHECK(a == IG_OK && b == IG_OK && nrd == nrk && nxd == nxk &&
              !memcmp(rows_d, rows_k, (size_t)nrd * IG_LM_NSTAT * sizeof(int64_t)), "diff lm levels");
    }
    uint64_t rawd[6 * 5], contd[6 * 5], typd[6], rawk[6 * 5], contk[6 * 5], typk[6];
    CHECK(ig_diff_lm_count_of_counts(ix, rm, 6, 5, rawd, contd, typd, err, sizeof err) == IG_OK &&
          ig_lm_count_of_counts(keep, 6, 5, rawk, contk, typk, err, sizeof err) == IG_OK &&
          !memcmp(rawd, rawk, sizeof rawd) && !memcmp(contd, contk, sizeof contd) && !memcmp(typd, typk, sizeof typd),
          "diff count_of_counts");
    /* rm minus ix: the whole corpus has a negative net count */
    CHECK(ig_diff_lm_count_of_counts(rm, ix, 3, 3, rawd, contd, typd, err, sizeof err) == IG_ERR_ARG &&
          strstr(err, "not a subset"), "reverse count_of_counts: %s", err);
    if (ig_diff_lm_new(&bad, rm, ix, 12, 0, err, sizeof err) == IG_OK) {
        ig_lm_config cfg = {IG_LM_INFGRAM, 12, 0, -1, 0.5, 0.0, {0}};
        CHECK(ig_lm_score(bad, &cfg, q, N, pd, sld, spd, err, sizeof err) == IG_ERR_ARG && strstr(err, "not a subset"),
              "reverse difference score: %s", err);
        ig_lm_free(bad);
    }
    free(rows_d); free(rows_k); free(pd); free(pk); free(dd); free(dk);
done:
    ig_lm_free(ld);
    ig_lm_free(lk);
}

/* ig_diff_draft_* over (c minus its removed documents) give what ig_draft_* give over an index
   of the kept documents: steps through a sequence with boundaries, then chains, children and
   trees from every state met (the sanitizers watch the net-count paths); then the LM over the
   same difference (test_diff_lm). */
static void test_diff_drafts(const ref_corpus *c, ig_index *ix, const char *name) {
    ref_corpus rc_rm, rc_keep;
    ig_index *rm = NULL, *keep = NULL;
    char n1[64], n2[64];
    snprintf(n1, sizeof n1, "%s_rm", name);
    snprintf(n2, sizeof n2, "%s_keep", name);
    if (sub_corpus(c, 1, n1, &rc_rm, &rm) || sub_corpus(c, 0, n2, &rc_keep, &keep)) {
        CHECK(0, "difference corpora");
    } else {
        CHECK(ig_diff_check(ix, rm, err, sizeof err) == IG_OK, "diff check: %s", err);
        enum { SEQ = 300 };
        int64_t seq[SEQ], eos = c->vocab > 3 ? 3 : 0;
        uint64_t x = 11;
        for (int64_t i = 0; i < SEQ; i++) {
            x ^= x << 13; x ^= x >> 7; x ^= x << 17;
            seq[i] = x % 29 == 0 ? eos : x % 37 == 0 ? (int64_t)c->vocab : (int64_t)c->ids[(i * 3) % c->offsets[c->n_docs]];
        }
        ig_draft_params p = {6, 1, 0.0, 1, 0.0, 0.0, 2, 8, IG_DRAFT_LONGEST, eos, -1, -1};
        int64_t sd[64], sk[64], out_d[6], out_k[6], nd, nk, md, mk;
        uint64_t cd[6], ck[6], td[6], tk[6];
        int srcd, srck;
        CHECK(ig_diff_state_size(ix, rm) == 2 + 2 * (int64_t)(c->n_shards + 1), "diff state size");
        CHECK(ig_diff_state_init(ix, rm, NULL, 0, sd, ig_diff_state_size(ix, rm), err, sizeof err) == IG_OK, "%s", err);
        CHECK(ig_state_init(keep, NULL, 0, sk, ig_state_size(keep), err, sizeof err) == IG_OK, "%s", err);
        for (int64_t n = 0, step = 0; n < SEQ; step++) {
            int64_t add = 1 + step % 5;
            if (n + add > SEQ) add = SEQ - n;
            n += add;
            int a = ig_diff_draft_step(ix, rm, sd, ig_diff_state_size(ix, rm), seq, n, add, &p, 6, out_d, cd, td, &nd,
                                       &md, &srcd, err, sizeof err);
            int b = ig_draft_step(keep, sk, ig_state_size(keep), seq, n, add, &p, 6, out_k, ck, tk, &nk, &mk, &srck,
                                  err, sizeof err);
            int same = a == IG_OK && b == IG_OK && nd == nk && md == mk && srcd == srck && sd[0] == sk[0] && sd[1] == sk[1];
            for (int64_t i = 0; same && i < nd; i++) same = out_d[i] == out_k[i] && cd[i] == ck[i] && td[i] == tk[i];
            CHECK(same, "diff draft_step at %lld: %lld/%lld tokens, match %lld/%lld", (long long)n, (long long)nd,
                  (long long)nk, (long long)md, (long long)mk);
            uint32_t chd[6], chk[6];
            int64_t ncd = 0, nck = 0;
            ig_diff_draft_chain(ix, rm, sd, ig_diff_state_size(ix, rm), 6, 1, 0.2, 0.0, eos, chd, cd, td, &ncd, err,
                                sizeof err);
            ig_draft_chain(keep, sk, ig_state_size(keep), 6, 1, 0.2, 0.0, eos, chk, ck, tk, &nck, err, sizeof err);
            same = ncd == nck;
            for (int64_t i = 0; same && i < ncd; i++) same = chd[i] == chk[i] && cd[i] == ck[i] && td[i] == tk[i];
            CHECK(same, "diff chain at %lld", (long long)n);
            uint32_t kd[4], kk[4];
            uint64_t totd, totk;
            int64_t csd[4 * 64], csk[4 * 64], sized = ig_diff_state_size(ix, rm), sizek = ig_state_size(keep);
            ig_diff_draft_children(ix, rm, sd, ig_diff_state_size(ix, rm), 4, kd, cd, csd, &totd, &ncd, err,
                                   sizeof err);
            ig_draft_children(keep, sk, ig_state_size(keep), 4, kk, ck, csk, &totk, &nck, err, sizeof err);
            same = ncd == nck && totd == totk;
            for (int64_t i = 0; same && i < ncd; i++)
                same = kd[i] == kk[i] && cd[i] == ck[i] && csd[i * sized] == csk[i * sizek] &&
                       csd[i * sized + 1] == csk[i * sizek + 1];
            CHECK(same, "diff children at %lld", (long long)n);
            int64_t ttd[8], ttk[8], ptd[8], ptk[8];
            double prd[8], prk[8];
            ig_diff_draft_tree(ix, rm, sd, ig_diff_state_size(ix, rm), 8, 4, 3, 0.0, eos, ttd, ptd, prd, &ncd, err,
                               sizeof err);
            ig_draft_tree(keep, sk, ig_state_size(keep), 8, 4, 3, 0.0, eos, ttk, ptk, prk, &nck, err, sizeof err);
            same = ncd == nck;
            for (int64_t i = 0; same && i < ncd; i++) same = ttd[i] == ttk[i] && ptd[i] == ptk[i] && prd[i] == prk[i];
            CHECK(same, "diff tree at %lld", (long long)n);
        }
        /* forged states are refused, never read */
        int64_t forged[64];
        memcpy(forged, sd, sizeof forged);
        forged[2] = -5;
        uint32_t tok[6];
        int64_t nt;
        CHECK(ig_diff_draft_chain(ix, rm, forged, ig_diff_state_size(ix, rm), 6, 1, 0, 0, -1, tok, NULL, NULL, &nt,
                                  err, sizeof err) == IG_ERR_ARG,
              "forged diff state");
        CHECK(ig_diff_draft_chain(ix, NULL, sd, ig_diff_state_size(ix, NULL), 6, 1, 0, 0, -1, tok, NULL, NULL, &nt,
                                  err, sizeof err) == IG_ERR_ARG,
              "closed removed index");
        /* a state of the remaining documents' own index is shorter than a difference's: refused */
        int64_t sizek = ig_state_size(keep), sized = ig_diff_state_size(ix, rm), nt2, ch[64], sl2[8];
        int64_t seq1[1] = {0};
        double pr[8];
        uint64_t tot;
        CHECK(ig_diff_draft_chain(ix, rm, sk, sizek, 6, 1, 0, 0, -1, tok, NULL, NULL, &nt, err, sizeof err) ==
                  IG_ERR_ARG && strstr(err, "states of this difference"), "plain state to diff chain: %s", err);
        CHECK(ig_diff_draft_children(ix, rm, sk, sizek, 2, tok, NULL, ch, &tot, &nt, err, sizeof err) == IG_ERR_ARG,
              "plain state to diff children");
        CHECK(ig_diff_draft_tree(ix, rm, sk, sizek, 4, 2, 2, 0.0, -1, ch, sl2, pr, &nt, err, sizeof err) == IG_ERR_ARG,
              "plain state to diff tree");
        CHECK(ig_diff_draft_step(ix, rm, sk, sizek, seq1, 1, 1, &p, 6, ch, NULL, NULL, &nt, &nt2, &srcd, err,
                                 sizeof err) == IG_ERR_ARG, "plain state to diff step");
        CHECK(ig_diff_state_init(ix, rm, NULL, 0, ch, sized - 1, err, sizeof err) == IG_ERR_ARG, "diff init length");
        CHECK(ig_diff_draft_chain(ix, rm, sd, sized + 1, 6, 1, 0, 0, -1, tok, NULL, NULL, &nt, err, sizeof err) ==
                  IG_ERR_ARG, "diff chain length");
        test_diff_lm(c, ix, rm, keep);
    }
    ig_close(rm);
    ig_close(keep);
    ref_corpus_free(&rc_rm);
    ref_corpus_free(&rc_keep);
}

/* ------------------------------------------------------------------ batches and states */

static void test_batches(const ref_corpus *c, ig_index *ix) {
    int64_t n = c->n_docs < 16 ? c->n_docs : 16;
    const int64_t *offsets = c->offsets;
    uint64_t base[16], other[16];
    CHECK(ig_count_batch(ix, c->ids, c->offsets[c->n_docs], offsets, n, base, 1, err, sizeof err) == IG_OK, "%s", err);
    for (int t = 0; t <= 8; t += 2) {
        CHECK(ig_count_batch(ix, c->ids, c->offsets[c->n_docs], offsets, n, other, t, err, sizeof err) == IG_OK, "%s",
              err);
        CHECK(!memcmp(base, other, (size_t)n * sizeof *base), "count_batch threads %d", t);
    }
    for (int64_t i = 0; i < n; i++)
        CHECK(base[i] == ref_naive_count(c, c->ids + offsets[i], offsets[i + 1] - offsets[i]), "count_batch row");
    /* distributions of a batch with sampling: every row's counts add up to its total */
    for (int64_t support = 0; support <= 4; support += 2) {
        ig_ntd_batch *b = NULL;
        uint32_t *q = malloc(3 * (size_t)n * sizeof *q);
        int64_t off[49];
        off[0] = 0;
        for (int64_t i = 0; i < 3 * n; i++) { /* 1-token contexts: frequent, so sampled */
            q[i] = (uint32_t)(i % 4) % c->vocab;
            off[i + 1] = i + 1;
        }
        CHECK(ig_ntd_batch_run(ix, q, 3 * n, off, 3 * n, IG_NTD_NGRAM, support, 0, 2, &b, err, sizeof err) == IG_OK, "%s",
              err);
        int64_t e = ig_ntd_batch_entries(b), ro[49];
        uint32_t *tk = malloc((size_t)(e + 1) * sizeof *tk);
        uint64_t *ct = malloc((size_t)(e + 1) * sizeof *ct), tot[48];
        CHECK(ig_ntd_batch_copy(b, ro, tk, ct, e, NULL, tot, NULL, NULL, err, sizeof err) == IG_OK, "%s", err);
        for (int64_t i = 0; i < 3 * n; i++) {
            uint64_t sum = 0;
            for (int64_t j = ro[i]; j < ro[i + 1]; j++) sum += ct[j];
            CHECK(sum == tot[i], "row %lld sums to %llu, total %llu (max_support %lld)", (long long)i,
                  (unsigned long long)sum, (unsigned long long)tot[i], (long long)support);
        }
        free(tk);
        free(ct);
        free(q);
        ig_ntd_batch_free(b);
    }
    /* the size cap of a distribution batch: past max_entries, IG_ERR_LIMIT and nothing held
       (leaks are checked here); at the exact size, the batch (threads stop early either way) */
    {
        int64_t off[33], total = 0;
        uint32_t q[1] = {0};
        for (int64_t i = 0; i <= 32; i++) off[i] = 0; /* 32 empty contexts: 32 unigrams */
        ig_ntd_batch *b = NULL;
        CHECK(ig_ntd_batch_run(ix, q, 0, off, 32, IG_NTD_INFGRAM, 0, 0, 1, &b, err, sizeof err) == IG_OK, "%s", err);
        total = ig_ntd_batch_entries(b);
        ig_ntd_batch_free(b);
        for (int t = 1; t <= 4; t += 3) {
            b = NULL;
            CHECK(ig_ntd_batch_run(ix, q, 0, off, 32, IG_NTD_INFGRAM, 0, total - 1, t, &b, err, sizeof err) ==
                      IG_ERR_LIMIT && !b && strstr(err, "max_entries"), "cap: %s", err);
            CHECK(ig_ntd_batch_run(ix, q, 0, off, 32, IG_NTD_INFGRAM, 0, total, t, &b, err, sizeof err) ==
                      IG_OK && ig_ntd_batch_entries(b) == total, "at the cap: %s", err);
            ig_ntd_batch_free(b);
        }
        b = NULL;
        CHECK(ig_ntd_batch_run(ix, q, 0, off, 32, IG_NTD_INFGRAM, 0, -1, 1, &b, err, sizeof err) == IG_ERR_ARG,
              "negative cap");
        /* the same from decoding states (32 states of the empty context) */
        int64_t size = ig_state_size(ix), *st = malloc((size_t)(32 * size) * sizeof *st);
        for (int64_t i = 0; i < 32; i++) CHECK(ig_state_init(ix, q, 0, st + i * size, ig_state_size(ix), err,
                                                             sizeof err) == IG_OK, "%s", err);
        for (int t = 1; t <= 4; t += 3) {
            b = NULL;
            CHECK(ig_ntd_batch_states(ix, st, 32 * size, 32, 0, total - 1, t, &b, err,
                                      sizeof err) == IG_ERR_LIMIT && !b &&
                      strstr(err, "max_entries"), "states cap: %s", err);
            CHECK(ig_ntd_batch_states(ix, st, 32 * size, 32, 0, total, t, &b, err, sizeof err) == IG_OK &&
                      ig_ntd_batch_entries(b) == total, "states at the cap: %s", err);
            ig_ntd_batch_free(b);
        }
        CHECK(ig_ntd_batch_states(ix, st, 32 * size, 32, 0, -1, 1, &b, err, sizeof err) == IG_ERR_ARG,
              "states negative cap");
        free(st);
    }
    /* a state extended token by token == the state of the whole context */
    int64_t size = ig_state_size(ix), st[8], whole[8];
    for (int64_t d = 0; d < c->n_docs; d += 7) {
        const uint32_t *x = c->ids + c->offsets[d];
        int64_t len = c->offsets[d + 1] - c->offsets[d];
        ig_state_init(ix, x, 0, st, ig_state_size(ix), err, sizeof err);
        for (int64_t i = 1; i <= len; i++) CHECK(ig_state_extend(ix, st, ig_state_size(ix), x, i, st, err,
                                                                 sizeof err) == IG_OK, "%s", err);
        ig_state_init(ix, x, len, whole, ig_state_size(ix), err, sizeof err);
        CHECK(!memcmp(st, whole, (size_t)size * sizeof *st), "extended state differs");
    }
}

/* ------------------------------------------------------------------ hostile arguments */

/* Every call that takes a state refuses a buffer length other than the index's state size
   (IG_ERR_ARG, naming the length), before reading the state or writing an output: the length is
   the caller's buffer, so a short one (another index's state) is never read past its end. */
static void test_state_lengths(ig_index *ix, const int64_t *st, int64_t size) {
    uint32_t q[2] = {0, 1}, tok[4];
    int64_t off[2] = {0, 2}, seq[2] = {0, 1}, o[16], n_out, match, tt[4], tp[4];
    uint64_t cnt[4], pc[4], total;
    int64_t sl[4];
    double pr[4];
    int source;
    ig_prob p;
    ig_ntd_batch *b = NULL;
    ig_draft_params prm = {4, 1, 0.0, 1, 0.0, 0.0, 0, 0, IG_DRAFT_INFGRAM, -1, -1, -1};
    int64_t lens[] = {0, 1, size - 1, size + 1, 2 * size, -1, INT64_MAX};
    for (size_t k = 0; k < sizeof lens / sizeof *lens; k++) {
        int64_t len = lens[k];
#define REFUSED(call, what)                                                                            \
    CHECK((call) == IG_ERR_ARG && strstr(err, "int64 values given"), "%s refuses state_len %lld: %s", what, \
          (long long)len, err)
        for (int i = 0; i < 16; i++) o[i] = -7;
        REFUSED(ig_state_init(ix, q, 2, o, len, err, sizeof err), "state_init");
        CHECK(o[0] == -7 && o[1] == -7, "state_init wrote with state_len %lld", (long long)len);
        REFUSED(ig_state_extend(ix, st, len, q, 2, o, err, sizeof err), "state_extend");
        REFUSED(ig_state_prob(ix, st, len, 1, &p, err, sizeof err), "state_prob");
        REFUSED(ig_draft_chain(ix, st, len, 4, 1, 0, 0, -1, tok, cnt, pc, &n_out, err, sizeof err), "draft_chain");
        REFUSED(ig_draft_children(ix, st, len, 2, tok, cnt, o, &total, &n_out, err, sizeof err), "draft_children");
        REFUSED(ig_draft_advance(ix, st, len, q, 2, 1, o, err, sizeof err), "draft_advance");
        REFUSED(ig_draft_tree(ix, st, len, 4, 2, 2, 0.0, -1, tt, tp, pr, &n_out, err, sizeof err), "draft_tree");
        REFUSED(ig_draft_step(ix, o, len, seq, 2, 1, &prm, 4, tt, cnt, pc, &n_out, &match, &source, err, sizeof err),
                "draft_step");
        if (len > INT64_MAX / 2) continue; /* (the batch lengths below are 1 state's) */
        REFUSED(ig_state_extend_batch(ix, st, len, q, 2, off, 1, o, 1, err, sizeof err), "state_extend_batch");
        REFUSED(ig_state_prob_batch(ix, st, len, 1, q, cnt, pc, sl, NULL, 1, err, sizeof err), "state_prob_batch");
        REFUSED(ig_ntd_batch_states(ix, st, len, 1, 0, 0, 1, &b, err, sizeof err), "ntd_batch_states");
        CHECK(!b, "ntd_batch_states made a batch");
#undef REFUSED
    }
    /* n states need exactly n * size values; none need none */
    CHECK(ig_state_prob_batch(ix, st, size, 0, q, cnt, pc, sl, NULL, 1, err, sizeof err) == IG_ERR_ARG,
          "0 states in a state's values");
    CHECK(ig_ntd_batch_states(ix, st, size, INT64_MAX / 2, 0, 0, 1, &b, err, sizeof err) == IG_ERR_ARG && !b,
          "n * size overflows");
    /* ix == NULL: prompt lookup only, the state (and its length) ignored */
    CHECK(ig_draft_step(NULL, NULL, 0, seq, 2, 1, &prm, 4, tt, cnt, pc, &n_out, &match, &source, err, sizeof err) ==
              IG_OK, "draft_step without an index: %s", err);
}

static void test_arguments(const ref_corpus *c, ig_index *ix) {
    uint32_t q[4] = {0, 1, c->vocab, c->sep};
    uint64_t cnt;
    int64_t n, lo[4], hi[4];
    CHECK(ig_count(ix, q, -1, &cnt, err, sizeof err) == IG_ERR_ARG, "negative length");
    CHECK(ig_count(ix, NULL, 3, &cnt, err, sizeof err) == IG_ERR_ARG, "NULL ids");
    CHECK(ig_count(ix, q, 3, &cnt, err, sizeof err) == IG_ERR_ARG && strstr(err, "outside"), "id == vocab: %s", err);
    CHECK(ig_count(ix, q + 3, 1, &cnt, err, sizeof err) == IG_ERR_ARG && strstr(err, "separator"), "separator: %s", err);
    CHECK(ig_count(NULL, q, 1, &cnt, err, sizeof err) == IG_ERR_ARG, "closed index");
    CHECK(ig_count_fast(ix, q, INT64_MIN) < 0 && ig_count_fast(ix, q + 2, 1) < 0, "count_fast");
    CHECK(ig_find(ix, q, -5, lo, hi, err, sizeof err) == IG_ERR_ARG, "find");
    uint32_t toks[2];
    uint64_t cnts[2], total;
    CHECK(ig_ntd(ix, q, 0, toks, cnts, 1, &n, &total, err, sizeof err) == IG_ERR_CAPACITY && n > 1, "ntd capacity");
    /* batches: offsets outside the values, decreasing, negative counts */
    int64_t off[3] = {0, 5, 2}, off2[3] = {-1, 0, 1}, off3[2] = {0, INT64_MAX};
    uint64_t out[2];
    CHECK(ig_count_batch(ix, q, 2, off, 2, out, 1, err, sizeof err) == IG_ERR_ARG, "offsets beyond values");
    CHECK(ig_count_batch(ix, q, 2, off2, 2, out, 1, err, sizeof err) == IG_ERR_ARG, "negative offset");
    CHECK(ig_count_batch(ix, q, 2, off3, 1, out, 1, err, sizeof err) == IG_ERR_ARG, "huge offset");
    CHECK(ig_count_batch(ix, q, 2, off, -1, out, 1, err, sizeof err) == IG_ERR_ARG, "negative n");
    ig_ntd_batch *b = NULL;
    CHECK(ig_ntd_batch_run(ix, q, 2, off2, 1, 7, 0, 0, 1, &b, err, sizeof err) == IG_ERR_ARG && !b, "ntd mode");
    CHECK(ig_ntd_batch_run(ix, q, 2, off2, 1, IG_NTD_NGRAM, -1, 0, 1, &b, err, sizeof err) == IG_ERR_ARG, "max_support");
    /* forged decoding states (fuzz/regressions/query/ubsan-forged-state-suffix-len) */
    int64_t size = ig_state_size(ix), st[8], o[8];
    ig_prob p;
    ig_state_init(ix, q, 2, st, ig_state_size(ix), err, sizeof err);
    int64_t forged[][2] = {{0, INT64_MAX}, {0, -1}, {0, IG_MAX_SHARD_TOKENS + 1}, {1, -1}, {1, INT64_MAX},
                           {2, -1}, {3, INT64_MAX}, {2, INT64_MIN}};
    for (size_t k = 0; k < sizeof forged / sizeof *forged; k++) {
        memcpy(o, st, (size_t)size * sizeof *st);
        o[forged[k][0]] = forged[k][1];
        CHECK(ig_state_prob(ix, o, ig_state_size(ix), 0, &p, err, sizeof err) == IG_ERR_ARG, "forged state %zu", k);
        CHECK(ig_state_extend(ix, o, ig_state_size(ix), q, 2, o, err, sizeof err) == IG_ERR_ARG,
              "forged state extend %zu", k);
    }
    CHECK(ig_state_extend(ix, st, ig_state_size(ix), q, 0, o, err, sizeof err) == IG_ERR_ARG, "extend with no token");
    test_state_lengths(ix, st, size);
    /* document search: forged offsets and distances (fuzz/regressions/query/ubsan-term-offset-overflow,
       ubsan-max-diff-tokens-overflow) */
    uint32_t ids[3] = {0, 1, 0};
    int64_t toff[3] = {0, 2, 3}, bad_toff[3] = {0, INT64_MIN, 3}, coff[3] = {0, 1, 2}, docs[64], nd;
    ig_search_opts so = {1000, INT64_MAX, 1, IG_SEARCH_CHECK_AUTO};
    ig_search_stats stats;
    CHECK(ig_search_docs(ix, ids, bad_toff, 2, coff, 2, &so, docs, 64, &nd, &stats, err, sizeof err) == IG_ERR_ARG,
          "term offsets");
    CHECK(ig_search_docs(ix, ids, toff, 2, coff, 2, &so, docs, 64, &nd, &stats, err, sizeof err) == IG_OK, "%s", err);
    uint64_t far = stats.num_matches;
    so.max_diff_tokens = -1;
    CHECK(ig_search_docs(ix, ids, toff, 2, coff, 2, &so, docs, 64, &nd, &stats, err, sizeof err) == IG_OK &&
          stats.num_matches == far, "an unbounded distance == no distance");
    so.max_diff_tokens = -2;
    CHECK(ig_search_docs(ix, ids, toff, 2, coff, 2, &so, docs, 64, &nd, &stats, err, sizeof err) == IG_ERR_ARG, "-2");
    so.max_diff_tokens = -1;
    so.max_clause_freq = 0;
    CHECK(ig_search_docs(ix, ids, toff, 2, coff, 2, &so, docs, 64, &nd, &stats, err, sizeof err) == IG_ERR_ARG, "freq");
    /* the LM: cache sizes and options (fuzz/regressions/query/ubsan-lm-cache-entries-overflow,
       nan-backoff-decay-above-1) */
    ig_lm *lm = NULL;
    CHECK(ig_lm_new(&lm, ix, 8, INT64_MAX, err, sizeof err) == IG_ERR_ARG && !lm, "cache_entries");
    CHECK(ig_lm_new(&lm, ix, (1 << 20) + 1, 0, err, sizeof err) == IG_ERR_ARG, "max_context");
    CHECK(ig_lm_new(&lm, ix, 8, 1000, err, sizeof err) == IG_OK, "%s", err);
    double prob[4];
    ig_lm_config cfg = {IG_LM_BACKOFF, 8, 1, 0, 1e300, 0, {0}};
    CHECK(ig_lm_score(lm, &cfg, q, 2, prob, NULL, NULL, err, sizeof err) == IG_ERR_ARG, "decay 1e300");
    cfg.decay = NAN;
    CHECK(ig_lm_score(lm, &cfg, q, 2, prob, NULL, NULL, err, sizeof err) == IG_ERR_ARG, "decay NaN");
    cfg.decay = 1.0;
    CHECK(ig_lm_score(lm, &cfg, q, 2, prob, NULL, NULL, err, sizeof err) == IG_OK, "decay 1: %s", err);
    cfg.floor = NAN;
    CHECK(ig_lm_score(lm, &cfg, q, 2, prob, NULL, NULL, err, sizeof err) == IG_ERR_ARG, "floor NaN");
    cfg.floor = 0;
    cfg.max_context = 9;
    CHECK(ig_lm_score(lm, &cfg, q, 2, prob, NULL, NULL, err, sizeof err) == IG_ERR_ARG, "max_context above handle");
    ig_lm_free(lm);
}

/* ------------------------------------------------------------------ damaged files */

static void copy_file(const char *from, const char *to, size_t keep, long flip) {
    FILE *f = fopen(from, "rb");
    fseek(f, 0, SEEK_END);
    size_t n = (size_t)ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *p = malloc(n + 1);
    if (fread(p, 1, n, f) != n) abort();
    fclose(f);
    if (flip >= 0 && (size_t)(flip / 8) < n) p[flip / 8] ^= (uint8_t)(1u << (flip % 8));
    f = fopen(to, "wb");
    fwrite(p, 1, keep < n ? keep : n, f);
    fclose(f);
    free(p);
}

static size_t file_size(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 ? (size_t)st.st_size : 0;
}

/* Queries that touch every code path reading the files. */
static void query_damaged(ig_index *ix) {
    ig_info info;
    ig_get_info(ix, &info); /* (a damaged header may have changed the vocabulary) */
    uint32_t vocab = info.vocab_size, q[3] = {0, 1 % vocab, 2 % vocab}, toks[512];
    uint64_t cnts[512], total, cnt, num[3], den[3];
    int64_t n, sl[3], len;
    for (int64_t l = 0; l <= 3; l++) {
        ig_count(ix, q, l, &cnt, err, sizeof err);
        ig_ntd(ix, q, l, toks, cnts, 512, &n, &total, err, sizeof err);
        ig_infgram_suffix(ix, q, l, &n, err, sizeof err);
    }
    ig_score(ix, q, 3, num, den, sl, NULL, err, sizeof err);
    for (int64_t d = 0; d < 8; d++) ig_get_doc(ix, 0, d, toks, 512, &len, err, sizeof err);
    int64_t term_off[2] = {0, 2}, clause_off[2] = {0, 1}, docs[8];
    ig_search_opts so = {100, -1, 1, 0};
    ig_search_stats stats;
    ig_search_docs(ix, q, term_off, 1, clause_off, 1, &so, docs, 8, &n, &stats, err, sizeof err);
    ig_lm *lm;
    if (vocab <= (1u << 20) && ig_lm_new(&lm, ix, 4, 0, err, sizeof err) == IG_OK) {
        double *dist = malloc(((size_t)vocab + 1) * sizeof *dist), prob[3];
        ig_lm_config cfg = {IG_LM_INFGRAM, 4, 1, 0, 0.5, 0, {0}};
        ig_lm_score(lm, &cfg, q, 3, prob, NULL, NULL, err, sizeof err);
        ig_lm_distribution(lm, &cfg, q, 1, dist, err, sizeof err);
        free(dist);
        ig_lm_free(lm);
    }
}

static void test_damaged_files(const ref_corpus *c) {
    static const char *const names[] = {"tokens.bin", "sa.bin", "docs.bin", "unigram.bin", "ntdcache.bin"};
    char dir[4096], src[4200], dst[4200];
    snprintf(dir, sizeof dir, "%s/damaged", ref_tmpdir());
    mkdir(dir, 0700);
    int opened = 0, refused = 0;
    for (int k = 0; k < 5; k++) {
        snprintf(src, sizeof src, "%s/%s", c->dirs[0], names[k]);
        size_t size = file_size(src);
        if (!size) continue;
        /* sizes: every header byte, then spread over the body; bit flips likewise */
        for (long v = 0; v < 2 * (long)size + 200; v += v < 80 ? 1 : 1 + v / 6) {
            int truncate = v % 2 == 0;
            for (int j = 0; j < 5; j++) {
                char a[4200], b[4200];
                snprintf(a, sizeof a, "%s/%s", c->dirs[0], names[j]);
                snprintf(b, sizeof b, "%s/%s", dir, names[j]);
                if (j != k) copy_file(a, b, (size_t)-1, -1);
            }
            snprintf(dst, sizeof dst, "%s/%s", dir, names[k]);
            if (truncate) copy_file(src, dst, (size_t)v / 2 < size ? (size_t)v / 2 : size - 1, -1);
            else copy_file(src, dst, (size_t)-1, v * 8 / 2 + v % 8);
            const char *dp[1] = {dir};
            ig_index *ix = NULL;
            int rc = ig_open(&ix, dp, 1, err, sizeof err);
            if (rc == IG_OK) {
                CHECK(!truncate, "%s truncated to %ld bytes opened", names[k], v / 2);
                query_damaged(ix);
                ig_close(ix);
                opened++;
            } else {
                CHECK(rc == IG_ERR_FORMAT || rc == IG_ERR_IO, "rc %d", rc);
                CHECK(strstr(err, names[k]) != NULL, "message does not name %s: %s", names[k], err);
                refused++;
            }
        }
    }
    printf("  damaged files: %d opened (content changes, queries ran), %d refused with the file named\n", opened,
           refused);
}

/* ------------------------------------------------------------------ main */

/* ------------------------------------------------------------------ repetitive corpora

   The back-off from a long context (native/src/backoff.c) searches with the corpus text; its
   answers are checked against ig_infgram_prob (which searches the query: another code path) at
   every position, and the decoding states it gives (one call per token, or many tokens per
   call) against states searched from scratch. Runs, periodic stretches with a defect and copies
   of a document, in two shards. */
static void test_repetitive(void) {
    ref_corpus c;
    memset(&c, 0, sizeof c);
    c.width = 2;
    c.vocab = 50;
    c.sep = 0xFFFF;
    c.n_docs = 6;
    c.offsets = calloc(7, sizeof(int64_t));
    c.ids = malloc(2000 * sizeof(uint32_t));
    int64_t k = 0;
    uint64_t x = 12345;
    for (int64_t i = 0; i < 300; i++) c.ids[k++] = 1; /* a run */
    c.offsets[1] = k;
    for (int64_t i = 0; i < 400; i++) c.ids[k++] = i == 211 ? 9 : 2 + (uint32_t)(i % 3); /* periodic, a defect */
    c.offsets[2] = k;
    int64_t doc = k;
    for (int64_t i = 0; i < 150; i++) {
        x ^= x << 13; x ^= x >> 7; x ^= x << 17;
        c.ids[k++] = 10 + (uint32_t)(x % 30);
    }
    c.offsets[3] = k;
    for (int r = 0; r < 2; r++) { /* two more copies, one mutated */
        for (int64_t i = 0; i < 150; i++) c.ids[k++] = r && i == 70 ? 5 : c.ids[doc + i];
        c.offsets[4 + r] = k;
    }
    for (int64_t i = 0; i < 120; i++) c.ids[k++] = i % 40 < 20 ? 1 : 2 + (uint32_t)(i % 3);
    c.offsets[6] = k;
    c.n_shards = 2;
    c.shard_doc[0] = 0, c.shard_doc[1] = 3, c.shard_doc[2] = 6;
    ref_corpus_texts(&c);
    ig_index *ix = NULL;
    if (ref_corpus_write(&c, ref_tmpdir(), "repetitive", 0) || ref_corpus_open(&c, &ix)) {
        CHECK(0, "repetitive corpus");
        ref_corpus_free(&c);
        return;
    }
    /* queries: runs past the corpus's, periodic past it, the document repeated, and a mix */
    enum { QN = 900 };
    static uint32_t q[4][QN];
    for (int64_t i = 0; i < QN; i++) {
        q[0][i] = 1;
        q[1][i] = 2 + (uint32_t)(i % 3);
        q[2][i] = c.ids[doc + i % 150];
        q[3][i] = (i / 97) % 3 == 0 ? 1 : (i / 97) % 3 == 1 ? 2 + (uint32_t)(i % 3) : c.ids[doc + (i * 7) % 150];
    }
    static uint64_t num[QN], den[QN];
    static int64_t sl[QN];
    for (int j = 0; j < 4; j++) {
        CHECK(ig_score(ix, q[j], QN, num, den, sl, NULL, err, sizeof err) == IG_OK, "repetitive score");
        int bad = 0;
        for (int64_t i = 0; i < QN && !bad; i++) {
            ig_prob p;
            ig_infgram_prob(ix, q[j], i, q[j][i], &p, err, sizeof err);
            bad = p.count != num[i] || p.prompt_count != den[i] || p.suffix_len != sl[i];
            CHECK(!bad, "repetitive score query %d position %lld: suffix %lld want %lld", j, (long long)i,
                  (long long)sl[i], (long long)p.suffix_len);
        }
        for (int64_t i = 0; i < QN; i += 151) /* the reference itself, by brute force */
            CHECK(sl[i] == ref_naive_suffix(&c, q[j], i, i), "repetitive naive suffix");
        /* decoding states: one token a call, and 1..64 tokens a call */
        int64_t st[6], one[6], many[6], want[6];
        ig_state_init(ix, q[j], 0, st, ig_state_size(ix), err, sizeof err);
        memcpy(many, st, sizeof st);
        int64_t done = 0;
        for (int64_t i = 1; i <= QN; i++) {
            CHECK(ig_state_extend(ix, st, ig_state_size(ix), q[j], i, one, err, sizeof err) == IG_OK, "%s", err);
            memcpy(st, one, sizeof st);
            if (i % 64 == (j * 13) % 64 || i == QN) {
                CHECK(ig_draft_advance(ix, many, ig_state_size(ix), q[j], i, i - done, many, err, sizeof err) == IG_OK,
                      "%s", err);
                done = i;
                ig_state_init(ix, q[j], i, want, ig_state_size(ix), err, sizeof err);
                CHECK(!memcmp(many, want, sizeof want) && !memcmp(st, want, sizeof want),
                      "repetitive states query %d at %lld", j, (long long)i);
            }
        }
    }
    ig_close(ix);
    ref_corpus_free(&c);
}

int main(void) {
    struct {
        int width;
        uint32_t vocab;
        int shards;
        int64_t ntd_cost;
    } cases[] = {{1, 7, 1, 2}, {2, 300, 3, 0}, {4, 70000, 2, 1}};
    for (size_t k = 0; k < sizeof cases / sizeof *cases; k++) {
        ref_corpus c;
        char name[32];
        ref_corpus_make(&c, cases[k].width, cases[k].vocab, 30, 50, cases[k].shards, 99 + k);
        snprintf(name, sizeof name, "case%zu", k);
        ig_index *ix = NULL;
        if (ref_corpus_write(&c, ref_tmpdir(), name, cases[k].ntd_cost) || ref_corpus_open(&c, &ix)) return 2;
        printf("corpus %zu: width %d, vocab %u, %d shards\n", k, cases[k].width, cases[k].vocab, cases[k].shards);
        test_queries(&c, ix);
        test_batches(&c, ix);
        if (cases[k].shards > 1) { /* the same checks with every step on the shard pool */
            CHECK(ig_set_shard_mode(ix, IG_SHARDS_PARALLEL) == IG_OK, "parallel mode");
            test_queries(&c, ix);
            test_batches(&c, ix);
            CHECK(ig_shard_pool_steps(ix) > 0, "the pool ran no step");
            CHECK(ig_set_shard_mode(ix, IG_SHARDS_AUTO) == IG_OK, "auto mode");
        }
        test_arguments(&c, ix);
        test_draft_steps(&c, ix);
        test_draft_step_batch(&c, ix);
        test_diff_drafts(&c, ix, name);
        ig_close(ix);
        if (k != 1) test_damaged_files(&c);
        ref_corpus_free(&c);
    }
    test_repetitive();
    printf("test_core: %d checks, %d failures\n", checks, failures);
    return failures ? 1 : 0;
}
