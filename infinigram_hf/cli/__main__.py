"""`python -m infinigram_hf.cli ...`"""
import sys

from . import main

sys.exit(main())
