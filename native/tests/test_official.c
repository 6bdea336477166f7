/* test_official.c - official infini-gram shards read in place (ig_open_mixed_at), under the
 * sanitizers: the fixture built by the official indexer (tests/official/data/u16_three_shards_meta)
 * answers every n-gram of up to 3 tokens drawn from its own text (and one token more) exactly as
 * a scan of its token files, next-token distributions included; every document reads back;
 * truncated copies of each file are refused with the file named. Run from the repository root.
 */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "infinigram.h"

#define DIR "tests/official/data/u16_three_shards_meta"
#define SEP 0xFFFFu
#define MAXTOK 8192

static int failures = 0;
#define CHECK(c, ...)                                                                            \
    do {                                                                                         \
        if (!(c)) {                                                                              \
            if (failures++ < 20) { fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__); fprintf(stderr, __VA_ARGS__); fputc('\n', stderr); } \
        }                                                                                        \
    } while (0)

static uint16_t text[3][MAXTOK];
static int64_t len[3];

static void load(void) {
    for (int s = 0; s < 3; s++) {
        char path[256];
        snprintf(path, sizeof path, DIR "/tokenized.%d", s);
        FILE *f = fopen(path, "rb");
        if (!f) { perror(path); exit(2); }
        len[s] = (int64_t)fread(text[s], 2, MAXTOK, f);
        fclose(f);
    }
}

/* Occurrences of q in the documents (never across a separator), and next-token counts. */
static uint64_t scan(const uint32_t *q, int64_t m, uint64_t *next /* SEP + 1 entries or NULL */) {
    uint64_t c = 0;
    for (int s = 0; s < 3; s++)
        for (int64_t i = 0; i + m <= len[s]; i++) {
            int64_t k = 0;
            while (k < m && text[s][i + k] == q[k]) k++;
            if (k < m) continue;
            c++;
            if (next) next[i + m < len[s] ? text[s][i + m] : SEP]++;
        }
    return c;
}

static ig_index *open_dir(const char *dir, char *err, size_t errlen, int *rc) {
    int fds[3];
    const char *names[3] = {dir, dir, dir}, *sfx[3] = {".0", ".1", ".2"};
    for (int i = 0; i < 3; i++) fds[i] = open(dir, O_RDONLY | O_DIRECTORY);
    ig_index *ix = NULL;
    *rc = ig_open_mixed_at(&ix, fds, names, sfx, 3, 2, 65001, err, errlen);
    for (int i = 0; i < 3; i++) close(fds[i]);
    return ix;
}

int main(void) {
    char err[512];
    int rc;
    load();
    ig_index *ix = open_dir(DIR, err, sizeof err, &rc);
    CHECK(rc == IG_OK, "open: %s", err);
    if (rc) return 1;
    static uint64_t want[SEP + 1];
    uint32_t toks[4096];
    uint64_t cnts[4096], total;
    int64_t n, checks = 0;
    for (int s = 0; s < 3; s++)
        for (int64_t i = 1; i < len[s]; i++)
            for (int64_t m = 1; m <= 3 && i + m <= len[s]; m++) {
                uint32_t q[4];
                for (int64_t k = 0; k < m; k++) q[k] = text[s][i + k];
                if (q[m - 1] == SEP) break;
                for (int extra = 0; extra < 2; extra++) {
                    int64_t qm = m + extra;
                    if (extra) q[m] = (uint32_t)((i * 7 + m) % 700);
                    memset(want, 0, sizeof want);
                    uint64_t c = scan(q, qm, want), got = 0;
                    CHECK(ig_count(ix, q, qm, &got, err, sizeof err) == IG_OK && got == c,
                          "count shard %d pos %lld len %lld: %llu vs %llu", s, (long long)i, (long long)qm,
                          (unsigned long long)got, (unsigned long long)c);
                    rc = ig_ntd(ix, q, qm, toks, cnts, 4096, &n, &total, err, sizeof err);
                    CHECK(rc == IG_OK && total == c, "ntd total");
                    uint64_t sum = 0;
                    for (int64_t j = 0; j < n && !rc; j++) {
                        CHECK(j == 0 || toks[j] > toks[j - 1], "ntd ids not increasing");
                        CHECK(cnts[j] == want[toks[j]], "ntd count of %u: %llu vs %llu", toks[j],
                              (unsigned long long)cnts[j], (unsigned long long)want[toks[j]]);
                        sum += cnts[j];
                    }
                    CHECK(sum == c, "ntd sums to %llu, count %llu", (unsigned long long)sum, (unsigned long long)c);
                    checks++;
                }
            }
    /* every document reads back: the text between separators */
    int64_t doc = 0;
    for (int s = 0; s < 3; s++) {
        int64_t start = 1, d = 0;
        for (int64_t i = 1; i <= len[s]; i++) {
            if (i < len[s] && text[s][i] != SEP) continue;
            uint32_t out[MAXTOK];
            int64_t got;
            rc = ig_get_doc(ix, s, d, out, MAXTOK, &got, err, sizeof err);
            CHECK(rc == IG_OK && got == i - start, "doc %lld length", (long long)doc);
            for (int64_t k = 0; k < got && !rc; k++) CHECK(out[k] == text[s][start + k], "doc %lld token %lld", (long long)doc, (long long)k);
            d++, doc++, start = i + 1;
        }
    }
    ig_close(ix);

    /* damaged copies: each file truncated by one byte is refused, naming it */
    const char *files[] = {"tokenized.1", "table.1", "offset.1"};
    for (int f = 0; f < 3; f++) {
        char tmp[] = "/tmp/ig_official_XXXXXX";
        if (!mkdtemp(tmp)) return 2;
        const char *all[] = {"tokenized", "table", "offset"};
        for (int a = 0; a < 3; a++)
            for (int s = 0; s < 3; s++) {
                char src[256], dst[256];
                snprintf(src, sizeof src, DIR "/%s.%d", all[a], s);
                snprintf(dst, sizeof dst, "%s/%s.%d", tmp, all[a], s);
                FILE *in = fopen(src, "rb"), *out = fopen(dst, "wb");
                static char buf[1 << 16];
                size_t k = fread(buf, 1, sizeof buf, in);
                char name[64];
                snprintf(name, sizeof name, "%s.%d", all[a], s);
                if (strcmp(name, files[f]) == 0) k--;
                fwrite(buf, 1, k, out);
                fclose(in);
                fclose(out);
            }
        ig_index *bad = open_dir(tmp, err, sizeof err, &rc);
        CHECK(rc == IG_ERR_FORMAT && !bad && strstr(err, files[f]), "truncated %s: rc %d, %s", files[f], rc, err);
        ig_close(bad);
        for (int a = 0; a < 3; a++)
            for (int s = 0; s < 3; s++) {
                char dst[256];
                snprintf(dst, sizeof dst, "%s/%s.%d", tmp, all[a], s);
                unlink(dst);
            }
        rmdir(tmp);
    }
    printf("test_official: %lld queries, %d failures\n", (long long)checks, failures);
    return failures != 0;
}
