"""`python -m attnviz` is the `attnviz` command."""

import sys

from attnviz.cli import main

if __name__ == "__main__":
    sys.exit(main())
