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
# The public API: the umbrella header, which includes one infinigram_<area>.h per area.
HEADER = "infinigram.h"


def _cdef_from_header(name: str) -> str:
    """The declarations of a public header for cffi's cdef, which parses no preprocessor lines:
    local `#include "x.h"` lines are replaced by x.h's declarations (in place, so types come
    before their use), `#define IG_NAME value` becomes cffi's `#define IG_NAME ...` (the value
    is taken from the compiled header), `#ifdef __cplusplus` blocks are dropped, as are the
    remaining directives (include guards). Any other conditional block is refused: its lines
    could not be kept or dropped without a preprocessor."""
    with open(os.path.join(ROOT, INCLUDE, name), encoding="utf-8") as f:
        text = f.read()
    lines, skipping = [], False
    for line in text.splitlines():
        directive = line.strip()
        if skipping:
            skipping = directive != "#endif"
            continue
        if directive == "#ifdef __cplusplus":
            skipping = True
            continue
        include = re.match(r'#include\s+"([^"]+)"', directive)
        define = re.match(r"#define\s+(IG_[A-Z0-9_]+)\s+\S", directive)
        if include:
            lines.append(_cdef_from_header(include.group(1)))
        elif define:
            lines.append(f"#define {define.group(1)} ...")
        elif re.match(r"#\s*(if|ifdef|elif|else)\b", directive):
            raise ValueError(f"{name}: cffi cannot take the conditional block {directive!r}")
        elif not directive.startswith("#"):
            lines.append(line)
    return "\n".join(lines)


ffibuilder = FFI()
ffibuilder.cdef(_cdef_from_header(HEADER))

_sources = sorted(glob.glob(os.path.join(ROOT, "native", "src", "*.c")))
ffibuilder.set_source(
    "infinigram_hf._core._lib",
    f'#include "{HEADER}"',
    sources=[os.path.relpath(s, ROOT) for s in _sources],
    include_dirs=[INCLUDE],
    extra_compile_args=os.environ.get("INFINIGRAM_CFLAGS", "-O2 -std=c99 -D_GNU_SOURCE -fvisibility=hidden").split(),
    extra_link_args=os.environ.get("INFINIGRAM_LDFLAGS", "").split(),
)

if __name__ == "__main__":
    ffibuilder.compile(verbose=True)
