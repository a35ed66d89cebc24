"""`python -m extender` is `gang-extender`."""

import sys

from extender.cli import main

sys.exit(main())
