"""`python -m tracepool`: see _cli.py, or `python -m tracepool --help`."""

import sys

from tracepool._cli import main

if __name__ == "__main__":
    sys.exit(main())
