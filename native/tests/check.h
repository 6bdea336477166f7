/* check.h - the C tests' one assertion: CHECK(cond, fmt, ...) counts a check, and on failure
 * counts it and prints where, the condition and the message (the run goes on, so that one run
 * lists every failure; main prints `checks` and `failures` and exits non-zero on any). `err` is
 * the error buffer the tests hand to the API. */
#ifndef IG_TESTS_CHECK_H
#define IG_TESTS_CHECK_H

#include <stdio.h>

static int failures, checks;
static char err[1024];

#define CHECK(cond, ...)                                                          \
    do {                                                                          \
        checks++;                                                                 \
        if (!(cond)) {                                                            \
            failures++;                                                           \
            fprintf(stderr, "FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond);       \
            fprintf(stderr, __VA_ARGS__);                                         \
            fputc('\n', stderr);                                                  \
        }                                                                         \
    } while (0)

#endif
