"""`python -m dynstep ...` is the `dynstep` command."""

import sys

from .front.cli import main

sys.exit(main())
