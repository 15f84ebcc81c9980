"""``python -m clshim ...`` does what the ``clshim`` command does."""

import sys

from clshim import main

sys.exit(main())
