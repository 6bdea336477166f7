/* fuzz_open.c - opening index shards whose files are arbitrary bytes, then querying whatever
 * opened.
 *
 * Input: records [tag u8][length u32 LE][bytes], one per file: tag & 7 picks the file
 * (tokens.bin, sa.bin, docs.bin, unigram.bin, ntdcache.bin), bit 3 the shard (0 or 1). A file
 * without a record is absent. The seeds (fuzz/corpus/open/) are real small indexes in this form
 * (fuzz/make_seeds.py), so mutations start from valid files. Opening must either fail with an
 * IG_ERR_* code and a message naming the file, or succeed; every query on an opened index must
 * return without reading outside the mapped files, looping forever or writing past its outputs.
 */
#include "fz.h"

static const char *const FILES[5] = {"tokens.bin", "sa.bin", "docs.bin", "unigram.bin", "ntdcache.bin"};

static void write_file(const char *dir, const char *name, const uint8_t *p, size_t n) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    if (!f) abort();
    if (n && fwrite(p, 1, n, f) != n) abort();
    fclose(f);
}

/* Every query type, with a handful of arguments, on an index that opened. */
static void query_all(ig_index *ix, const uint8_t *data, size_t size) {
    char err[512];
    ig_info info;
    ig_get_info(ix, &info);
    uint32_t V = info.vocab_size;
    uint32_t qs[6][4] = {{0}, {1, 0}, {0, 1, 2}, {2, 2, 2, 2}, {0, 0}, {1}};
    for (int k = 0; k < 6; k++) /* ids from the input too, kept inside the vocabulary */
        for (int j = 0; j < 4; j++)
            if (size > (size_t)(k * 4 + j)) qs[k][j] = data[size - 1 - (size_t)(k * 4 + j)] % (V < 8 ? V : 8);
    uint32_t toks[64];
    uint64_t cnts[64];
    for (int k = 0; k < 6; k++) {
        for (int64_t len = 0; len <= 4; len++) {
            uint64_t c, total;
            int64_t n_out, sl, lo[2], hi[2];
            ig_count(ix, qs[k], len, &c, err, sizeof err);
            ig_count_fast(ix, qs[k], len);
            ig_find(ix, qs[k], len, lo, hi, err, sizeof err);
            ig_ntd(ix, qs[k], len, toks, cnts, 64, &n_out, &total, err, sizeof err);
            ig_infgram_suffix(ix, qs[k], len, &sl, err, sizeof err);
            ig_prob p;
            ig_infgram_prob(ix, qs[k], len, qs[k][0], &p, err, sizeof err);
            ig_ngram_prob(ix, qs[k], len, qs[k][0], &p, err, sizeof err);
        }
        uint64_t num[4], den[4];
        int64_t slen[4];
        uint8_t sp[4];
        ig_score(ix, qs[k], 4, num, den, slen, sp, err, sizeof err);
        int64_t st[6], st2[6];
        if (ig_state_init(ix, qs[k], 3, st, ig_state_size(ix), err, sizeof err) == IG_OK) {
            ig_state_extend(ix, st, ig_state_size(ix), qs[k], 4, st2, err, sizeof err);
            ig_prob p;
            ig_state_prob(ix, st2, ig_state_size(ix), qs[k][1], &p, err, sizeof err);
        }
    }
    /* batches: every query at once, several threads */
    uint32_t values[24];
    int64_t offsets[7] = {0};
    for (int k = 0; k < 6; k++) {
        memcpy(values + 4 * k, qs[k], sizeof qs[k]);
        offsets[k + 1] = 4 * (k + 1) - (k % 3);
    }
    uint64_t counts[6], pc[6], num[24], den[24];
    int64_t sl[24];
    uint8_t sp[24];
    uint32_t next[6] = {0, 1, 0, 1, 2, 0};
    for (int k = 0; k < 6; k++) next[k] %= V;
    ig_count_batch(ix, values, 24, offsets, 6, counts, 2, err, sizeof err);
    ig_prob_batch(ix, values, 24, offsets, 6, next, 1, counts, pc, sl, sp, 2, err, sizeof err);
    ig_score_batch(ix, values, 24, offsets, 6, num, den, sl, sp, 2, NULL, err, sizeof err);
    for (int64_t support = 0; support <= 3; support += 3) {
        ig_ntd_batch *b = NULL;
        if (ig_ntd_batch_run(ix, values, 24, offsets, 6, IG_NTD_INFGRAM, support, 0, 2, &b, err, sizeof err) == IG_OK) {
            int64_t e = ig_ntd_batch_entries(b), ro[7];
            uint32_t *t = malloc((size_t)(e ? e : 1) * sizeof *t);
            uint64_t *c = malloc((size_t)(e ? e : 1) * sizeof *c);
            ig_ntd_batch_copy(b, ro, t, c, e, NULL, NULL, NULL, NULL, err, sizeof err);
            free(t);
            free(c);
            ig_ntd_batch_free(b);
        }
    }
    /* documents and positions */
    for (int s = 0; s < info.n_shards; s++) {
        uint64_t nt, tl, nd;
        int w;
        ig_shard_info(ix, s, &nt, &tl, &nd, &w);
        for (int64_t d = 0; d < (int64_t)nd && d < 64; d++) {
            uint32_t out[256];
            int64_t len;
            ig_get_doc(ix, s, d, out, 256, &len, err, sizeof err);
        }
        for (int64_t r = 0; r < (int64_t)nt && r < 64; r++) {
            int64_t pos, doc, off;
            if (ig_sa_position(ix, s, r, &pos, err, sizeof err) == IG_OK) ig_locate(ix, s, pos, &doc, &off, err, sizeof err);
        }
    }
    /* a search and the spans of every document it returns */
    int64_t term_off[4] = {0, 1, 3, 4}, clause_off[3] = {0, 2, 3}, docs[16], n_out;
    uint32_t ids[4] = {qs[0][0], qs[2][0], qs[2][1], qs[3][0]};
    for (int64_t diff = -1; diff <= 2; diff += 3) {
        ig_search_opts o = {diff < 0 ? 1000 : 2, diff, 7, (int)(size % 3)};
        ig_search_stats stats;
        if (ig_search_docs(ix, ids, term_off, 3, clause_off, 2, &o, docs, 16, &n_out, &stats, err, sizeof err) != IG_OK)
            continue;
        for (int64_t i = 0; i < n_out && i < 4; i++) {
            int64_t offs[64];
            int32_t terms[64];
            int64_t m;
            ig_doc_spans(ix, 0, docs[i], ids, term_off, 3, offs, terms, 64, &m, err, sizeof err);
        }
    }
    /* the LM: every method scores, a distribution, a few sampled tokens */
    ig_lm *lm = NULL;
    if (V <= 4096 && ig_lm_new(&lm, ix, 6, 1024, err, sizeof err) == IG_OK) {
        double d1[1] = {0.5}, d2[1] = {1.0}, d3[1] = {1.5}, th[1] = {0.1};
        double *dist = malloc(((size_t)V + 1) * sizeof *dist);
        for (int method = 0; method < 3; method++) {
            ig_lm_config cfg = {method, 6, (int)(size & 1), 0, 0.5, 0, {6, 0, 0, 0, 1, d1, d2, d3, th}};
            double prob[4];
            int64_t slen[4];
            uint8_t sparse[4];
            ig_lm_score(lm, &cfg, qs[2], 3, prob, slen, sparse, err, sizeof err);
            ig_lm_distribution(lm, &cfg, qs[1], 2, dist, err, sizeof err);
            ig_lm_sampling smp = {0, 1.0, 0, 1.0};
            uint64_t rng[4] = {1, 2, 3, 4};
            uint32_t gen[8];
            int64_t n_gen;
            int ended;
            ig_lm_generate(lm, &cfg, &smp, qs[0], 1, 8, rng, NULL, 0, gen, NULL, NULL, &n_gen, &ended, err, sizeof err);
            smp.top_k = 2;
            ig_lm_generate(lm, &cfg, &smp, qs[0], 1, 8, rng, NULL, 0, gen, NULL, NULL, &n_gen, &ended, err, sizeof err);
        }
        int64_t rows[16 * IG_LM_NSTAT], n_rows, next_pos;
        ig_lm_levels(lm, qs[2], 3, 0, 3, 4, 1, 1, rows, 16, &n_rows, &next_pos, err, sizeof err);
        uint64_t raw[9], cont[9], types[3];
        ig_lm_count_of_counts(ix, 3, 3, raw, cont, types, err, sizeof err);
        free(dist);
        ig_lm_free(lm);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static int round = 0;
    char dirs[2][4096];
    const char *dp[2] = {dirs[0], dirs[1]};
    int have[2][5] = {{0}}, n_shards = 1;
    for (int s = 0; s < 2; s++) {
        snprintf(dirs[s], sizeof dirs[s], "%s/open%d_%d", ref_tmpdir(), round, s);
        mkdir(dirs[s], 0700);
    }
    round++;
    fz_in in = {data, size, 0};
    while (fz_more(&in)) {
        uint8_t tag = fz_u8(&in);
        uint32_t len = fz_u32(&in);
        size_t left = in.n - in.i;
        if (len > left) len = (uint32_t)left;
        int kind = tag & 7, shard = (tag >> 3) & 1;
        if (kind < 5) {
            write_file(dirs[shard], FILES[kind], in.p + in.i, len);
            have[shard][kind] = 1;
            if (shard) n_shards = 2;
        }
        in.i += len;
    }
    ig_index *ix = NULL;
    char err[1024] = "";
    int rc = ig_open(&ix, dp, n_shards, err, sizeof err);
    if (rc == IG_OK) {
        query_all(ix, data, size);
        ig_close(ix);
    } else {
        FZ_CHECK(rc == IG_ERR_FORMAT || rc == IG_ERR_IO || rc == IG_ERR_NOMEM, "open rc %d", rc);
        int named = 0; /* the message names one of the files */
        for (int k = 0; k < 5; k++) named |= strstr(err, FILES[k]) != NULL;
        FZ_CHECK(named, "open error does not name a file: %s", err);
    }
    for (int s = 0; s < 2; s++) ref_rm_tree(dirs[s]);
    return 0;
}
