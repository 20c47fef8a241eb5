"""`python -m dynstep ...` is the `dynstep` command."""

import sys

from .cli import main

sys.exit(main())
