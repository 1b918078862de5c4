"""``python -m langchain_s2b``: the ``s2b`` command line."""

import sys

from langchain_s2b.cli.commands import main

if __name__ == "__main__":
    sys.exit(main())
