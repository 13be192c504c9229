"""`python -m skillret ...`: the `pipeline` command line (as the `skillret` console script)."""

from . import main

main()
