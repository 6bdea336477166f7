"""The bottom layer: the cffi binding of the C core (native.py: return codes -> exceptions,
pointers), token-id conversion, argument checks, the index file format and safe file access,
tokenizers (which one goes with an index), errors. Knows nothing of queries, torch or
transformers; every other layer builds on it."""
