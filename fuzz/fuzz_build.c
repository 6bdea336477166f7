/* fuzz_build.c - building a shard from an arbitrary token stream, then checking what was built
 * against brute force: the suffix array is a permutation of the token positions in naive
 * suffix order, and counts, next-token distributions (ntdcache.bin included) and documents are
 * those of the input.
 *
 * Input: [width selector][vocab bytes][ntd cache selector][batch size] then the tokens: a byte
 * 0xFF ends a document, a byte >= 0xF0 is followed by a 32-bit id, anything else is an id
 * (taken modulo the vocabulary). Rarely a batch carries an id outside the vocabulary or
 * decreasing offsets, which the writer must refuse without damage; now and then a batch's
 * documents are added in parts of 1-5 tokens (ig_writer_add_part_w) instead.
 */
#include "fz.h"

#define MAX_TOKENS 3000

static const uint32_t *cmp_text; /* for the qsort-free adjacent comparison */
static int64_t cmp_len;

/* Naive suffix order: token values (the separator is the largest), end of text first. */
static int cmp_suffix(int64_t i, int64_t j) {
    while (i < cmp_len && j < cmp_len) {
        if (cmp_text[i] != cmp_text[j]) return cmp_text[i] < cmp_text[j] ? -1 : 1;
        i++, j++;
    }
    return i == cmp_len ? (j == cmp_len ? 0 : -1) : 1;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static int round = 0;
    char err[1024];
    fz_in in = {data, size, 0};
    ref_corpus c;
    memset(&c, 0, sizeof c);
    int sel = fz_u8(&in) % 3;
    c.width = sel == 0 ? 1 : sel == 1 ? 2 : 4;
    c.sep = sel == 0 ? 0xFFu : sel == 1 ? 0xFFFFu : 0xFFFFFFFFu;
    if (c.width == 1) c.vocab = 1 + fz_u8(&in) % 255;
    else if (c.width == 2) c.vocab = 1 + fz_u16(&in) % 65535;
    else c.vocab = fz_u8(&in) & 1 ? 1 + fz_u16(&in) + 65535u : (fz_u32(&in) | 0x1000001u) % 0xFFFFFFFEu + 1;
    static const int64_t costs[8] = {0, 1, 2, 3, 8, 64, 2048, 0};
    int64_t ntd_cost = costs[fz_u8(&in) & 7];
    int64_t batch = 1 + fz_u8(&in) % 8;

    /* the documents */
    c.ids = malloc(MAX_TOKENS * sizeof(uint32_t));
    c.offsets = malloc((MAX_TOKENS + 2) * sizeof(int64_t));
    int64_t n = 0;
    c.offsets[0] = 0;
    while (fz_more(&in) && n < MAX_TOKENS && c.n_docs < MAX_TOKENS) {
        uint8_t b = fz_u8(&in);
        if (b == 0xFF) {
            c.offsets[++c.n_docs] = n;
            continue;
        }
        c.ids[n++] = (b >= 0xF0 ? fz_u32(&in) : b) % c.vocab;
    }
    if (n > c.offsets[c.n_docs] || c.n_docs == 0) c.offsets[++c.n_docs] = n;
    c.n_shards = 1;
    c.shard_doc[0] = 0;
    c.shard_doc[1] = c.n_docs;
    ref_corpus_texts(&c);

    /* write it in batches of documents, with a rejected batch now and then */
    char dir[4096];
    snprintf(dir, sizeof dir, "%s/build%d", ref_tmpdir(), round++);
    mkdir(dir, 0700);
    ig_writer *w = NULL;
    FZ_CHECK(ig_writer_new(&w, dir, c.width, c.vocab, err, sizeof err) == IG_OK, "writer_new: %s", err);
    ig_writer_set_ntd_cache(w, ntd_cost);
    for (int64_t d = 0; d < c.n_docs; d += batch) {
        int64_t k = d + batch <= c.n_docs ? batch : c.n_docs - d;
        if (size && data[d % size] == 0xEE && c.offsets[d + k] > c.offsets[d]) {
            /* a bad id inside the batch: refused, nothing added */
            uint32_t keep = c.ids[c.offsets[d]];
            c.ids[c.offsets[d]] = c.vocab + (data[0] & 1 ? 0 : 7);
            int rc = ig_writer_add_docs(w, c.ids, c.offsets + d, k, err, sizeof err);
            FZ_CHECK(rc == IG_ERR_ARG, "writer accepted id %u >= vocab %u", c.ids[c.offsets[d]], c.vocab);
            c.ids[c.offsets[d]] = keep;
        }
        if (size && (data[(d + 1) % size] & 7) == 7) { /* now and then: each document in parts */
            for (int64_t e = d; e < d + k; e++) {
                int64_t a = c.offsets[e], b = c.offsets[e + 1], step = 1 + data[e % size] % 5;
                do {
                    int64_t m = b - a < step ? b - a : step;
                    int rc = ig_writer_add_part_w(w, c.ids + a, 4, m, a + m == b, err, sizeof err);
                    FZ_CHECK(rc == IG_OK, "add_part: %s", err);
                    a += m;
                } while (a < b);
            }
            continue;
        }
        int rc = ig_writer_add_docs(w, c.ids, c.offsets + d, k, err, sizeof err);
        FZ_CHECK(rc == IG_OK, "add_docs: %s", err);
    }
    FZ_CHECK(ig_writer_total_len(w) == c.text_len[0] && ig_writer_num_docs(w) == c.n_docs, "writer sizes");
    int rc = ig_writer_finish(w, err, sizeof err);
    ig_writer_free(w);
    FZ_CHECK(rc == IG_OK, "finish: %s", err);
    c.dirs[0] = strdup(dir);
    ig_index *ix = NULL;
    FZ_CHECK(ref_corpus_open(&c, &ix) == IG_OK, "open of a fresh build failed");

    /* the suffix array: every token position once, in naive suffix order */
    uint64_t nt, tl, nd;
    int sw;
    ig_shard_info(ix, 0, &nt, &tl, &nd, &sw);
    FZ_CHECK((int64_t)tl == c.text_len[0] && nd == (uint64_t)c.n_docs && nt == tl - nd, "shard info");
    uint8_t *seen = calloc((size_t)tl + 1, 1);
    cmp_text = c.text[0];
    cmp_len = c.text_len[0];
    int64_t prev = -1;
    for (int64_t r = 0; r < (int64_t)nt; r++) {
        int64_t pos = -1;
        FZ_CHECK(ig_sa_position(ix, 0, r, &pos, err, sizeof err) == IG_OK, "sa_position");
        FZ_CHECK(pos >= 0 && pos < (int64_t)tl && c.text[0][pos] != c.sep && !seen[pos], "SA entry %lld = %lld",
                 (long long)r, (long long)pos);
        seen[pos] = 1;
        if (prev >= 0) FZ_CHECK(cmp_suffix(prev, pos) < 0, "SA ranks %lld, %lld out of order", (long long)r - 1, (long long)r);
        prev = pos;
    }
    free(seen);

    /* unigram, then counts and distributions of the n-grams at some positions (depth 1..3 are
       answered from ntdcache.bin when it holds them) */
    uint32_t *toks = malloc(((size_t)nt + 2) * sizeof *toks);
    uint64_t *cnts = malloc(((size_t)nt + 2) * sizeof *cnts), total;
    int64_t n_out;
    for (int64_t p = 0, tried = 0; p < c.text_len[0] && tried < 40; p += 1 + p / 8, tried++) {
        for (int64_t len = 0; len <= 4; len++) {
            const uint32_t *q = c.text[0] + p;
            if (!ref_valid_ids(&c, q, len) || p + len > c.text_len[0]) break;
            uint64_t cnt;
            FZ_CHECK(ig_count(ix, q, len, &cnt, err, sizeof err) == IG_OK && cnt == ref_naive_count(&c, q, len), "count");
            rc = ig_ntd(ix, q, len, toks, cnts, (int64_t)nt + 2, &n_out, &total, err, sizeof err);
            FZ_CHECK(rc == IG_OK && total == cnt, "ntd rc %d", rc);
            uint64_t sum = 0;
            for (int64_t i = 0; i < n_out; i++) {
                uint64_t want = len ? ref_naive_count_next(&c, q, len, toks[i]) : ref_naive_count(&c, &toks[i], 1);
                FZ_CHECK(cnts[i] == want && (i == 0 || toks[i] > toks[i - 1]), "ntd entry %lld of a %lld-gram",
                         (long long)i, (long long)len);
                sum += cnts[i];
            }
            FZ_CHECK(sum == total, "ntd sum");
        }
    }
    free(toks);
    free(cnts);

    /* documents come back as they went in */
    uint32_t *doc = malloc(((size_t)n + 1) * sizeof *doc);
    for (int64_t d = 0; d < c.n_docs; d++) {
        int64_t len;
        FZ_CHECK(ig_get_doc(ix, 0, d, doc, n + 1, &len, err, sizeof err) == IG_OK, "get_doc");
        FZ_CHECK(len == c.offsets[d + 1] - c.offsets[d] &&
                 !memcmp(doc, c.ids + c.offsets[d], (size_t)len * sizeof *doc), "document %lld differs", (long long)d);
    }
    free(doc);
    ig_close(ix);
    ref_rm_tree(dir);
    ref_corpus_free(&c);
    return 0;
}
