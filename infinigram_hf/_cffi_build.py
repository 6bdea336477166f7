"""cffi builder (out-of-line API mode): compiles native/src/*.c into infinigram_hf._core._lib
(the compiled library inside the binding layer, infinigram_hf/_core/).

The cdef is read from the real public header so the binding can never drift from the C API.
"""
import glob
import os
import re

from cffi import FFI

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
INCLUDE = os.path.join("native", "include")
# The public API: infinigram.h (engine) plus one infinigram_<area>.h per feature area.
HEADERS = [os.path.join(ROOT, INCLUDE, "infinigram.h")] + sorted(
    glob.glob(os.path.join(ROOT, INCLUDE, "infinigram_*.h")))


def _cdef_from_header(text: str) -> str:
    """Keep declarations; turn `#define NAME value` into cffi's `#define NAME ...`."""
    lines = []
    for line in text.splitlines():
        m = re.match(r"#define\s+(IG_[A-Z_]+)\s+\S", line)
        if m:
            lines.append(f"#define {m.group(1)} ...")
        elif not line.startswith("#"):
            lines.append(line)
    return "\n".join(lines)


ffibuilder = FFI()
for header in HEADERS:
    with open(header, encoding="utf-8") as f:
        ffibuilder.cdef(_cdef_from_header(f.read()))

_sources = sorted(glob.glob(os.path.join(ROOT, "native", "src", "*.c")))
ffibuilder.set_source(
    "infinigram_hf._core._lib",
    "\n".join(f'#include "{os.path.basename(h)}"' for h in HEADERS),
    sources=[os.path.relpath(s, ROOT) for s in _sources],
    include_dirs=[INCLUDE],
    extra_compile_args=os.environ.get("INFINIGRAM_CFLAGS", "-O2 -std=c99 -D_GNU_SOURCE -fvisibility=hidden").split(),
    extra_link_args=os.environ.get("INFINIGRAM_LDFLAGS", "").split(),
)

if __name__ == "__main__":
    ffibuilder.compile(verbose=True)
