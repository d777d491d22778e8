"""``python -m kinetrace``: the command line (:mod:`kinetrace._cli`)."""

import sys

from kinetrace._cli import main

if __name__ == "__main__":
    sys.exit(main())
