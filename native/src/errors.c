/* errors.c - error codes to messages, the helper that fills a caller's message buffer, and the
   API version the library was built with. */
#include <stdio.h>

#include "common.h"

int ig_fail(char *err, size_t errlen, int code, const char *fmt, ...) {
    if (err && errlen > 0) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, errlen, fmt, ap);
        va_end(ap);
    }
    return code;
}

const char *ig_strerror(int code) {
    switch (code) {
    case IG_OK: return "ok";
    case IG_ERR_ARG: return "invalid argument";
    case IG_ERR_IO: return "input/output error";
    case IG_ERR_FORMAT: return "invalid index file";
    case IG_ERR_NOMEM: return "out of memory";
    case IG_ERR_CAPACITY: return "output buffer too small";
    case IG_ERR_LIMIT: return "work limit reached";
    case IG_ERR_CANCELLED: return "cancelled";
    default: return "unknown error";
    }
}

int ig_api_version(void) { return IG_API_VERSION; }
